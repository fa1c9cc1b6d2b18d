"""ControllerSource: the RIP-44 controller as the RoleSource of a ReplicasManager (role_source.py). Gets the broker
id (identity.py), registers with the controller, heartbeats every controller, learns the role (register answer,
NOTIFY_BROKER_ROLE_CHANGED pushes, GET_REPLICA_INFO polls), asks for elections, reports SyncStateSet changes, and
keeps the master's write lease (rules.WriteLease: renewed by leader answers naming us master of our epoch, dropped
with the leader connection). Design: docs/design/controller-broker.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING

from orbitmq.base.errors import ConfigError, OrbitMQError
from orbitmq.broker.controller_mode.identity import IdentityFiles, IdRefused, obtain_broker_id
from orbitmq.broker.controller_mode.link import ControllerLink, ControllerUnavailable
from orbitmq.broker.controller_mode.role_source import Replica
from orbitmq.broker.controller_mode.rules import RoleInfo, WriteLease, renews_lease
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    BrokerReplicasInfo,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
    broker_names_body,
)

if TYPE_CHECKING:
    from orbitmq.broker.controller_mode.replicas_manager import ReplicasManager

log = logging.getLogger(__name__)

RETRY_MS = 500  # a failed registration is tried again this soon (then backing off to 5 s)


def sync_state_set_of(body: bytes | None) -> SyncStateSet:
    return SyncStateSet.from_json(body) if body else SyncStateSet()


class ControllerSource:
    kind = "controller"

    def __init__(self, rm: ReplicasManager) -> None:
        cfg = rm.ctx.config
        self.rm = rm
        self.clock = rm.clock
        self.link = ControllerLink(rm.env.client, cfg.controller_addrs, self._on_leader_lost)
        self.lease = WriteLease(cfg.controller_heart_beat_timeout_mills, cfg.broker_heartbeat_interval)
        root = rm.env.store_config.store_path_root_dir
        self.files = IdentityFiles(cfg.store_path_broker_identity or os.path.join(root, "brokerIdentity"))
        self.registered = False
        self.elections_asked = 0
        self._wake: asyncio.Event | None = None
        self._heartbeat_sent: dict[str, int] = {}  # controller address -> monotonic ms of the last heartbeat sent

    # ---- RoleSource -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.rm.ctx.config
        for ident, path in ((self.files.load(), self.files.path), (self.files.load_temp(), self.files.temp_path)):
            if ident is not None and (ident.cluster_name, ident.broker_name) != (cfg.broker_cluster_name,
                                                                                  cfg.broker_name):
                raise ConfigError(f"broker identity file {path} belongs to {ident.cluster_name}/{ident.broker_name},"
                                  f" not brokerClusterName={cfg.broker_cluster_name} brokerName={cfg.broker_name}")
        self._wake = asyncio.Event()

    async def run(self) -> None:
        await self._register_until_done()
        async with asyncio.TaskGroup() as tg:
            for addr in self.rm.ctx.config.controller_addrs:
                tg.create_task(self._heartbeat_loop(addr), name=f"controller heartbeat {addr}")
            tg.create_task(self._replica_info_loop(), name="replica info poll")
            tg.create_task(self._controller_metadata_loop(), name="controller leader poll")

    async def stop(self) -> None:
        self.lease.drop()

    def write_permit(self, now_ms: int, epoch: int) -> str | None:
        if self.lease.valid(now_ms, epoch):
            return None
        return f"master of epoch {epoch} holds no write lease from the controller (fenced)"

    def lease_remaining_ms(self, now_ms: int, epoch: int) -> int:
        return self.lease.remaining_ms(now_ms) if self.lease.valid(now_ms, epoch) else 0

    def drop_lease(self) -> None:
        self.lease.drop()

    def applied(self, info: RoleInfo, send_ms: int | None) -> None:
        rm = self.rm
        if send_ms is None or rm.broker_id is None:
            return
        if renews_lease(rm.master_epoch, rm.role == "MASTER", rm.broker_id, info):
            hb = self._heartbeat_sent.get(self.link.leader_addr or "")
            if hb is not None and hb <= send_ms:  # else no heartbeat reached that leader before the request
                self.lease.renew(info.master_epoch, send_ms, hb)

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def peer_announced(self, broker_id: int, addr: str) -> None:
        return None  # the controller knows every replica's address (1006)

    def runtime(self) -> dict[str, str]:
        return {
            "controllerMode": "true",
            "controllerBrokerId": str(self.rm.broker_id if self.rm.broker_id is not None else -1),
            "controllerLeader": self.link.leader_addr or "",
            "electionsAsked": str(self.elections_asked),
            "leaseRenewals": str(self.lease.renewals),
            "leaseDrops": str(self.lease.drops),
        }

    def _on_leader_lost(self) -> None:
        """The controller elects at once when a master's connection closes: our lease ends now too."""
        if self.rm.role == "MASTER":
            log.warning("write lease dropped: connection to the controller leader closed")
        self.lease.drop()
        self.wake()

    # ---- start-up: id and registration --------------------------------------------------------------------
    async def next_broker_id(self, cluster: str, broker: str) -> int:
        resp = await self.link.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                    GetNextBrokerIdRequestHeader(cluster, broker).to_ext())
        nxt = GetNextBrokerIdResponseHeader.from_ext(resp.ext_fields).next_broker_id
        if resp.code != ResponseCode.SUCCESS or nxt is None:
            raise ControllerUnavailable(f"GET_NEXT_BROKER_ID: code {resp.code} {resp.remark}")
        return nxt

    async def apply_broker_id(self, cluster: str, broker: str, broker_id: int, check_code: str) -> tuple[bool, str]:
        resp = await self.link.call(RequestCode.CONTROLLER_APPLY_BROKER_ID,
                                    ApplyBrokerIdRequestHeader(cluster, broker, broker_id, check_code).to_ext())
        if resp.code == ResponseCode.SUCCESS:
            return True, ""
        if resp.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
            return False, resp.remark or "id invalid"
        raise ControllerUnavailable(f"APPLY_BROKER_ID: code {resp.code} {resp.remark}")  # keep the temp file

    async def _register_until_done(self) -> None:
        delay = RETRY_MS
        while not self.registered:
            try:
                await self.register_once()
            except (OrbitMQError, IdRefused) as e:
                if isinstance(e, ConfigError):
                    raise
                self.rm.last_error = f"register: {e}"
                log.info("controller registration failed (%s); retrying in %d ms", e, delay)
                await asyncio.sleep(delay / 1000)
                delay = min(delay * 2, 5000)

    async def register_once(self) -> None:
        rm = self.rm
        cfg = rm.ctx.config
        if rm.broker_id is None:
            bid = await obtain_broker_id(self.files, cfg.broker_cluster_name, cfg.broker_name, cfg.broker_addr,
                                         self.clock.now_ms(), self)
            rm.set_broker_id(bid)
            log.info("controller broker id of %s/%s is %d", cfg.broker_cluster_name, cfg.broker_name, bid)
        send_ms = self.clock.monotonic_ms()
        resp = await self.link.call(RequestCode.CONTROLLER_REGISTER_BROKER, RegisterBrokerToControllerRequestHeader(
            cfg.broker_cluster_name, cfg.broker_name, rm.broker_id, cfg.broker_addr).to_ext())
        if resp.code != ResponseCode.SUCCESS:
            raise ControllerUnavailable(f"REGISTER_BROKER: code {resp.code} {resp.remark}")
        self.registered = True
        await self.heartbeat_all()  # the controller elects only live brokers
        h = RegisterBrokerToControllerResponseHeader.from_ext(resp.ext_fields)
        sss = sync_state_set_of(resp.body)
        await rm.apply(RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss.sync_state_set,
                                sss.sync_state_set_epoch), send_ms, "register")

    # ---- heartbeats and polls -----------------------------------------------------------------------------
    def heartbeat_ext(self) -> dict[str, str]:
        rm = self.rm
        cfg = rm.ctx.config
        st = rm.ctx.store
        return BrokerHeartbeatRequestHeader(
            cfg.broker_cluster_name, cfg.broker_addr, cfg.broker_name, rm.broker_id, st.master_epoch,
            st.max_phys_offset, rm.ha.confirm_offset, cfg.controller_heart_beat_timeout_mills,
            cfg.broker_election_priority).to_ext()

    async def _heartbeat_one(self, addr: str) -> None:
        timeout = self.rm.ctx.config.send_heartbeat_timeout_millis / 1000
        try:
            async with asyncio.timeout(timeout):
                sent = self.clock.monotonic_ms()
                await self.link.heartbeat(addr, self.heartbeat_ext())
            self._heartbeat_sent[addr] = sent  # written to that connection: the lease counts from here
        except (OrbitMQError, TimeoutError) as e:
            log.debug("heartbeat to controller %s failed: %r", addr, e)

    async def heartbeat_all(self) -> None:
        await asyncio.gather(*(self._heartbeat_one(a) for a in self.rm.ctx.config.controller_addrs))

    async def _heartbeat_loop(self, addr: str) -> None:
        while True:
            await self._heartbeat_one(addr)
            await asyncio.sleep(self.rm.ctx.config.broker_heartbeat_interval / 1000)

    async def _replica_info_loop(self) -> None:
        """GET_REPLICA_INFO every brokerHeartbeatInterval while master (the lease), else every
        syncBrokerMetadataPeriod; at once when woken (a push to apply, a lost leader connection, a failed switch)."""
        assert self._wake is not None
        while True:
            cfg = self.rm.ctx.config
            period = cfg.broker_heartbeat_interval if self.rm.role == "MASTER" else cfg.sync_broker_metadata_period
            if self.rm.role == "FENCED":
                period = min(period, 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period / 1000):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.poll_replica_info()
            except OrbitMQError as e:
                self.rm.last_error = f"replica info: {e}"
                log.debug("GET_REPLICA_INFO failed: %r", e)

    async def poll_replica_info(self) -> None:
        cfg = self.rm.ctx.config
        send_ms = self.clock.monotonic_ms()
        resp = await self.link.call(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                    GetReplicaInfoRequestHeader(cfg.broker_name).to_ext())
        if resp.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            log.warning("the controller has no metadata for %s: registering again", cfg.broker_name)
            self.registered = False
            await self._register_until_done()
            return
        if resp.code != ResponseCode.SUCCESS:
            raise ControllerUnavailable(f"GET_REPLICA_INFO: code {resp.code} {resp.remark}")
        h = GetReplicaInfoResponseHeader.from_ext(resp.ext_fields)
        sss = sync_state_set_of(resp.body)
        await self.rm.apply(RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss.sync_state_set,
                                     sss.sync_state_set_epoch), send_ms, "poll")

    async def _controller_metadata_loop(self) -> None:
        while True:
            await asyncio.sleep(self.rm.ctx.config.sync_controller_metadata_period / 1000)
            with contextlib.suppress(OrbitMQError):
                await self.link.find_leader()

    # ---- role notifications ---------------------------------------------------------------------------------
    def on_role_notify(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008), on our port or over our connection to a controller."""
        h = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
        sss = sync_state_set_of(cmd.body)
        info = RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss.sync_state_set,
                        sss.sync_state_set_epoch)
        log.info("role change pushed: master %s (%s) epoch %s, SyncStateSet %s", h.master_broker_id,
                 h.master_address, h.master_epoch, sorted(sss.sync_state_set))
        self.rm.spawn(self._apply_push(info), "apply role push")

    async def _apply_push(self, info: RoleInfo) -> None:
        try:
            await self.rm.apply(info, None, "push")
        except OrbitMQError as e:
            self.rm.last_error = f"push: {e}"
        self.wake()  # a push carries no lease: ask the leader now

    # ---- elections and the SyncStateSet ---------------------------------------------------------------------
    async def elect(self) -> tuple[RoleInfo, int | None] | None:
        """CONTROLLER_ELECT_MASTER with our id (no master known). The answer (new master, or 2011: the master
        still exists) is applied like any other; other codes leave us fenced until the next poll."""
        cfg = self.rm.ctx.config
        self.elections_asked += 1
        send_ms = self.clock.monotonic_ms()
        resp = await self.link.call(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            cfg.broker_cluster_name, cfg.broker_name, self.rm.broker_id).to_ext())
        if resp.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            log.info("election request answered %d %s", resp.code, resp.remark)
            return None
        h = ElectMasterResponseHeader.from_ext(resp.ext_fields)
        body = ElectMasterResponseBody.from_json(resp.body) if resp.body else ElectMasterResponseBody()
        sss = body.sync_state_set or (frozenset({h.master_broker_id}) if h.master_broker_id is not None else
                                      frozenset())
        return RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss,
                        h.sync_state_set_epoch or 0), send_ms

    async def alter_sync_state_set(self, proposed: set[int], master_epoch: int,
                                   sss_epoch: int) -> SyncStateSet | None:
        """CONTROLLER_ALTER_SYNC_STATE_SET with our master epoch and the current set epoch."""
        assert self.rm.broker_id is not None
        header = AlterSyncStateSetRequestHeader(self.rm.ctx.config.broker_name, self.rm.broker_id, master_epoch)
        resp = await self.link.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header.to_ext(),
                                    SyncStateSet(frozenset(proposed), sss_epoch).to_json())
        if resp.code != ResponseCode.SUCCESS:
            log.info("ALTER_SYNC_STATE_SET %s refused: %d %s", sorted(proposed), resp.code, resp.remark)
            if resp.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH:
                self.wake()  # we may have been replaced: learn it now
            return None
        return sync_state_set_of(resp.body)

    async def replicas(self) -> list[Replica]:
        """The other replicas from the controller (1006)."""
        cfg = self.rm.ctx.config
        resp = await self.link.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                                    broker_names_body([cfg.broker_name]))
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return []
        info = BrokerReplicasInfo.from_json(resp.body).replicas_info_table.get(cfg.broker_name)
        if info is None:
            return []
        return [Replica(r.broker_id, r.broker_address, r.alive)
                for r in (*info.in_sync_replicas, *info.not_in_sync_replicas)
                if r.broker_address and r.broker_id != self.rm.broker_id and r.broker_address != cfg.broker_addr]
