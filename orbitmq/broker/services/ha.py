"""HA service: classic master/slave replication wired into the broker (orbitmq.replication does the work).

Master (ASYNC_MASTER / SYNC_MASTER): HA server on haListenPort, answers EXCHANGE_BROKER_HA_INFO (906) with its HA
address; SYNC_MASTER puts wait for a slave (store.replica policy) and, with syncMasterConfirmVisibility, consumers
see only replicated data. Slave: HA client (master found via haMasterAddress, a master's 906 push, or the name
servers + 906), metadata sync every slaveSyncInterval and once before serving (topics, groups by data version;
consumer and delay offsets merged so they never roll back, the newer data version kept), consumer offsets
committed on the slave forwarded to the master. The master forwards every committed consumer offset to its slaves
(acting master or not), so a kill -9 of the master loses none (pre-online pulls them back).
Both add role and lag to runtime info.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers import admin as admin_handlers
from orbitmq.broker.handlers import offsets as offset_handlers
from orbitmq.broker.member_group import fetch_group_members
from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.broker.metadata.offset_versions import DelayOffsetTable, merge_max_nested
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.metadata_sync import (
    FORWARDED,
    OffsetForwarder,
    adopt_delay_offsets,
    fetch_body,
    forwarded_stamp,
    is_forwarded,
    pull_offsets_from,
    sync_metadata_from,
)
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo, KVTable
from orbitmq.remoting.tls import client_config_of, client_context, server_config_of, server_context
from orbitmq.replication import HAClient, HAMaster, HAServer, ReplicationConfig

log = logging.getLogger(__name__)

MASTER_ID = 0
REQUEST_TIMEOUT_MS = 3000
STARTUP_SYNC_TIMEOUT_S = 3.0  # slave: the sync from the master before serving is bounded by this
MEMBER_REFRESH_S = 3.0  # master: how often the group's slave addresses (offset forwarding) are re-read
__all__ = ["FORWARDED", "HAService", "create", "merge_offsets"]


class HAService:
    name = "ha"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        cfg = ctx.config
        self.rconfig = ReplicationConfig(
            host=cfg.bind_address, port=cfg.ha_listen_port, batch_size=cfg.ha_transfer_batch_size,
            cluster_secret=cfg.cluster_secret,
            heartbeat_ms=cfg.ha_send_heartbeat_interval, housekeeping_ms=cfg.ha_housekeeping_interval,
            fallbehind_max=cfg.ha_slave_fallbehind_max,
            # TLS on the HA link when tls.server.mode=enforcing (every broker of the group alike); permissive
            # leaves the HA port plain
            server_ssl=server_context(server_config_of(cfg)) if cfg.tls_server_mode == "enforcing" else None,
            client_ssl=client_context(client_config_of(cfg)) if cfg.tls_server_mode == "enforcing" else None,
        )
        self.boot_ms = env.clock.now_ms()
        self.master: HAMaster | None = None
        self.server: HAServer | None = None
        self.client: HAClient | None = None
        self.master_addr: str | None = None  # slave: the master's remoting address
        self.pushed_master_ha: str | None = None  # slave: HA address pushed by a (pre-online) master's 906
        self.slave_addrs: list[str] = []  # master: the group's other live members (offset forwarding)
        self.metadata_syncs = 0
        self.forwarder = OffsetForwarder(env.client)
        self._update_offset = offset_handlers.handlers(ctx)[RequestCode.UPDATE_CONSUMER_OFFSET]
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
        ctx.offset_committed = self._on_pull_commit
        if cfg.broker_role == "SYNC_MASTER":
            master = self.master
            store.replica.set_policy(wait_ms=cfg.slave_timeout, gate_visibility=cfg.sync_master_confirm_visibility,
                                     available=master.is_slave_ok)

    # ---- service protocol ----------------------------------------------------------------------------
    def handlers(self) -> dict[int, Callable[..., Any]]:
        out: dict[int, Callable[..., Any]] = {int(RequestCode.GET_BROKER_RUNTIME_INFO): self._runtime_info}
        if self.client is not None:
            out[int(RequestCode.UPDATE_CONSUMER_OFFSET)] = self._update_offset_on_slave
            out[int(RequestCode.EXCHANGE_BROKER_HA_INFO)] = self._adopt_master_ha_info
        else:
            out[int(RequestCode.EXCHANGE_BROKER_HA_INFO)] = self._exchange_ha_info
            out[int(RequestCode.UPDATE_CONSUMER_OFFSET)] = self._update_offset_on_master
        return out

    async def start(self) -> None:
        if self.server is None:
            await self._startup_sync()
            return
        await self.server.start()
        if self.server.port != self.ctx.config.ha_listen_port:  # port 0: registered address must be the real one
            self.ctx.config = dataclasses.replace(self.ctx.config, ha_listen_port=self.server.port)
            self.ctx.request_register()

    async def run(self) -> None:
        if self.client is None:
            await self._run_member_refresh_loop()
            return
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.client.run(), name="ha client")
            tg.create_task(self._run_metadata_sync_loop(), name="ha metadata sync")

    async def _startup_sync(self) -> None:
        """Slave: one bounded metadata sync before the broker serves, so a restarted slave never answers with the
        offsets of its last persist (older than the master's) — a restart must not look like a rollback."""
        try:
            await asyncio.wait_for(self.sync_metadata_once(), STARTUP_SYNC_TIMEOUT_S)
        except (TimeoutError, OrbitMQError, ValueError, OSError) as e:
            log.info("slave start: metadata sync from the master failed (%r); serving the local copy", e)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        self.forwarder.cancel_all()

    # ---- master ----------------------------------------------------------------------------------------
    def _exchange_ha_info(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cfg = self.ctx.config
        return cmd.response(ext_fields={
            "masterHaAddress": cfg.ha_server_addr,
            "masterAddress": cfg.broker_addr,
            "masterFlushOffset": str(self.ctx.store.flushed_offset),
        })

    # ---- master: forwarding consumer offsets to the slaves -----------------------------------------------
    def _update_offset_on_master(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        ext = cmd.ext_fields or {}
        if is_forwarded(ext):  # a commit a slave took: kept only if newer than ours
            return self._take_forwarded(cmd, ext)
        resp = self._update_offset(conn, cmd)
        commit = _commit_of(ext)
        if commit is not None and self.slave_addrs and (resp is None or resp.code == ResponseCode.SUCCESS):
            self.forwarder.forward_commit(self.slave_addrs, ext, self.ctx.offsets.stamp(*commit[:3]))
        return resp

    def _on_pull_commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """ctx.offset_committed: an offset committed inside a PULL goes to the slaves too (coalesced per queue)."""
        if self.slave_addrs:
            self.forwarder.forward_coalesced(lambda: self.slave_addrs, group, topic, queue_id, offset,
                                             self.ctx.offsets.stamp(group, topic, queue_id))

    def _take_forwarded(self, cmd: RemotingCommand, ext: dict[str, str]) -> RemotingCommand | None:
        commit = _commit_of(ext)
        if commit is None:
            return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR, "bad UPDATE_CONSUMER_OFFSET")
        self.ctx.offsets.commit_if_newer(*commit, forwarded_stamp(ext))
        return None if cmd.is_oneway else cmd.response()

    async def _run_member_refresh_loop(self) -> None:
        while True:
            try:
                await self.refresh_members_once()
            except (OrbitMQError, ValueError, TypeError, OSError) as e:
                log.debug("member group refresh failed: %r", e)
            await asyncio.sleep(MEMBER_REFRESH_S)

    async def refresh_members_once(self) -> list[str]:
        """Master: re-read the group's slaves (offset forwarding targets). A slave that (re)appeared has its consumer
        and delay offsets merged in (newer commit wins), so commits it took while this master could not see it (it
        came back after our pre-online, say) are not lost. Returns the slaves that appeared."""
        members = await self.group_members()
        if members is None:
            return []
        me = self.ctx.config.broker_addr
        addrs = sorted(a for i, a in members.items() if i != MASTER_ID and a != me)
        appeared = [a for a in addrs if a not in self.slave_addrs]
        self.slave_addrs = addrs
        for addr in appeared:
            try:
                await self.pull_offsets(addr)
            except (OrbitMQError, ValueError, TypeError) as e:
                log.info("offsets of slave %s not merged: %r", addr, e)
        return appeared

    async def group_members(self) -> dict[int, str] | None:
        """The group's live members {brokerId: addr} (broker/member_group.py); None if no name server answered."""
        return await fetch_group_members(self.env.client, self.ctx.config, REQUEST_TIMEOUT_MS)

    # ---- slave: finding the master -------------------------------------------------------------------
    def _adopt_master_ha_info(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        """906 on a slave. With masterHaAddress (a pre-online master announcing itself): follow that master now.
        Without: answer what this slave knows (as Java does)."""
        ext = cmd.ext_fields or {}
        ha_addr = ext.get("masterHaAddress") or ""
        if not ha_addr:
            known = self.client.master_ha_addr if self.client is not None else None
            return cmd.response(ext_fields={"masterHaAddress": known or "",
                                            "masterAddress": self.master_addr or "",
                                            "masterFlushOffset": "0"})
        if self.ctx.config.ha_master_address:
            log.info("906 from %s ignored: haMasterAddress is configured", conn.remote_addr if conn else "?")
            return cmd.response()
        self.pushed_master_ha = ha_addr
        if ext.get("masterAddress"):
            self.master_addr = ext["masterAddress"]
        log.info("master %s announced HA address %s: reconnecting", self.master_addr, ha_addr)
        if self.client is not None and (self.client.master_ha_addr != ha_addr or not self.client.connected):
            self.client.reconnect_now()
        return cmd.response()

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
        if self.pushed_master_ha:  # announced by the master itself; dropped once it cannot be reached
            if self.client is None or not self.client.connect_failed:
                return self.pushed_master_ha
            self.pushed_master_ha = None
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
        return await fetch_body(self.env.client, addr, code)

    async def sync_metadata_once(self) -> bool:
        """Pull topics, consumer offsets, delay offsets and subscription groups from the master."""
        addr = self.master_addr or await self._find_master_addr()
        if addr is None:
            return False
        self.master_addr = addr
        await sync_metadata_from(self.ctx, self.env.client, addr)
        self.metadata_syncs += 1
        return True

    async def pull_offsets(self, addr: str) -> tuple[bool, bool]:
        """Fetch `addr`'s consumer and delay offset tables and merge them in (metadata_sync.pull_offsets_from). Used
        by a slave (from its master) and by a pre-online master (from its slaves)."""
        return await pull_offsets_from(self.ctx, self.env.client, addr)

    def _adopt_delay_offsets(self, table: dict[int, int], version: DataVersion | None) -> None:
        adopt_delay_offsets(self.ctx, table, version)

    # ---- slave: consumer offsets ---------------------------------------------------------------------
    def _update_offset_on_slave(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        ext = cmd.ext_fields or {}
        if is_forwarded(ext):  # from the master: kept only if newer (forwards may arrive out of order)
            return self._take_forwarded(cmd, ext)
        commit = _commit_of(ext)
        if commit is None:
            return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR, "bad UPDATE_CONSUMER_OFFSET")
        self.ctx.offsets.commit(*commit)
        if self.master_addr:
            self.forwarder.forward_commit([self.master_addr], ext, self.ctx.offsets.stamp(*commit[:3]))
        return None if cmd.is_oneway else cmd.response()

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
                "haForwardedOffsets": str(self.forwarder.forwarded),
                "haForwardFailures": str(self.forwarder.failures),
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
                "haForwardedOffsets": str(self.forwarder.forwarded),
                "haForwardFailures": str(self.forwarder.failures),
            })
        out["consumerOffsetDataVersion"] = _version_text(self.ctx.offsets.data_version)
        delay_offsets = getattr(self.ctx.services.get("delay"), "offsets", None)
        if isinstance(delay_offsets, DelayOffsetTable):
            out["delayOffsetDataVersion"] = _version_text(delay_offsets.data_version)
        return out

    def _runtime_info(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        table = admin_handlers.runtime_info(self.ctx, self.boot_ms)
        table.update(self.ha_runtime())
        for extra in self.ctx.runtime_extras:  # RIP-32: actingMaster, minBrokerId, ...
            table.update(extra())
        return cmd.response(body=KVTable(table).to_json())


def _commit_of(ext: dict[str, str]) -> tuple[str, str, int, int] | None:
    """(group, topic, queueId, offset) of UPDATE_CONSUMER_OFFSET ext fields; None when malformed."""
    try:
        return ext["consumerGroup"], ext["topic"], int(ext["queueId"]), int(ext["commitOffset"])
    except (KeyError, ValueError):
        return None


def merge_offsets(local: dict[str, dict[int, int]], master: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """The slave's view after a sync: per queue the larger offset, so a committed offset never rolls back."""
    return merge_max_nested(local, master)[0]


def _version_text(v: DataVersion) -> str:
    return f"{v.state_version}/{v.counter}/{v.timestamp}"


def create(ctx: BrokerContext, env: ServiceEnv) -> HAService | None:
    if ctx.config.dynamic_role:  # controller mode or lease election: controller_mode/replicas_manager.py replicates
        return None
    return HAService(ctx, env)
