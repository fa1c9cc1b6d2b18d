"""ReplicasManager (service "replicas_manager"): the role-switch machinery of a broker whose role is decided outside
it, by the RIP-44 controller (enableControllerMode) or by a lease in a SQL database (enableLeaseElection). It
switches master <-> slave at runtime through AutoSwitchHAService and BrokerContext.set_role (epoch file, truncation
at the handshake, allAckInSyncStateSet), publishes consumer offsets only once the SyncStateSet holds them, and
fences: a master stores nothing without the write lease of its role source. Who is master at which epoch comes from
a RoleSource (role_source.py: controller_source.py or broker/lease_mode/source.py); wire-only handlers live in
wire.py. Design: docs/design/controller-broker.md. Never decides a role itself.
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
from orbitmq.broker.controller_mode import wire
from orbitmq.broker.controller_mode.link import ControllerUnavailable
from orbitmq.broker.controller_mode.offset_sync import OffsetPublisher
from orbitmq.broker.controller_mode.role_source import RoleSource
from orbitmq.broker.controller_mode.rules import Action, RoleInfo, decide
from orbitmq.broker.controller_mode.wire import MASTER_ID_KEY, SLAVE_ADDR_KEY, SLAVE_ID_KEY
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.metadata_sync import (
    OffsetForwarder,
    adopt_missing_metadata,
    offer_topics,
    pull_offsets_from,
    sync_metadata_from,
)
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.replication.autoswitch_driver import AutoSwitchConfig, AutoSwitchHAService

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 3000
OFFSET_PULL_TIMEOUT_S = 1.0  # a new master waits at most this long for its replicas' consumer offsets
RETRY_MS = 500  # a failed role switch is tried again this soon
FENCED, MASTER, SLAVE = "FENCED", "MASTER", "SLAVE"


class ReplicasManager:
    name = "replicas_manager"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv,
                 source_factory: Callable[[ReplicasManager], RoleSource] | None = None) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.env = env
        self.clock = env.clock
        self.boot_ms = env.clock.now_ms()
        self.ha = AutoSwitchHAService(ctx.store, AutoSwitchConfig(
            host=cfg.bind_address, port=cfg.ha_listen_port, cluster_secret=cfg.cluster_secret, batch_size=cfg.ha_transfer_batch_size, heartbeat_ms=cfg.ha_send_heartbeat_interval,
            housekeeping_ms=cfg.ha_housekeeping_interval, max_time_slave_not_catchup_ms=cfg.ha_max_time_slave_not_catchup,
            check_sync_state_set_period_ms=cfg.check_sync_state_set_period,
            all_ack_in_sync_state_set=cfg.all_ack_in_sync_state_set, in_sync_replicas=cfg.in_sync_replicas,
            min_in_sync_replicas=cfg.min_in_sync_replicas, sync_from_last_file=cfg.sync_from_last_file,
            async_learner=cfg.async_learner), max(cfg.broker_id, 0), clock=env.clock,
            on_sync_state_set_change=self._on_sync_state_set_change)
        self.forwarder = OffsetForwarder(env.client)
        self.broker_id: int | None = None  # the replica id (source-assigned; brokerId in the config is 0 while master)
        self.role = FENCED
        self.master_epoch = -1
        self.sss_epoch = -1
        self.sync_state_set: frozenset[int] = frozenset()
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.replica_addrs: list[str] = []  # master: the other replicas' addresses
        self.member_addrs: dict[int, str] = {}  # master: broker id -> address of the other replicas
        self.role_changes = 0
        self.metadata_syncs = 0
        self.last_error = ""
        self._lock = asyncio.Lock()
        self._sync_wake: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.offsets_synced = False  # slave: the master's offsets merged since the last switch
        ctx.write_fence = self.write_fence
        ctx.read_fence = self.read_fence
        # master: a commit is published only once every other SyncStateSet member acknowledged it (offset_sync.py)
        self.publisher = OffsetPublisher(ctx.offsets, env.client, self.member_addrs.get, self._refresh_replica_addrs)
        if source_factory is None:
            from orbitmq.broker.controller_mode.controller_source import ControllerSource
            source_factory = ControllerSource
        self.source: RoleSource = source_factory(self)
        ctx.set_role("SLAVE", cfg.broker_id)  # fenced as a replica until the source names the role (#6508)
        ctx.set_isolated(True)  # no name-server registration until then either

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def handlers(self) -> dict[int, Any]:
        return wire.handlers(self)

    async def start(self) -> None:
        cfg = self.ctx.config
        self._sync_wake = asyncio.Event()
        await self.source.start()
        await self.ha.start()
        if self.ha.port != cfg.ha_listen_port:  # port 0 (tests): register the real HA port
            self.ctx.config = dataclasses.replace(self.ctx.config, ha_listen_port=self.ha.port)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.source.run(), name=f"{self.source.kind} role source")
            tg.create_task(self._member_loop(), name="replica metadata sync")

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        self.forwarder.cancel_all()
        self.publisher.stop()
        self.source.drop_lease()
        await self.source.stop()
        await self.ha.stop()

    def spawn(self, coro: object, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def set_broker_id(self, broker_id: int) -> None:
        """The source assigned this broker's replica id (controller: identity flow; lease: a persisted id)."""
        self.broker_id = broker_id
        self.ha.broker_id = broker_id
        self.ctx.set_role(self.ctx.config.broker_role, broker_id)

    # ---- fencing ------------------------------------------------------------------------------------------
    def write_fence(self) -> tuple[int, str] | None:
        """BrokerContext.write_fence: why a write must be refused now, or None."""
        if self.role == MASTER:
            why = self.source.write_permit(self.clock.monotonic_ms(), self.master_epoch)
            if why is not None:
                return int(ResponseCode.SERVICE_NOT_AVAILABLE), why
            if self.ha.check_put() == "IN_SYNC_REPLICAS_NOT_ENOUGH":
                return int(ResponseCode.SYSTEM_ERROR), "in-sync replicas not enough"
            return None
        if self.role == FENCED:
            return int(ResponseCode.SERVICE_NOT_AVAILABLE), f"broker role not known yet ({self.source.kind} mode): fenced"
        return None

    def read_fence(self) -> tuple[int, str] | None:
        """BrokerContext.read_fence: pulls and offset queries wait until the role is known (a restarted broker's
        log tail may hold unconfirmed records, its offsets are those of its last persist: #6508), and on a slave
        until its first offset sync from the master."""
        if self.role == FENCED:
            return int(ResponseCode.SERVICE_NOT_AVAILABLE), f"broker role not known yet ({self.source.kind} mode): fenced"
        if self.role == SLAVE and not self.offsets_synced:
            return int(ResponseCode.SERVICE_NOT_AVAILABLE), "slave not synced with its master yet"
        return None

    def on_role_notify(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008): only the controller pushes roles."""
        notify = getattr(self.source, "on_role_notify", None)
        if notify is not None:
            notify(cmd)

    # ---- acting on what the source says -------------------------------------------------------------------
    async def apply(self, info: RoleInfo, send_ms: int | None, source: str, *, may_elect: bool = True) -> None:
        """Act on what the role source said (rules.decide), one at a time. send_ms: when the request this answers
        was sent (None for a push); the source may renew its lease from it (RoleSource.applied)."""
        if self.role == MASTER and info.master_epoch > self.master_epoch and info.master_id != self.broker_id:
            self.source.drop_lease()  # a newer master exists: stop acknowledging now, even if a switch holds the lock
        async with self._lock:
            await self._apply_locked(info, send_ms, source, may_elect)

    async def _apply_locked(self, info: RoleInfo, send_ms: int | None, source: str, may_elect: bool) -> None:
        if self.broker_id is None:
            return
        action = decide(self.master_epoch, self.sss_epoch, self.role == MASTER, self.broker_id, info)
        if action is not Action.IGNORE and (action is not Action.ELECT or self.role == MASTER or may_elect):
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
                elected = await self.source.elect()
                if elected is not None:
                    await self._apply_locked(elected[0], elected[1], "elect", False)
                return
        except (ValueError, OrbitMQError) as e:
            self.last_error = f"{action.value}: {e}"
            log.warning("%s failed: %s; retrying soon", action.value, e)
            self._retry_soon()
            return
        self.source.applied(info, send_ms)

    def _retry_soon(self) -> None:
        async def later() -> None:
            await asyncio.sleep(RETRY_MS / 1000)
            self.source.wake()
        self.spawn(later(), "role retry")

    # ---- role switches ---------------------------------------------------------------------------------------
    async def _to_master(self, info: RoleInfo) -> None:
        assert self.broker_id is not None
        ctx = self.ctx
        cfg = ctx.config
        store = ctx.store
        self.source.drop_lease()
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
        self.source.wake()  # the lease: ask the arbiter at once

    async def _to_slave(self, info: RoleInfo) -> None:
        assert self.broker_id is not None and info.master_addr is not None
        cfg = self.ctx.config
        self.source.drop_lease()
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
        self.source.drop_lease()
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
        """The master's HA address from its EXCHANGE_BROKER_HA_INFO answer (empty until it has become master). The
        request names this slave (id, address): a lease-mode master learns its replicas that way."""
        cfg = self.ctx.config
        ext = {SLAVE_ADDR_KEY: cfg.broker_addr, SLAVE_ID_KEY: str(self.broker_id)}
        resp = await self.env.client.invoke(master_addr, RemotingCommand.request(
            RequestCode.EXCHANGE_BROKER_HA_INFO, ext), REQUEST_TIMEOUT_MS)
        fields = resp.ext_fields or {}
        ha_addr = fields.get("masterHaAddress") if resp.code == ResponseCode.SUCCESS else None
        if not ha_addr:
            raise ControllerUnavailable(f"master {master_addr} does not serve HA yet (code {resp.code})")
        master_id = fields.get(MASTER_ID_KEY, "")
        if master_id.isdigit():
            self.source.peer_announced(int(master_id), master_addr)
        return ha_addr

    # ---- SyncStateSet ----------------------------------------------------------------------------------------
    def _take_sync_state_set(self, members: set[int], sss_epoch: int) -> None:
        if self.ha.set_sync_state_set(members, sss_epoch):
            self.sync_state_set, self.sss_epoch = frozenset(members), sss_epoch
            if self.role == MASTER:
                self.publisher.members_changed(members - {self.broker_id})
            log.info("SyncStateSet %s (epoch %d)", sorted(members), sss_epoch)

    def _on_sync_state_set_change(self, proposed: set[int]) -> None:
        self.spawn(self._report_sync_state_set(set(proposed)), "alter SyncStateSet")

    async def _report_sync_state_set(self, proposed: set[int]) -> None:
        """The source records the proposed set (with our master epoch and the current set epoch) before we use it."""
        assert self.broker_id is not None
        epoch, sss_epoch = self.master_epoch, self.sss_epoch
        try:
            new = await self.source.alter_sync_state_set(proposed, epoch, sss_epoch)
        except OrbitMQError as e:
            log.info("SyncStateSet change %s failed: %r", sorted(proposed), e)
            self.ha.sync_state_set_change_failed()
            return
        if new is None or self.master_epoch != epoch or self.role != MASTER:
            self.ha.sync_state_set_change_failed()
            return
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
        """The other replicas' addresses from the role source; returns the live ones."""
        others = await self.source.replicas()
        self.replica_addrs = sorted({r.addr for r in others})
        self.member_addrs.clear()
        self.member_addrs.update({r.broker_id: r.addr for r in others})
        return sorted({r.addr for r in others if r.alive})

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
    if ctx.config.enable_controller_mode:
        return ReplicasManager(ctx, env)
    if ctx.config.enable_lease_election:
        from orbitmq.broker.lease_mode.source import LeaseSource
        return ReplicasManager(ctx, env, LeaseSource)
    return None
