"""ReplicasManager (service "replicas_manager"): the broker side of RIP-44 controller mode. Gets the broker id
(identity.py), registers with the controller, heartbeats every controller, learns the role (register answer,
NOTIFY_BROKER_ROLE_CHANGED pushes, GET_REPLICA_INFO polls), switches master <-> slave at runtime through
AutoSwitchHAService and BrokerContext.set_role, reports SyncStateSet changes, and fences writes: a master stores
nothing without a lease renewed by the controller leader (rules.py). Wire-only handlers live in wire.py.
Design: docs/design/controller-broker.md. Never decides a role itself: the controller does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from typing import Any

from orbitmq.base.errors import ConfigError, OrbitMQError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.controller_mode import wire
from orbitmq.broker.controller_mode.identity import IdentityFiles, IdRefused, obtain_broker_id
from orbitmq.broker.controller_mode.link import ControllerLink, ControllerUnavailable
from orbitmq.broker.controller_mode.offset_sync import OffsetPublisher
from orbitmq.broker.controller_mode.rules import Action, RoleInfo, WriteLease, decide, renews_lease
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.metadata_sync import (
    OffsetForwarder,
    adopt_missing_metadata,
    offer_topics,
    pull_offsets_from,
    sync_metadata_from,
)
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
from orbitmq.replication.autoswitch_driver import AutoSwitchConfig, AutoSwitchHAService

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 3000
OFFSET_PULL_TIMEOUT_S = 1.0  # a new master waits at most this long for its replicas' consumer offsets
RETRY_MS = 500  # a failed role switch or registration is tried again this soon (then backing off to 5 s)
FENCED, MASTER, SLAVE = "FENCED", "MASTER", "SLAVE"


def _sss(body: bytes | None) -> SyncStateSet:
    return SyncStateSet.from_json(body) if body else SyncStateSet()


class ReplicasManager:
    name = "replicas_manager"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.env = env
        self.clock = env.clock
        self.boot_ms = env.clock.now_ms()
        self.ha = AutoSwitchHAService(ctx.store, AutoSwitchConfig(
            port=cfg.ha_listen_port, batch_size=cfg.ha_transfer_batch_size, heartbeat_ms=cfg.ha_send_heartbeat_interval,
            housekeeping_ms=cfg.ha_housekeeping_interval, max_time_slave_not_catchup_ms=cfg.ha_max_time_slave_not_catchup,
            check_sync_state_set_period_ms=cfg.check_sync_state_set_period,
            all_ack_in_sync_state_set=cfg.all_ack_in_sync_state_set, in_sync_replicas=cfg.in_sync_replicas,
            min_in_sync_replicas=cfg.min_in_sync_replicas, sync_from_last_file=cfg.sync_from_last_file,
            async_learner=cfg.async_learner), max(cfg.broker_id, 0), clock=env.clock,
            on_sync_state_set_change=self._on_sync_state_set_change)
        self.link = ControllerLink(env.client, cfg.controller_addrs, self._on_leader_lost)
        self.lease = WriteLease(cfg.controller_heart_beat_timeout_mills, cfg.broker_heartbeat_interval)
        root = env.store_config.store_path_root_dir
        self.files = IdentityFiles(cfg.store_path_broker_identity or os.path.join(root, "brokerIdentity"))
        self.forwarder = OffsetForwarder(env.client)
        self.broker_id: int | None = None  # the controller-assigned id (brokerId in the config is 0 while master)
        self.role = FENCED
        self.master_epoch = -1
        self.sss_epoch = -1
        self.sync_state_set: frozenset[int] = frozenset()
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.replica_addrs: list[str] = []  # master: the other replicas' addresses
        self.member_addrs: dict[int, str] = {}  # master: broker id -> address of the other replicas
        self.registered = False
        self.role_changes = 0
        self.elections_asked = 0
        self.metadata_syncs = 0
        self.last_error = ""
        self._lock = asyncio.Lock()
        self._wake: asyncio.Event | None = None
        self._sync_wake: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._heartbeat_sent: dict[str, int] = {}  # controller address -> monotonic ms of the last heartbeat sent
        self.offsets_synced = False  # slave: the master's offsets merged since the last switch
        ctx.write_fence = self.write_fence
        ctx.read_fence = self.read_fence
        # master: a commit is published only once every other SyncStateSet member acknowledged it (offset_sync.py)
        self.publisher = OffsetPublisher(ctx.offsets, env.client, self.member_addrs.get, self._refresh_replica_addrs)
        ctx.set_role("SLAVE", cfg.broker_id)  # fenced as a replica until the controller names the role (#6508)
        ctx.set_isolated(True)  # no name-server registration until then either

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def handlers(self) -> dict[int, Any]:
        return wire.handlers(self)

    async def start(self) -> None:
        cfg = self.ctx.config
        for ident, path in ((self.files.load(), self.files.path), (self.files.load_temp(), self.files.temp_path)):
            if ident is not None and (ident.cluster_name, ident.broker_name) != (cfg.broker_cluster_name,
                                                                                  cfg.broker_name):
                raise ConfigError(f"broker identity file {path} belongs to {ident.cluster_name}/{ident.broker_name},"
                                  f" not brokerClusterName={cfg.broker_cluster_name} brokerName={cfg.broker_name}")
        self._wake = asyncio.Event()
        self._sync_wake = asyncio.Event()
        await self.ha.start()
        if self.ha.port != cfg.ha_listen_port:  # port 0 (tests): register the real HA port
            self.ctx.config = dataclasses.replace(self.ctx.config, ha_listen_port=self.ha.port)

    async def run(self) -> None:
        await self._register_until_done()
        async with asyncio.TaskGroup() as tg:
            for addr in self.ctx.config.controller_addrs:
                tg.create_task(self._heartbeat_loop(addr), name=f"controller heartbeat {addr}")
            tg.create_task(self._replica_info_loop(), name="replica info poll")
            tg.create_task(self._controller_metadata_loop(), name="controller leader poll")
            tg.create_task(self._member_loop(), name="replica metadata sync")

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        self.forwarder.cancel_all()
        self.publisher.stop()
        self.lease.drop()
        await self.ha.stop()

    def _spawn(self, coro: object, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- fencing ------------------------------------------------------------------------------------------
    def write_fence(self) -> tuple[int, str] | None:
        """BrokerContext.write_fence: why a write must be refused now, or None."""
        if self.role == MASTER:
            if not self.lease.valid(self.clock.monotonic_ms(), self.master_epoch):
                return (int(ResponseCode.SERVICE_NOT_AVAILABLE),
                        f"master of epoch {self.master_epoch} holds no write lease from the controller (fenced)")
            if self.ha.check_put() == "IN_SYNC_REPLICAS_NOT_ENOUGH":
                return int(ResponseCode.SYSTEM_ERROR), "in-sync replicas not enough"
            return None
        if self.role == FENCED:
            return int(ResponseCode.SERVICE_NOT_AVAILABLE), "broker role not known yet (controller mode): fenced"
        return None

    def read_fence(self) -> tuple[int, str] | None:
        """BrokerContext.read_fence: pulls and offset queries wait until the role is known (a restarted broker's
        log tail may hold unconfirmed records, its offsets are those of its last persist: #6508), and on a slave
        until its first offset sync from the master."""
        if self.role == FENCED:
            return int(ResponseCode.SERVICE_NOT_AVAILABLE), "broker role not known yet (controller mode): fenced"
        if self.role == SLAVE and not self.offsets_synced:
            return int(ResponseCode.SERVICE_NOT_AVAILABLE), "slave not synced with its master yet"
        return None

    def _on_leader_lost(self) -> None:
        """The controller elects at once when a master's connection closes: our lease ends now too."""
        if self.role == MASTER:
            log.warning("write lease dropped: connection to the controller leader closed")
        self.lease.drop()
        if self._wake is not None:
            self._wake.set()

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
                self.last_error = f"register: {e}"
                log.info("controller registration failed (%s); retrying in %d ms", e, delay)
                await asyncio.sleep(delay / 1000)
                delay = min(delay * 2, 5000)

    async def register_once(self) -> None:
        cfg = self.ctx.config
        if self.broker_id is None:
            bid = await obtain_broker_id(self.files, cfg.broker_cluster_name, cfg.broker_name, cfg.broker_addr,
                                         self.clock.now_ms(), self)
            self.broker_id = bid
            self.ha.broker_id = bid
            self.ctx.set_role(self.ctx.config.broker_role, bid)
            log.info("controller broker id of %s/%s is %d", cfg.broker_cluster_name, cfg.broker_name, bid)
        send_ms = self.clock.monotonic_ms()
        resp = await self.link.call(RequestCode.CONTROLLER_REGISTER_BROKER, RegisterBrokerToControllerRequestHeader(
            cfg.broker_cluster_name, cfg.broker_name, self.broker_id, cfg.broker_addr).to_ext())
        if resp.code != ResponseCode.SUCCESS:
            raise ControllerUnavailable(f"REGISTER_BROKER: code {resp.code} {resp.remark}")
        self.registered = True
        await self._heartbeat_all()  # the controller elects only live brokers
        h = RegisterBrokerToControllerResponseHeader.from_ext(resp.ext_fields)
        sss = _sss(resp.body)
        await self.apply(RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss.sync_state_set,
                                  sss.sync_state_set_epoch), send_ms, "register")

    # ---- heartbeats and polls -----------------------------------------------------------------------------
    def heartbeat_ext(self) -> dict[str, str]:
        cfg = self.ctx.config
        st = self.ctx.store
        return BrokerHeartbeatRequestHeader(
            cfg.broker_cluster_name, cfg.broker_addr, cfg.broker_name, self.broker_id, st.master_epoch,
            st.max_phys_offset, self.ha.confirm_offset, cfg.controller_heart_beat_timeout_mills,
            cfg.broker_election_priority).to_ext()

    async def _heartbeat_one(self, addr: str) -> None:
        timeout = self.ctx.config.send_heartbeat_timeout_millis / 1000
        try:
            async with asyncio.timeout(timeout):
                sent = self.clock.monotonic_ms()
                await self.link.heartbeat(addr, self.heartbeat_ext())
            self._heartbeat_sent[addr] = sent  # written to that connection: the lease counts from here
        except (OrbitMQError, TimeoutError) as e:
            log.debug("heartbeat to controller %s failed: %r", addr, e)

    async def _heartbeat_all(self) -> None:
        await asyncio.gather(*(self._heartbeat_one(a) for a in self.ctx.config.controller_addrs))

    async def _heartbeat_loop(self, addr: str) -> None:
        while True:
            await self._heartbeat_one(addr)
            await asyncio.sleep(self.ctx.config.broker_heartbeat_interval / 1000)

    async def _replica_info_loop(self) -> None:
        """GET_REPLICA_INFO every brokerHeartbeatInterval while master (the lease), else every
        syncBrokerMetadataPeriod; at once when woken (a push to apply, a lost leader connection, a failed switch)."""
        assert self._wake is not None
        while True:
            cfg = self.ctx.config
            period = cfg.broker_heartbeat_interval if self.role == MASTER else cfg.sync_broker_metadata_period
            if self.role == FENCED:
                period = min(period, 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period / 1000):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.poll_replica_info()
            except OrbitMQError as e:
                self.last_error = f"replica info: {e}"
                log.debug("GET_REPLICA_INFO failed: %r", e)

    async def poll_replica_info(self) -> None:
        cfg = self.ctx.config
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
        sss = _sss(resp.body)
        await self.apply(RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss.sync_state_set,
                                  sss.sync_state_set_epoch), send_ms, "poll")

    async def _controller_metadata_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ctx.config.sync_controller_metadata_period / 1000)
            with contextlib.suppress(OrbitMQError):
                await self.link.find_leader()

    # ---- role notifications ---------------------------------------------------------------------------------
    def on_role_notify(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008), on our port or over our connection to a controller."""
        h = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
        sss = _sss(cmd.body)
        info = RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss.sync_state_set,
                        sss.sync_state_set_epoch)
        log.info("role change pushed: master %s (%s) epoch %s, SyncStateSet %s", h.master_broker_id,
                 h.master_address, h.master_epoch, sorted(sss.sync_state_set))
        self._spawn(self._apply_push(info), "apply role push")

    async def _apply_push(self, info: RoleInfo) -> None:
        try:
            await self.apply(info, None, "push")
        except OrbitMQError as e:
            self.last_error = f"push: {e}"
        if self._wake is not None:
            self._wake.set()  # a push carries no lease: ask the leader now

    async def apply(self, info: RoleInfo, send_ms: int | None, source: str, *, may_elect: bool = True) -> None:
        """Act on what the controller said (rules.decide), one at a time. send_ms: when the request this answers
        was sent (None for a push): a leader's answer naming us master of our epoch renews the lease."""
        if self.role == MASTER and info.master_epoch > self.master_epoch and info.master_id != self.broker_id:
            self.lease.drop()  # a newer master exists: stop acknowledging now, even if a switch holds the lock
        async with self._lock:
            await self._apply_locked(info, send_ms, source, may_elect)

    async def _apply_locked(self, info: RoleInfo, send_ms: int | None, source: str, may_elect: bool) -> None:
        if self.broker_id is None:
            return
        action = decide(self.master_epoch, self.sss_epoch, self.role == MASTER, self.broker_id, info)
        if action is not Action.IGNORE:
            log.info("%s: %s (master %s epoch %d, ours %d)", source, action.value, info.master_id,
                     info.master_epoch, self.master_epoch)
        try:
            if action is Action.BECOME_MASTER:
                await self._to_master(info)
            elif action is Action.BECOME_SLAVE:
                await self._to_slave(info)
            elif action is Action.UPDATE_SYNC_STATE_SET:
                self._take_sync_state_set(set(info.sync_state_set), info.sss_epoch)
            elif action is Action.ELECT and may_elect:
                if self.role == MASTER:
                    await self._step_down(f"epoch {info.master_epoch} has no master")
                elected = await self._elect()
                if elected is not None:
                    await self._apply_locked(elected[0], elected[1], "elect", False)
                return
        except (ValueError, OrbitMQError) as e:
            self.last_error = f"{action.value}: {e}"
            log.warning("%s failed: %s; retrying soon", action.value, e)
            self._retry_soon()
            return
        if send_ms is not None and renews_lease(self.master_epoch, self.role == MASTER, self.broker_id, info):
            hb = self._heartbeat_sent.get(self.link.leader_addr or "")
            if hb is not None and hb <= send_ms:  # else no heartbeat reached that leader before the request
                self.lease.renew(info.master_epoch, send_ms, hb)

    def _retry_soon(self) -> None:
        async def later() -> None:
            await asyncio.sleep(RETRY_MS / 1000)
            if self._wake is not None:
                self._wake.set()
        self._spawn(later(), "role retry")

    async def _elect(self) -> tuple[RoleInfo, int] | None:
        """CONTROLLER_ELECT_MASTER with our id (no master known). The answer (new master, or 2011: the master
        still exists) is applied like any other; other codes leave us fenced until the next poll."""
        cfg = self.ctx.config
        self.elections_asked += 1
        send_ms = self.clock.monotonic_ms()
        resp = await self.link.call(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            cfg.broker_cluster_name, cfg.broker_name, self.broker_id).to_ext())
        if resp.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            log.info("election request answered %d %s", resp.code, resp.remark)
            return None
        h = ElectMasterResponseHeader.from_ext(resp.ext_fields)
        body = ElectMasterResponseBody.from_json(resp.body) if resp.body else ElectMasterResponseBody()
        sss = body.sync_state_set or (frozenset({h.master_broker_id}) if h.master_broker_id is not None else
                                      frozenset())
        return RoleInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sss,
                        h.sync_state_set_epoch or 0), send_ms

    # ---- role switches ---------------------------------------------------------------------------------------
    async def _to_master(self, info: RoleInfo) -> None:
        assert self.broker_id is not None
        ctx = self.ctx
        cfg = ctx.config
        store = ctx.store
        self.lease.drop()
        members = set(info.sync_state_set) or {self.broker_id}
        await self.ha.change_to_master(info.master_epoch, members, info.sss_epoch)
        needed = self.ha.needed_acks()
        store.replica.set_policy(wait_ms=cfg.slave_timeout if needed not in (0, 1) else 0,
                                 gate_visibility=cfg.all_ack_in_sync_state_set, available=None)
        self.ha.progress()
        raised = store.raise_queue_offsets()  # never reuse a queue offset (#6344, #7689)
        for tc in ctx.topics.adopt_topics_with_data(store.cq_table.queue_max_offsets()):
            log.warning("new master: topic %s has data but no config here: config added (%d queues)",
                        tc.topic_name, tc.write_queue_nums)
        self.master_epoch, self.sss_epoch, self.sync_state_set = info.master_epoch, info.sss_epoch, frozenset(members)
        self.master_id, self.master_addr = self.broker_id, cfg.broker_addr
        self.role = MASTER
        self.role_changes += 1
        dv = ctx.topics.data_version
        dv.state_version = info.master_epoch  # name servers prefer the route of the higher epoch (#6316)
        dv.next_version()
        with contextlib.suppress(OSError):
            ctx.topics.persist()
        await self._take_offsets_from_replicas()  # before clients can see us as master
        self.publisher.start(members - {self.broker_id}, info.master_epoch)
        ctx.set_role("SYNC_MASTER", 0)  # special services on (role listeners)
        self._unfence_registration()
        log.warning("broker %s (id %d) is MASTER of epoch %d, SyncStateSet %s%s", cfg.broker_name, self.broker_id,
                    info.master_epoch, sorted(members), f" ({raised} queue offsets raised)" if raised else "")
        if self._wake is not None:
            self._wake.set()  # the lease: ask the leader at once

    async def _to_slave(self, info: RoleInfo) -> None:
        assert self.broker_id is not None and info.master_addr is not None
        cfg = self.ctx.config
        self.lease.drop()
        self.publisher.stop()
        if self.role == MASTER:
            await self._step_down(f"master {info.master_id} of epoch {info.master_epoch} elected")
        ha_addr = await self._master_ha_addr(info.master_addr)
        await self.ha.change_to_slave(ha_addr, info.master_epoch, self.broker_id)
        self.ctx.store.replica.set_policy(wait_ms=0, gate_visibility=cfg.all_ack_in_sync_state_set, available=None)
        self.master_epoch, self.sss_epoch, self.sync_state_set = info.master_epoch, info.sss_epoch, info.sync_state_set
        self.master_id, self.master_addr = info.master_id, info.master_addr
        self.replica_addrs = []
        self.offsets_synced = False
        self.role = SLAVE
        self.role_changes += 1
        self.ctx.set_role("SLAVE", self.broker_id)
        self._unfence_registration()
        log.warning("broker %s (id %d) is SLAVE of %s (id %s, HA %s) in epoch %d", cfg.broker_name, self.broker_id,
                    info.master_addr, info.master_id, ha_addr, info.master_epoch)
        if self._sync_wake is not None:
            self._sync_wake.set()  # topics, groups and offsets from the new master now

    async def _step_down(self, why: str) -> None:
        """Stop acting as master at once (a higher epoch exists): no lease, no replication, writes refused."""
        assert self.broker_id is not None
        self.lease.drop()
        self.publisher.stop()
        self.role = FENCED
        log.warning("broker %s steps down as master: %s", self.ctx.config.broker_name, why)
        await self.ha.suspend()
        self.ctx.set_role("SLAVE", self.broker_id)
        self.ctx.request_register()

    def _unfence_registration(self) -> None:
        if self.ctx.isolated:
            self.ctx.set_isolated(False)  # registers at once
        else:
            self.ctx.request_register()

    async def _master_ha_addr(self, master_addr: str) -> str:
        """The master's HA address from its EXCHANGE_BROKER_HA_INFO answer (empty until it has become master)."""
        resp = await self.env.client.invoke(master_addr, RemotingCommand.request(RequestCode.EXCHANGE_BROKER_HA_INFO),
                                            REQUEST_TIMEOUT_MS)
        ha_addr = (resp.ext_fields or {}).get("masterHaAddress") if resp.code == ResponseCode.SUCCESS else None
        if not ha_addr:
            raise ControllerUnavailable(f"master {master_addr} does not serve HA yet (code {resp.code})")
        return ha_addr

    # ---- SyncStateSet ----------------------------------------------------------------------------------------
    def _take_sync_state_set(self, members: set[int], sss_epoch: int) -> None:
        if self.ha.set_sync_state_set(members, sss_epoch):
            self.sync_state_set, self.sss_epoch = frozenset(members), sss_epoch
            if self.role == MASTER:
                self.publisher.members_changed(members - {self.broker_id})
            log.info("SyncStateSet %s (epoch %d)", sorted(members), sss_epoch)

    def _on_sync_state_set_change(self, proposed: set[int]) -> None:
        self._spawn(self._report_sync_state_set(set(proposed)), "alter SyncStateSet")

    async def _report_sync_state_set(self, proposed: set[int]) -> None:
        """CONTROLLER_ALTER_SYNC_STATE_SET with our master epoch and the current set epoch."""
        assert self.broker_id is not None
        epoch, sss_epoch = self.master_epoch, self.sss_epoch
        header = AlterSyncStateSetRequestHeader(self.ctx.config.broker_name, self.broker_id, epoch)
        try:
            resp = await self.link.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header.to_ext(),
                                        SyncStateSet(frozenset(proposed), sss_epoch).to_json())
        except OrbitMQError as e:
            log.info("ALTER_SYNC_STATE_SET %s failed: %r", sorted(proposed), e)
            self.ha.sync_state_set_change_failed()
            return
        if resp.code != ResponseCode.SUCCESS or self.master_epoch != epoch or self.role != MASTER:
            log.info("ALTER_SYNC_STATE_SET %s refused: %d %s", sorted(proposed), resp.code, resp.remark)
            self.ha.sync_state_set_change_failed()
            if resp.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH and self._wake is not None:
                self._wake.set()  # we may have been replaced: learn it now
            return
        new = _sss(resp.body)
        self._take_sync_state_set(set(new.sync_state_set), new.sync_state_set_epoch)

    # ---- replica metadata (slave) and members (master) -------------------------------------------------------
    async def _member_loop(self) -> None:
        assert self._sync_wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ctx.config.sync_broker_metadata_period / 1000):
                    await self._sync_wake.wait()
            self._sync_wake.clear()
            try:
                if self.role == SLAVE and self.master_addr:
                    addr = self.master_addr
                    with_data = {t for (t, _), m in self.ctx.store.cq_table.queue_max_offsets().items() if m > 0}
                    kept = await sync_metadata_from(self.ctx, self.env.client, addr, keep=with_data.__contains__)
                    if kept and addr == self.master_addr:  # the master lacks topics we hold data of
                        offered = await offer_topics(self.env.client, addr, kept)
                        log.warning("topics kept (data here, no config on the master): %s; offered: %s",
                                    [tc.topic_name for tc in kept], offered)
                    self.offsets_synced = self.offsets_synced or addr == self.master_addr
                    self.metadata_syncs += 1
                elif self.role == MASTER:
                    await self._refresh_replica_addrs()
            except (OrbitMQError, ValueError, OSError) as e:
                log.info("replica metadata sync failed: %r", e)

    async def _refresh_replica_addrs(self) -> list[str]:
        """The other replicas' addresses from the controller (1006); returns the live ones."""
        cfg = self.ctx.config
        resp = await self.link.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                                    broker_names_body([cfg.broker_name]))
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return []
        info = BrokerReplicasInfo.from_json(resp.body).replicas_info_table.get(cfg.broker_name)
        if info is None:
            return []
        others = [r for r in (*info.in_sync_replicas, *info.not_in_sync_replicas)
                  if r.broker_address and r.broker_id != self.broker_id and r.broker_address != cfg.broker_addr]
        self.replica_addrs = sorted({r.broker_address for r in others if r.broker_address})
        self.member_addrs.clear()
        self.member_addrs.update({r.broker_id: r.broker_address for r in others if r.broker_address})
        return sorted({r.broker_address for r in others if r.broker_address and r.alive})

    async def _take_from_replica(self, addr: str) -> None:
        await pull_offsets_from(self.ctx, self.env.client, addr)
        added = await adopt_missing_metadata(self.ctx, self.env.client, addr)
        if added:
            log.info("new master: %d topics/groups taken from replica %s", added, addr)

    async def _take_offsets_from_replicas(self) -> None:
        """A new master merges the consumer and delay offsets of every live replica (per queue the larger) and adds
        the topics and groups it lacks, bounded by OFFSET_PULL_TIMEOUT_S: a replica may hold commits forwarded by the
        old master, or a topic synced from it, that this broker missed (it was restarting, or the old master did not
        know it yet). Best effort; also starts offset forwarding."""
        try:
            async with asyncio.timeout(OFFSET_PULL_TIMEOUT_S):
                live = await self._refresh_replica_addrs()
                results = await asyncio.gather(*(self._take_from_replica(a) for a in live), return_exceptions=True)
        except (TimeoutError, OrbitMQError) as e:
            log.info("new master: offsets from the replicas incomplete (%r)", e)
            return
        failed = [a for a, r in zip(live, results, strict=True) if isinstance(r, BaseException)]
        if failed:
            log.info("new master: offsets not fetched from %s", failed)

    def forward_offset(self, ext: dict[str, str]) -> None:
        """A consumer offset committed on a slave goes to the master (a master's own commits travel through the
        publisher, acknowledged)."""
        if self.role == SLAVE and self.master_addr:
            self.forwarder.forward(self.master_addr, ext)


def create(ctx: BrokerContext, env: ServiceEnv) -> ReplicasManager | None:
    return ReplicasManager(ctx, env) if ctx.config.enable_controller_mode else None
