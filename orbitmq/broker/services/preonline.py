"""Pre-online (RIP-32): a restarting master takes back its slaves' newer metadata before it serves.

While a master is down, its consumers go on committing offsets on the slave (acting master, or offsets forwarded to
it) and an acting slave advances the delay offsets. A master that came back and served its own older copies would
roll those offsets back (mass re-consumption). So a MASTER (classic replication; with or without
enableSlaveActingMaster) and not skipPreOnline, at start and before it registers or answers any request:
  1. reads its group's live members from the name servers (GET_BROKER_MEMBER_GROUP 901; cluster info fallback);
  2. no live slave → online at once; else, per slave: EXCHANGE_BROKER_HA_INFO (906) with masterHaAddress,
     masterAddress, masterFlushOffset (the slave adopts that HA address and reconnects now), then waits (bounded)
     until the slave reports an HA connection to this master;
  3. pulls GET_ALL_CONSUMER_OFFSET and GET_ALL_DELAY_OFFSET from each slave and merges them in: the newer data
     version is kept and, whatever the versions, per queue the larger offset wins (no offset ever goes down);
  4. persists the tables and leaves isolation (ctx.set_isolated(False)).
The whole run is bounded (PRE_ONLINE_TIMEOUT_S): a dead or hung slave delays the master's start, never blocks it.
It runs inside start(), i.e. before the broker's router accepts requests and before the first registration, so no
client can read the stale copy in between. Runtime info: preOnline=done|no-slave|no-namesrv|timeout|failed,
preOnlineDetail, preOnlineMs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.services import ServiceEnv

log = logging.getLogger(__name__)

MASTER_ID = 0
PRE_ONLINE_TIMEOUT_S = 15.0  # the whole pre-online, whatever the slaves do
HA_WAIT_S = 10.0  # per slave: how long to wait for its HA connection after the 906
POLL_S = 0.1
REQUEST_TIMEOUT_MS = 3000


class PreOnlineService:
    name = "preonline"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv, *, timeout_s: float = PRE_ONLINE_TIMEOUT_S,
                 ha_wait_s: float = HA_WAIT_S) -> None:
        self.ctx = ctx
        self.env = env
        self.timeout_s = timeout_s
        self.ha_wait_s = ha_wait_s
        self.state = "pending"
        self.details: list[str] = []
        self.elapsed_ms = -1
        extras = getattr(ctx, "runtime_extras", None)
        if isinstance(extras, list):
            extras.append(self.runtime)

    # ---- service protocol ----------------------------------------------------------------------------
    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {}

    async def start(self) -> None:
        self._set_isolated(True)
        began = time.monotonic()
        self.state = "running"
        try:
            self.state = await asyncio.wait_for(self.pre_online(), self.timeout_s)
        except TimeoutError:
            self.state = "timeout"
            self.details.append(f"gave up after {self.timeout_s:g} s")
        except (OrbitMQError, OSError, ValueError, TypeError) as e:
            self.state = "failed"
            self.details.append(repr(e))
        finally:
            self.elapsed_ms = int((time.monotonic() - began) * 1000)
            self._persist()
            log.info("pre-online %s in %d ms%s", self.state, self.elapsed_ms,
                     (": " + "; ".join(self.details)) if self.details else "")
            self._set_isolated(False)

    async def run(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    # ---- the steps -----------------------------------------------------------------------------------
    async def pre_online(self) -> str:
        ha = self.ctx.services.get("ha")
        if ha is None:
            self.details.append("no ha service")
            return "failed"
        members = await ha.group_members()
        if members is None:
            self.details.append("no name server answered")
            return "no-namesrv"
        me = self.ctx.config.broker_addr
        slaves = {bid: addr for bid, addr in sorted(members.items()) if bid != MASTER_ID and addr != me}
        if not slaves:
            return "no-slave"
        results = await asyncio.gather(*(self._take_back(ha, bid, addr) for bid, addr in slaves.items()))
        return "done" if any(results) else "failed"

    async def _take_back(self, ha: Any, broker_id: int, addr: str) -> bool:
        """One slave: announce ourselves, wait for its HA connection, pull its offsets. True if offsets came."""
        cfg = self.ctx.config
        header = {"masterHaAddress": cfg.ha_server_addr, "masterAddress": cfg.broker_addr,
                  "masterFlushOffset": str(self.ctx.store.flushed_offset)}
        try:
            resp = await self.env.client.invoke(
                addr, RemotingCommand.request(RequestCode.EXCHANGE_BROKER_HA_INFO, header), REQUEST_TIMEOUT_MS)
        except OrbitMQError as e:
            self.details.append(f"slave {broker_id} {addr} unreachable: {e!r}")
            return False
        if resp.code != ResponseCode.SUCCESS:
            self.details.append(f"slave {broker_id} {addr} refused 906 ({resp.code} {resp.remark})")
        elif not await self._wait_ha_connected(addr, cfg.ha_server_addr):
            self.details.append(f"slave {broker_id} {addr} not HA-connected after {self.ha_wait_s:g} s")
        try:
            got_consumer, got_delay = await ha.pull_offsets(addr)
        except (OrbitMQError, ValueError, TypeError) as e:
            self.details.append(f"slave {broker_id} {addr} offsets: {e!r}")
            return False
        if not got_consumer:
            self.details.append(f"slave {broker_id} {addr} gave no consumer offsets")
        log.info("pre-online: took back offsets of slave %d %s (consumer %s, delay %s)", broker_id, addr,
                 got_consumer, got_delay)
        return got_consumer

    async def _wait_ha_connected(self, addr: str, ha_addr: str) -> bool:
        deadline = time.monotonic() + self.ha_wait_s
        while True:
            info = await self._runtime_info(addr)
            if info.get("haConnected") == "true" and info.get("haMasterAddr") == ha_addr:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)

    async def _runtime_info(self, addr: str) -> dict[str, str]:
        try:
            resp = await self.env.client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                                REQUEST_TIMEOUT_MS)
        except OrbitMQError:
            return {}
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return {}
        return KVTable.from_json(resp.body).table

    # ---- helpers -------------------------------------------------------------------------------------
    def _persist(self) -> None:
        try:
            self.ctx.offsets.persist()
        except OSError as e:
            log.error("pre-online: persisting consumer offsets failed: %r", e)
        delay = self.ctx.services.get("delay")
        if delay is not None:
            try:
                delay.persist()
            except OSError as e:
                log.error("pre-online: persisting delay offsets failed: %r", e)

    def _set_isolated(self, flag: bool) -> None:
        setter = getattr(self.ctx, "set_isolated", None)
        if callable(setter):
            setter(flag)

    def runtime(self) -> dict[str, str]:
        return {"preOnline": self.state, "preOnlineDetail": "; ".join(self.details)[:500],
                "preOnlineMs": str(self.elapsed_ms)}


def enabled(cfg: Any) -> bool:
    """Pre-online runs on every classic master (acting-master group or not: offsets committed on a slave while the
    master was down must never be rolled back) unless skipPreOnline. Controller mode has its own hand-over."""
    dynamic = cfg.enable_controller_mode or bool(getattr(cfg, "dynamic_role", False))
    return (not cfg.is_slave) and not dynamic and not cfg.skip_pre_online


def create(ctx: BrokerContext, env: ServiceEnv) -> PreOnlineService | None:
    return PreOnlineService(ctx, env) if enabled(ctx.config) else None
