"""Name-server registration: REGISTER_BROKER to every name server at start, every registerNameServerPeriod and
right after topic changes (coalesced); UNREGISTER_BROKER at stop. Failures are logged and retried next period.

RIP-32 (enableSlaveActingMaster): registration also carries heartbeatTimeoutMillis / enableActingMaster, and a
lightweight heartbeat goes to every name server every brokerHeartbeatInterval: BROKER_HEARTBEAT (904, oneway), or
QUERY_DATA_VERSION with compatibleWithOldNameSrv (a changed data version triggers a registration). While
`isolated` (pre-online) neither registrations nor heartbeats are sent; leaving isolation registers at once.

Talks to name servers through orbitmq.remoting + orbitmq.protocol only (never the client SDK).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from typing import Any

from orbitmq.broker.config import BrokerConfig
from orbitmq.model.enums import Perm
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from orbitmq.remoting import RemotingClient

log = logging.getLogger("orbitmq.broker.registration")

# Change-triggered registrations start at once but are spaced at least this far apart, so a burst of topic
# creations costs a handful of registrations. Java registers inside the topic creation, so a client finds the route
# right after the answer: the answers that create a topic wait for the round (next_round, wait_round).
MIN_SPACING_MS = 100
# How long an answer that makes a topic (an admin creation, a send that auto-creates it) waits for the registration
# round that carries it: Java registers inside the change, so a client may use the route at once.
ROUTE_WAIT_S = 2.0


async def wait_round(round_done: asyncio.Future[None]) -> bool:
    """Wait (bounded by ROUTE_WAIT_S) for a registration round from BrokerRegistration.next_round; False if it
    did not end in time (the answer goes out anyway: the topic is made, its route follows)."""
    try:
        await asyncio.wait_for(asyncio.shield(round_done), ROUTE_WAIT_S)
    except TimeoutError:
        log.info("a topic change is answered before the name servers confirmed it (%.0f s)", ROUTE_WAIT_S)
        return False
    return True


class BrokerRegistration:
    def __init__(self, config_fn: Callable[[], BrokerConfig], topics: Any, client: RemotingClient,
                 store_state: Callable[[], dict[str, str]] | None = None) -> None:
        self._config_fn = config_fn  # the broker's current config (ports are known only after bind)
        self._store_state = store_state  # epoch / maxOffset / confirmOffset for BROKER_HEARTBEAT
        self.isolated = False  # pre-online: no registration, no heartbeat
        self.heartbeat_count = 0
        self._topics = topics
        self._client = client
        self._wake_pending = False
        self._wake_fut: asyncio.Future[None] | None = None
        self._round_waiters: list[asyncio.Future[None]] = []  # resolved when the next round has ended
        self.master_addr: str | None = None  # from the name server's answer (slaves)
        self.ha_master_addr: str | None = None
        self.success_count = 0
        self.failure_count = 0

    def set_isolated(self, isolated: bool) -> None:
        """Pre-online switch (BrokerContext.set_isolated). Leaving isolation registers at once."""
        was = self.isolated
        self.isolated = isolated
        if was and not isolated:
            self.request_soon()

    def request_soon(self) -> None:
        """Ask for a re-registration soon (topic table changed); coalesced with other requests."""
        self._wake_pending = True
        fut = self._wake_fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def next_round(self) -> asyncio.Future[None]:
        """Ask for a re-registration and return a future that completes when a round that started after this call
        has ended (succeeded or not). Admin changes wait on it, bounded, so a topic is routable when created."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._round_waiters.append(fut)
        self.request_soon()
        return fut

    async def _sleep_until_woken(self, timeout_s: float) -> bool:
        """True if request_soon() was called (before or during the wait), False on timeout. Creates no task."""
        if self._wake_pending:
            return True
        loop = asyncio.get_running_loop()
        self._wake_fut = fut = loop.create_future()
        handle = loop.call_later(timeout_s, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            self._wake_fut = None
        return self._wake_pending

    def build_body(self) -> bytes:
        cfg = self._config_fn()
        table: dict[str, TopicConfig] = self._topics.all()
        perm = cfg.broker_permission
        if not (perm & Perm.WRITE and perm & Perm.READ):
            table = {name: TopicConfig(tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm & perm,
                                       tc.topic_filter_type, tc.topic_sys_flag, tc.order)
                     for name, tc in table.items()}
        dv = self._topics.data_version
        # stateVersion = master epoch in controller mode: name servers prefer the newer master (#6316)
        wrapper = TopicConfigSerializeWrapper(table, DataVersion(timestamp=dv.timestamp, counter=dv.counter,
                                                                 state_version=dv.state_version))
        return RegisterBrokerBody(wrapper, []).encode(compressed=cfg.compressed_register)

    def _header(self, cfg: BrokerConfig) -> dict[str, str]:
        return {
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "clusterName": cfg.broker_cluster_name,
            "brokerId": str(cfg.broker_id),
        }

    async def register_all(self) -> int:
        """One REGISTER_BROKER to every name server (concurrently); returns how many succeeded."""
        cfg = self._config_fn()
        addrs = cfg.namesrv_addrs
        if not addrs or self.isolated:
            return 0
        body = self.build_body()
        ext = self._header(cfg)
        ext["haServerAddr"] = cfg.ha_server_addr
        if cfg.enable_slave_acting_master:
            ext["heartbeatTimeoutMillis"] = str(cfg.broker_not_active_timeout_millis)
            ext["enableActingMaster"] = "true"
        ext["compressed"] = "true" if cfg.compressed_register else "false"
        ext["bodyCrc32"] = str(zlib.crc32(body) & 0x7FFFFFFF)
        timeout = cfg.register_broker_timeout_mills
        if len(addrs) == 1:  # the common case: no helper tasks
            results = [await self._register_one(addrs[0], ext, body, timeout)]
        else:
            results = await asyncio.gather(*(self._register_one(a, ext, body, timeout) for a in addrs))
        return sum(1 for ok in results if ok)

    async def _register_one(self, addr: str, ext: dict[str, str], body: bytes, timeout_ms: int) -> bool:
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext), body)
        try:
            resp = await self._client.invoke(addr, cmd, timeout_ms)
        except Exception as e:
            self.failure_count += 1
            log.warning("register broker to name server %s failed: %s", addr, e)
            return False
        if resp.code != ResponseCode.SUCCESS:
            self.failure_count += 1
            log.warning("register broker to name server %s refused: code %d %s", addr, resp.code, resp.remark)
            return False
        rext = resp.ext_fields or {}
        if rext.get("masterAddr"):
            self.master_addr = rext["masterAddr"]
        if rext.get("haServerAddr"):
            self.ha_master_addr = rext["haServerAddr"]
        self.success_count += 1
        return True

    async def unregister_all(self) -> None:
        cfg = self._config_fn()
        addrs = cfg.namesrv_addrs
        if not addrs:
            return

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._header(cfg))
            try:
                resp = await self._client.invoke(addr, cmd, min(cfg.register_broker_timeout_mills, 3000))
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("unregister from name server %s: code %d %s", addr, resp.code, resp.remark)
            except Exception as e:
                log.warning("unregister from name server %s failed: %s", addr, e)

        await asyncio.gather(*(one(a) for a in addrs))

    async def run_loop(self) -> None:
        """Periodic registration; a topic change triggers one right away (coalesced, spaced MIN_SPACING_MS)."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            period_s = self._config_fn().register_name_server_period / 1000
            if await self._sleep_until_woken(period_s):
                gap = MIN_SPACING_MS / 1000 - (loop.time() - last)
                if gap > 0:
                    await asyncio.sleep(gap)
            self._wake_pending = False  # changes made from here on trigger the next round
            waiters, self._round_waiters = self._round_waiters, []
            last = loop.time()
            try:
                await self.register_all()
            finally:
                for fut in waiters:
                    _resolve(fut)


    # ----- RIP-32 lightweight heartbeat -----
    def heartbeat_header(self, cfg: BrokerConfig) -> dict[str, str]:
        ext = self._header(cfg)
        ext["heartbeatTimeoutMills"] = str(cfg.broker_not_active_timeout_millis)
        if self._store_state is not None:
            ext.update(self._store_state())
        return ext

    async def heartbeat_all(self) -> int:
        """One heartbeat to every name server; returns how many were sent (or answered, in compatible mode)."""
        cfg = self._config_fn()
        if self.isolated or not cfg.namesrv_addrs:
            return 0
        timeout = cfg.send_heartbeat_timeout_millis
        if cfg.compatible_with_old_name_srv:
            results = await asyncio.gather(*(self._heartbeat_via_data_version(a, cfg, timeout)
                                             for a in cfg.namesrv_addrs))
        else:
            results = await asyncio.gather(*(self._heartbeat_oneway(a, cfg) for a in cfg.namesrv_addrs))
        sent = sum(1 for ok in results if ok)
        self.heartbeat_count += sent
        return sent

    async def _heartbeat_oneway(self, addr: str, cfg: BrokerConfig) -> bool:
        cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, self.heartbeat_header(cfg), oneway=True)
        try:
            await self._client.invoke_oneway(addr, cmd)
            return True
        except Exception as e:
            log.debug("heartbeat to name server %s failed: %s", addr, e)
            return False

    async def _heartbeat_via_data_version(self, addr: str, cfg: BrokerConfig, timeout_ms: int) -> bool:
        dv = self._topics.data_version
        body = DataVersion(timestamp=dv.timestamp, counter=dv.counter).to_json()
        cmd = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, self._header(cfg), body)
        try:
            resp = await self._client.invoke(addr, cmd, timeout_ms)
        except Exception as e:
            log.debug("data-version heartbeat to name server %s failed: %s", addr, e)
            return False
        if resp.code != ResponseCode.SUCCESS or (resp.ext_fields or {}).get("changed") == "true":
            self.request_soon()  # unknown to it, or its copy is stale: register in full
        return resp.code == ResponseCode.SUCCESS

    async def run_heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(max(self._config_fn().broker_heartbeat_interval, 50) / 1000)
            await self.heartbeat_all()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
