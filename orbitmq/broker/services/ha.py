"""HA service: classic master/slave replication wired into the broker (orbitmq.replication does the work).

Master (ASYNC_MASTER / SYNC_MASTER): HA server on haListenPort, answers EXCHANGE_BROKER_HA_INFO (906) with its HA
address; SYNC_MASTER puts wait for a slave (store.replica policy) and, with syncMasterConfirmVisibility, consumers
see only replicated data. Slave: HA client (master found via haMasterAddress or the name servers + 906), metadata
sync every slaveSyncInterval (topics, groups by data version; consumer and delay offsets merged so they never roll
back), consumer offsets committed on the slave forwarded to the master. Both add role and lag to runtime info.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers import admin as admin_handlers
from orbitmq.broker.metadata.data_version import loads_lenient
from orbitmq.broker.metadata.groups import decode_group_wrapper
from orbitmq.broker.metadata.topics import _decode_wrapper as decode_topic_wrapper
from orbitmq.broker.services import ServiceEnv
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo, ConsumerOffsetSerializeWrapper, KVTable
from orbitmq.protocol.bodies.admin import DelayOffsetSerializeWrapper
from orbitmq.replication import HAClient, HAMaster, HAServer, ReplicationConfig

log = logging.getLogger(__name__)

MASTER_ID = 0
REQUEST_TIMEOUT_MS = 3000


class HAService:
    name = "ha"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        cfg = ctx.config
        self.rconfig = ReplicationConfig(
            port=cfg.ha_listen_port, batch_size=cfg.ha_transfer_batch_size,
            heartbeat_ms=cfg.ha_send_heartbeat_interval, housekeeping_ms=cfg.ha_housekeeping_interval,
            fallbehind_max=cfg.ha_slave_fallbehind_max,
        )
        self.boot_ms = env.clock.now_ms()
        self.master: HAMaster | None = None
        self.server: HAServer | None = None
        self.client: HAClient | None = None
        self.master_addr: str | None = None  # slave: the master's remoting address
        self.metadata_syncs = 0
        self._forwards: set[asyncio.Task[None]] = set()
        store = ctx.store
        if cfg.is_slave:
            self.client = HAClient(store, self._resolve_master_ha, self.rconfig, clock=env.clock)
            return
        if store.master_epoch == 0:
            store.set_master_epoch(1, store.max_phys_offset)
        self.master = HAMaster(
            store.master_epoch, env.store_config.mapped_file_size_commitlog, batch_size=self.rconfig.batch_size,
            heartbeat_ms=self.rconfig.heartbeat_ms, housekeeping_ms=self.rconfig.housekeeping_ms,
            fallbehind_max=self.rconfig.fallbehind_max,
        )
        self.server = HAServer(store, self.master, self.rconfig, clock=env.clock)
        if cfg.broker_role == "SYNC_MASTER":
            master = self.master
            store.replica.set_policy(wait_ms=cfg.slave_timeout, gate_visibility=cfg.sync_master_confirm_visibility,
                                     available=master.is_slave_ok)

    # ---- service protocol ----------------------------------------------------------------------------
    def handlers(self) -> dict[int, Callable[..., Any]]:
        out: dict[int, Callable[..., Any]] = {int(RequestCode.GET_BROKER_RUNTIME_INFO): self._runtime_info}
        if self.client is not None:
            out[int(RequestCode.UPDATE_CONSUMER_OFFSET)] = self._update_offset_on_slave
        else:
            out[int(RequestCode.EXCHANGE_BROKER_HA_INFO)] = self._exchange_ha_info
        return out

    async def start(self) -> None:
        if self.server is None:
            return
        await self.server.start()
        if self.server.port != self.ctx.config.ha_listen_port:  # port 0: registered address must be the real one
            self.ctx.config = dataclasses.replace(self.ctx.config, ha_listen_port=self.server.port)
            self.ctx.request_register()

    async def run(self) -> None:
        if self.client is None:
            return
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.client.run(), name="ha client")
            tg.create_task(self._run_metadata_sync_loop(), name="ha metadata sync")

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        for t in list(self._forwards):
            t.cancel()

    # ---- master ----------------------------------------------------------------------------------------
    def _exchange_ha_info(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cfg = self.ctx.config
        return cmd.response(ext_fields={
            "masterHaAddress": cfg.ha_server_addr,
            "masterAddress": cfg.broker_addr,
            "masterFlushOffset": str(self.ctx.store.flushed_offset),
        })

    # ---- slave: finding the master -------------------------------------------------------------------
    async def _find_master_addr(self) -> str | None:
        cfg = self.ctx.config
        client = self.env.client
        for ns in cfg.namesrv_addrs:
            try:
                resp = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
                                           REQUEST_TIMEOUT_MS)
            except OrbitMQError as e:
                log.debug("cluster info from %s failed: %r", ns, e)
                continue
            if resp.code != ResponseCode.SUCCESS or not resp.body:
                continue
            bd = ClusterInfo.from_json(resp.body).broker_addr_table.get(cfg.broker_name)
            addr = bd.broker_addrs.get(MASTER_ID) if bd is not None else None
            if addr:
                return addr
        return None

    async def _resolve_master_ha(self) -> str | None:
        cfg = self.ctx.config
        if cfg.ha_master_address:
            return cfg.ha_master_address
        addr = await self._find_master_addr()
        self.master_addr = addr
        if addr is None:
            return None
        resp = await self.env.client.invoke(addr, RemotingCommand.request(RequestCode.EXCHANGE_BROKER_HA_INFO),
                                            REQUEST_TIMEOUT_MS)
        if resp.code != ResponseCode.SUCCESS:
            return None
        return (resp.ext_fields or {}).get("masterHaAddress") or None

    # ---- slave: metadata -----------------------------------------------------------------------------
    async def _run_metadata_sync_loop(self) -> None:
        while True:
            try:
                await self.sync_metadata_once()
            except (OrbitMQError, ValueError, OSError) as e:
                log.info("slave metadata sync failed: %r", e)
            await asyncio.sleep(self.ctx.config.slave_sync_interval / 1000)

    async def _fetch(self, addr: str, code: int) -> bytes | None:
        resp = await self.env.client.invoke(addr, RemotingCommand.request(code), REQUEST_TIMEOUT_MS)
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return None
        return bytes(resp.body)

    async def sync_metadata_once(self) -> bool:
        """Pull topics, consumer offsets, delay offsets and subscription groups from the master."""
        addr = self.master_addr or await self._find_master_addr()
        if addr is None:
            return False
        self.master_addr = addr
        ctx = self.ctx
        body = await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        if body is not None:
            table, version = decode_topic_wrapper(loads_lenient(body))
            if version.to_json_obj() != ctx.topics.data_version.to_json_obj():
                ctx.topics.replace_all(table, version)
        body = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        if body is not None:
            ctx.offsets.replace_all(merge_offsets(ctx.offsets.table(), ConsumerOffsetSerializeWrapper.from_json(
                body).offset_table))
        body = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        if body is not None:
            self._adopt_delay_offsets(DelayOffsetSerializeWrapper.from_json(body).offset_table)
        body = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if body is not None:
            groups, version = decode_group_wrapper(loads_lenient(body))
            if version.to_json_obj() != ctx.groups.data_version.to_json_obj():
                ctx.groups.replace_all(groups, version)
        self.metadata_syncs += 1
        return True

    def _adopt_delay_offsets(self, table: dict[int, int]) -> None:
        delay = self.ctx.services.get("delay")
        offsets = getattr(delay, "offsets", None)
        if isinstance(offsets, dict):
            for level, off in table.items():
                if off > offsets.get(level, -1):
                    offsets[level] = off
            with contextlib.suppress(OSError):
                delay.persist()  # type: ignore[union-attr]

    # ---- slave: consumer offsets ---------------------------------------------------------------------
    def _update_offset_on_slave(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        ext = cmd.ext_fields or {}
        try:
            group, topic = ext["consumerGroup"], ext["topic"]
            queue_id, offset = int(ext["queueId"]), int(ext["commitOffset"])
        except (KeyError, ValueError):
            return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR, "bad UPDATE_CONSUMER_OFFSET")
        self.ctx.offsets.commit(group, topic, queue_id, offset)
        if self.master_addr:
            task = asyncio.get_running_loop().create_task(self._forward_offset(self.master_addr, dict(ext)))
            self._forwards.add(task)
            task.add_done_callback(self._forwards.discard)
        return None if cmd.is_oneway else cmd.response()

    async def _forward_offset(self, addr: str, ext: dict[str, str]) -> None:
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext, oneway=True)
        try:
            await self.env.client.invoke_oneway(addr, cmd)
        except OrbitMQError as e:
            log.info("forwarding a consumer offset to the master %s failed: %r", addr, e)

    # ---- runtime info ----------------------------------------------------------------------------------
    def ha_runtime(self) -> dict[str, str]:
        cfg = self.ctx.config
        store = self.ctx.store
        out = {"brokerRole": cfg.broker_role, "brokerId": str(cfg.broker_id), "haServerAddr": cfg.ha_server_addr,
               "masterEpoch": str(store.master_epoch)}
        if self.server is not None and self.master is not None:
            lags = self.server.lag_bytes()
            known = [v for v in lags.values() if v >= 0]
            out.update({
                "masterAddr": cfg.broker_addr,
                "haConnectedSlaves": str(len(lags)),
                "haSlaveLagBytes": str(max(known)) if known else "-1",
                "haConfirmOffset": str(self.master.confirm_offset),
            })
            out.update({f"haSlaveLag[{a}]": str(v) for a, v in lags.items()})
        elif self.client is not None:
            c = self.client
            out.update({
                "masterAddr": self.master_addr or "",
                "haMasterAddr": c.master_ha_addr or "",
                "haConnected": str(c.connected).lower(),
                "haStaleEpochRefusals": str(c.stale_refusals),
                "haLastError": c.last_error,
                "haMetadataSyncs": str(self.metadata_syncs),
            })
        return out

    def _runtime_info(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        table = admin_handlers.runtime_info(self.ctx, self.boot_ms)
        table.update(self.ha_runtime())
        return cmd.response(body=KVTable(table).to_json())


def merge_offsets(local: dict[str, dict[int, int]], master: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """The slave's view after a sync: per queue the larger offset, so a committed offset never rolls back."""
    merged = {k: dict(v) for k, v in local.items()}
    for key, queues in master.items():
        mine = merged.setdefault(key, {})
        for q, off in queues.items():
            if off > mine.get(q, -1):
                mine[q] = off
    return merged


def create(ctx: BrokerContext, env: ServiceEnv) -> HAService | None:
    return HAService(ctx, env)
