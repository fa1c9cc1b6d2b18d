"""ControllerService: one RIP-44 controller node (Raft driver + replicated state + local liveness + one port).

Owns sequencing and leadership: writes run one at a time (validate on the current state, propose the events,
wait for them to be applied), reads are answered by the leader after a read barrier, and a new leader serves only
once an entry of its term is committed. Leader-only background work: re-elections after a master's channel closes
or its heartbeat expires, the periodic inactive-master scan and role-change pushes. Request decoding is
processor.py's; the metadata rules are state.py's.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from orbitmq.acl.cluster import CONTROLLER_GUARDED_CODES, cluster_guarded, cluster_signer
from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.prom import prom_enabled
from orbitmq.controller.config import ControllerConfig
from orbitmq.controller.election import CandidateInfo
from orbitmq.controller.events import encode_event
from orbitmq.controller.heartbeat import DEFAULT_HEARTBEAT_TIMEOUT_MS, BrokerLiveInfo, BrokerLiveTable
from orbitmq.controller.metrics import ControllerMetrics
from orbitmq.controller.notify import RoleChangeNotifier
from orbitmq.controller.processor import ControllerProcessor
from orbitmq.controller.state import ControllerResult, ControllerStateMachine
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.controller import (
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    SyncStateSet,
)
from orbitmq.raft import NotLeaderError, RaftConfig, RaftDriver, RaftStorage, RaftTransport, Role
from orbitmq.remoting import Connection, RemotingServer
from orbitmq.remoting.connection import HandlerResult
from orbitmq.remoting.limits import limits_of

log = logging.getLogger(__name__)

WAIT_TIMEOUT_MS = 5000    # like RocketMQ's processor: a request waits at most 5 s for the controller
RAFT_DIR = "raft"

# elections the controller stops retrying: decided (a master exists / nobody can be master) or not ours to run
_FINAL = frozenset({ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE, ResponseCode.CONTROLLER_NOT_LEADER,
                    ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED})


def _fail(code: int, remark: str) -> ControllerResult:
    return ControllerResult(int(code), remark)


class ControllerService:
    def __init__(self, config: ControllerConfig, *, clock: Clock = REAL_CLOCK, rng: Any = None) -> None:
        config.validate()
        self.config = config
        self.clock = clock
        self.sm = ControllerStateMachine()
        self.state = self.sm.manager
        self.live = BrokerLiveTable()
        self.processor = ControllerProcessor(self)
        self.notifier = RoleChangeNotifier()
        peers = config.peers
        self.transport = RaftTransport(config.controller_dleger_group, config.controller_dleger_self_id, peers,
                                       sign=cluster_signer(config.cluster_secret))  # peers sign with the secret
        self.driver = RaftDriver(
            RaftConfig(config.controller_dleger_self_id, tuple(peers), election_ticks=config.raft_election_ticks,
                       tick_ms=config.raft_tick_ms),
            RaftStorage(os.path.join(config.controller_store_path, RAFT_DIR)), self.transport, self.sm,
            rng=rng, clock=clock, snapshot_every=config.raft_snapshot_every)
        self.server = RemotingServer(cluster_guarded(self.handle, config.cluster_secret, CONTROLLER_GUARDED_CODES),
                                     config.listen_host, config.port, name="controller",
                                     on_close=self.on_channel_closed, limits=limits_of(config))
        self._write_lock = asyncio.Lock()
        self._ready_term = -1
        self._activation: asyncio.Task[None] | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self._elections: dict[str, asyncio.Task[None]] = {}
        self._started_ms = 0
        self._serving_since_ms = 0
        self.metrics: ControllerMetrics | None = None  # metricsExporterType=PROM (controller/metrics.py)
        self._started = False

    # ---- lifecycle ------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        return self.config.self_addr

    async def start(self) -> None:
        """Listen on this node's peer port (ConfigError if taken), start Raft, start the scans."""
        await self.server.start()
        try:
            self.driver.add_role_listener(self._on_role)
            await self.driver.start()
        except BaseException:
            await self.server.stop()
            raise
        self._started_ms = self.clock.monotonic_ms()
        cfg = self.config
        if prom_enabled(cfg.metrics_exporter_type):
            self.metrics = ControllerMetrics(self, cfg.metrics_prom_exporter_host or cfg.listen_host,
                                             cfg.metrics_prom_exporter_port)
            try:
                await self.metrics.start()
            except BaseException:
                await self.driver.stop()
                await self.server.stop()
                raise
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop())
        self._started = True
        log.info("controller %s (group %s) started on %s, store %s", self.config.controller_dleger_self_id,
                 self.config.controller_dleger_group, self.addr, self.config.controller_store_path)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self._ready_term = -1
        tasks = [t for t in (self._activation, self._scan_task, *self._elections.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.driver.stop()
        await self.notifier.close()
        if self.metrics is not None:
            await self.metrics.stop()
        await self.server.stop()
        log.info("controller %s stopped", self.config.controller_dleger_self_id)

    def update_config(self, config: ControllerConfig) -> None:
        self.config = config

    # ---- leadership -----------------------------------------------------------------------------------------
    @property
    def leader_id(self) -> str:
        return self.driver.leader_id or ""

    @property
    def is_serving(self) -> bool:
        """Leader of the current term AND an entry of that term is committed (the state machine caught up)."""
        return self._ready_term >= 0 and self.driver.is_leader and self.driver.term == self._ready_term

    def _on_role(self, role: Any, term: int, leader_id: str) -> None:
        self._ready_term = -1
        if self._activation is not None:
            self._activation.cancel()
            self._activation = None
        if role == Role.LEADER:
            self._activation = asyncio.get_running_loop().create_task(self._activate(term))
        else:
            log.info("controller %s: %s in term %d (leader %s)", self.config.controller_dleger_self_id,
                     getattr(role, "name", role), term, leader_id or "unknown")

    async def _activate(self, term: int) -> None:
        """Serve only after the first commit of this term: until then the state may lag the log."""
        while self.driver.is_leader and self.driver.term == term:
            try:
                await self.driver.read_barrier(timeout_ms=WAIT_TIMEOUT_MS)
            except NotLeaderError:
                return
            except TimeoutError:
                continue
            if self.driver.is_leader and self.driver.term == term:
                self._serving_since_ms = self.clock.monotonic_ms()
                self.live.extend_all(self._serving_since_ms)
                self._ready_term = term
                log.info("controller %s is the leader of term %d and serving", self.config.controller_dleger_self_id,
                         term)
                self._check_reelect()
            return

    # ---- read and write paths -------------------------------------------------------------------------------
    def _not_leader(self) -> ControllerResult:
        leader = self.leader_id
        addr = self.config.peers.get(leader, "") if leader else ""
        return _fail(ResponseCode.CONTROLLER_NOT_LEADER,
                     f"The controller is not in leader state (leader {leader or 'unknown'} {addr})".rstrip())

    async def read(self, fn: Callable[[], ControllerResult]) -> ControllerResult:
        """Linearizable read on the leader: read barrier, then `fn()` on the state."""
        if not self.is_serving:
            return self._not_leader()
        try:
            await self.driver.read_barrier(timeout_ms=WAIT_TIMEOUT_MS)
        except NotLeaderError:
            return self._not_leader()
        except TimeoutError:
            return _fail(ResponseCode.SYSTEM_ERROR, "controller read barrier timed out")
        return fn()

    async def write(self, fn: Callable[[], ControllerResult]) -> ControllerResult:
        """One write at a time: validate `fn()` against the current state, then replicate and apply its events."""
        if not self.is_serving:
            return self._not_leader()
        try:
            async with asyncio.timeout(WAIT_TIMEOUT_MS / 1000):
                async with self._write_lock:
                    if not self.is_serving:
                        return self._not_leader()
                    await self.driver.read_barrier(timeout_ms=WAIT_TIMEOUT_MS)
                    result = fn()
                    for event in result.events:
                        await self.driver.propose(encode_event(event), timeout_ms=WAIT_TIMEOUT_MS)
                    return result
        except NotLeaderError:
            return self._not_leader()
        except TimeoutError:
            return _fail(ResponseCode.SYSTEM_ERROR, f"controller request timed out after {WAIT_TIMEOUT_MS} ms")

    # ---- liveness ---------------------------------------------------------------------------------------------
    def alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        return self.live.is_alive(cluster, broker_name, broker_id, self.clock.monotonic_ms())

    def live_info(self, cluster: str, broker_name: str, broker_id: int) -> CandidateInfo | None:
        return self.live.candidate_info(cluster, broker_name, broker_id)

    def on_heartbeat(self, conn: object, h: BrokerHeartbeatRequestHeader) -> None:
        assert h.broker_id is not None
        fresh = self.live.on_heartbeat(
            cluster_name=h.cluster_name, broker_name=h.broker_name, broker_id=h.broker_id, broker_addr=h.broker_addr,
            now_ms=self.clock.monotonic_ms(), channel=conn, timeout_ms=h.heartbeat_timeout_mills, epoch=h.epoch,
            max_offset=h.max_offset, confirm_offset=h.confirm_offset, election_priority=h.election_priority)
        if fresh:
            log.info("broker %s id %d (%s) is alive", h.broker_name, h.broker_id, h.broker_addr)
            if self.is_serving and h.broker_name in self.state.scan_need_reelect(
                    self.alive, unclean=self.config.enable_elect_unclean_master):
                self.trigger_election(h.broker_name)

    def on_channel_closed(self, conn: object) -> None:
        for info in self.live.on_channel_closed(conn):
            log.info("broker %s id %d (%s): connection closed", info.broker_name, info.broker_id, info.broker_addr)
            self._broker_inactive(info)

    def _broker_inactive(self, info: BrokerLiveInfo) -> None:
        if self.is_serving and self.state.master_of(info.broker_name) == info.broker_id:
            log.warning("master %s id %d is inactive: electing a new master", info.broker_name, info.broker_id)
            self.trigger_election(info.broker_name)

    # ---- elections --------------------------------------------------------------------------------------------
    def elect(self, h: ElectMasterRequestHeader) -> ControllerResult:
        return self.state.elect_master(h, self.alive, self.live_info,
                                       unclean=self.config.enable_elect_unclean_master)

    def trigger_election(self, broker_name: str) -> None:
        """A controller-triggered election (brokerId -1), unless one is already running for this broker-set."""
        running = self._elections.get(broker_name)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(self._elect_by_controller(broker_name))
        self._elections[broker_name] = task
        task.add_done_callback(lambda t, n=broker_name: self._elections.pop(n, None)
                               if self._elections.get(n) is t else None)

    async def _elect_by_controller(self, broker_name: str) -> None:
        for attempt in range(1, self.config.elect_master_max_retry_count + 1):
            bri = self.state.replica_info.get(broker_name)
            if bri is None or not self.is_serving:
                return
            h = ElectMasterRequestHeader(bri.cluster_name, broker_name, -1)
            r = await self.write(partial(self.elect, h))
            if r.ok:
                log.info("elected id %s (%s) master of %s, epoch %s", r.header.get("masterBrokerId"),
                         r.header.get("masterAddress"), broker_name, r.header.get("masterEpoch"))
                self.after_election(broker_name, r)
                return
            if r.code in _FINAL:
                log.info("election for %s: %d %s", broker_name, r.code, r.remark)
                return
            log.warning("election for %s failed (attempt %d): %d %s", broker_name, attempt, r.code, r.remark)

    def after_election(self, broker_name: str, r: ControllerResult) -> None:
        """Push NOTIFY_BROKER_ROLE_CHANGED to every alive registered member of the group."""
        if not self.config.notify_broker_role_changed:
            return
        group = self.state.member_group(broker_name)
        if group is None:
            return
        h = r.header
        master = int(h["masterBrokerId"]) if "masterBrokerId" in h else None
        header = NotifyBrokerRoleChangedRequestHeader(
            h.get("masterAddress"), int(h.get("masterEpoch", 0)), int(h.get("syncStateSetEpoch", 0)), master)
        members = frozenset({master}) if master is not None else frozenset()
        body = SyncStateSet(members, header.sync_state_set_epoch or 0)
        addrs = [addr for bid, addr in sorted(group.broker_addrs.items())
                 if self.alive(group.cluster, broker_name, bid)]
        self.notifier.notify(addrs, header, body)

    def _check_reelect(self) -> None:
        if not self.is_serving:
            return
        since = max(self._started_ms, self._serving_since_ms)
        if self.clock.monotonic_ms() - since < DEFAULT_HEARTBEAT_TIMEOUT_MS:
            # grace after start-up and after each leadership change: brokers may not have reached this controller
            # yet, and a master's lease granted through the previous leader must run out before it is replaced
            return
        for name in self.state.scan_need_reelect(self.alive, unclean=self.config.enable_elect_unclean_master):
            self.trigger_election(name)

    async def _scan_loop(self) -> None:
        now = self.clock.monotonic_ms()
        next_expire = now + self.config.scan_not_active_broker_interval_ms
        next_master = now + self.config.scan_inactive_master_interval_ms
        while True:
            await asyncio.sleep(max(0.01, (min(next_expire, next_master) - self.clock.monotonic_ms()) / 1000))
            now = self.clock.monotonic_ms()
            try:
                if now >= next_expire:
                    next_expire = now + self.config.scan_not_active_broker_interval_ms
                    # only the serving leader expires entries: a follower keeps what it heard, so that when it
                    # becomes leader extend_all() gives every known broker a fresh timeout
                    for info in (self.live.scan_expired(now) if self.is_serving else ()):
                        log.info("broker %s id %d (%s): heartbeat expired", info.broker_name, info.broker_id,
                                 info.broker_addr)
                        self._broker_inactive(info)
                if now >= next_master:
                    next_master = now + self.config.scan_inactive_master_interval_ms
                    self._check_reelect()
            except Exception:  # noqa: BLE001 - a scan bug must not end the scans
                log.exception("controller scan failed")

    # ---- the remoting handler ---------------------------------------------------------------------------------
    def handle(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        if cmd.code == RequestCode.ORBIT_RAFT_MESSAGE:  # Raft peer traffic shares the controller's port
            result: HandlerResult = self.transport.handle(conn, cmd)
            return result
        return self.processor(conn, cmd)

    def status(self) -> dict[str, object]:
        return {"id": self.config.controller_dleger_self_id, "serving": self.is_serving, "leader": self.leader_id,
                "brokerSets": len(self.state.replica_info), "liveBrokers": len(self.live),
                "raft": self.driver.status()}
