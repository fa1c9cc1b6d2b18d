"""ReplicasManager (broker/controller_mode/replicas_manager.py) on a real store and real metadata managers, with the
controller replaced by canned answers and a manual clock: start fenced, become master on the controller's word
(brokerId 0, SYNC_MASTER, stateVersion = epoch), the write lease (expiry, renewal by a poll, loss with the leader
connection), stale and SyncStateSet notifications, minInSyncReplicas, and stepping down on a masterless higher epoch.
No sockets: the AutoSwitch listener is never started and a master role opens none."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.controller_mode.offset_sync import decode_batch, encode_batch
from orbitmq.broker.controller_mode.replicas_manager import FENCED, MASTER, ReplicasManager
from orbitmq.broker.controller_mode.rules import RoleInfo
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.stats import BrokerStats
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.testing.sim_disk import SimDisk

TIMEOUT, INTERVAL = 3000, 500  # lease = 3000 - 2 x 500 = 2000 ms after the request was sent


class Clock:
    def __init__(self) -> None:
        self.mono = 1_000_000

    def now_ms(self) -> int:
        return 1_700_000_000_000 + self.mono

    def monotonic_ms(self) -> int:
        return self.mono


class FakeLink:
    """The controller leader as the manager sees it: answers by request code; records what was asked."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.heartbeats: list[str] = []
        self.leader_addr = "127.0.0.1:9878"
        self.elect_code = ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE

    async def heartbeat(self, addr: str, ext: dict[str, str]) -> None:
        self.heartbeats.append(addr)

    async def call(self, code: int, ext: dict[str, str], body: bytes | None = None,
                   timeout_ms: int = 3000) -> RemotingCommand:
        self.calls.append(code)
        req = RemotingCommand.request(code, ext, body)
        if code == RequestCode.CONTROLLER_GET_SYNC_STATE_DATA:
            return req.response(body=b'{"replicasInfoTable":{}}')
        if code == RequestCode.CONTROLLER_ELECT_MASTER:
            return req.response(self.elect_code, "no candidate")
        return req.response(ResponseCode.SYSTEM_ERROR, "not expected here")


class FakeClient:
    """Outgoing requests (offset batches, forwarding) are recorded, not sent; members in `refuse` answer 11."""

    def __init__(self) -> None:
        self.oneway: list[tuple[str, RemotingCommand]] = []
        self.invoked: list[tuple[str, RemotingCommand]] = []
        self.refuse: set[str] = set()

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self.oneway.append((addr, cmd))

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        self.invoked.append((addr, cmd))
        if addr in self.refuse:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "not yet")
        return cmd.response()


def make_ctx(tmp_path: Path, cfg: BrokerConfig) -> tuple[BrokerContext, StoreConfig, str]:
    """A context on a real store (simulated disk) and real metadata managers; isolation recorded, no sockets."""
    scfg = StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=16 * 1024,
                       mapped_file_size_consume_queue=2000, max_message_size=4096, max_hash_slot_num=64,
                       max_index_num=512)
    store = MessageStore(scfg, disk=SimDisk())
    store.load()
    config_dir = str(tmp_path / "config")
    ctx = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                        ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), cfg.broker_addr)
    registrations: list[int] = []
    ctx.request_register = lambda: registrations.append(1)

    def set_isolated(flag: bool) -> None:
        ctx.isolated = flag

    ctx.set_isolated = set_isolated
    return ctx, scfg, config_dir


def make(tmp_path: Path, **cfg_kw: Any) -> tuple[ReplicasManager, BrokerContext, Clock, FakeLink]:
    cfg = BrokerConfig(broker_ip1="127.0.0.1", listen_port=10911, enable_controller_mode=True,
                       controller_addr="127.0.0.1:9878", broker_id=-1, broker_role="SLAVE",
                       controller_heart_beat_timeout_mills=TIMEOUT, broker_heartbeat_interval=INTERVAL, **cfg_kw)
    ctx, scfg, config_dir = make_ctx(tmp_path, cfg)
    clock = Clock()
    rm = ReplicasManager(ctx, ServiceEnv(clock, FakeClient(), config_dir, scfg))  # type: ignore[arg-type]
    link = FakeLink()
    rm.source.link = link  # type: ignore[attr-defined]
    rm.broker_id = 1
    rm.ha.broker_id = 1
    return rm, ctx, clock, link


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_fenced_until_the_controller_names_the_role(tmp_path: Path) -> None:
    rm, ctx, clock, link = make(tmp_path)
    assert rm.role == FENCED and ctx.isolated and ctx.config.is_slave
    assert ctx.write_fence() == (ResponseCode.SERVICE_NOT_AVAILABLE,
                                 "broker role not known yet (controller mode): fenced")
    assert ctx.read_fence() is not None

    async def scenario() -> None:
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "register")
        try:
            assert rm.role == MASTER and not ctx.isolated
            assert ctx.config.broker_role == "SYNC_MASTER" and ctx.config.broker_id == 0
            assert ctx.topics.data_version.state_version == 1
            assert ctx.store.epoch_entries[-1][0] == 1
            assert ctx.write_fence() is None and ctx.read_fence() is None  # the register answer gave a lease
            assert RequestCode.CONTROLLER_GET_SYNC_STATE_DATA in link.calls  # offsets from the replicas first
            # the lease runs out 2 s after the request that renewed it was sent
            clock.mono += TIMEOUT - 2 * INTERVAL
            code, remark = ctx.write_fence() or (0, "")
            assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "no write lease" in remark
            await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "poll")
            # the last heartbeat to the leader left 2 s ago: it allows only heartbeat + 3000 - 500
            assert ctx.write_fence() is None and rm.source.lease.remaining_ms(clock.monotonic_ms()) == 500
            await rm.source.heartbeat_all()  # type: ignore[attr-defined]
            await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "poll")
            assert ctx.write_fence() is None
            # the controller elects at once on a closed connection: so do we stop
            rm.source._on_leader_lost()  # type: ignore[attr-defined]
            assert ctx.write_fence() is not None
            await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "poll")
            assert ctx.write_fence() is None
            # a push carries no lease; a stale one changes nothing
            await rm.apply(RoleInfo(2, "127.0.0.1:20911", 0, frozenset({2}), 5), None, "push")
            assert rm.role == MASTER and rm.master_epoch == 1
        finally:
            await rm.stop()

    run(scenario())


def test_sync_state_set_updates_and_min_in_sync_replicas(tmp_path: Path) -> None:
    rm, ctx, clock, _ = make(tmp_path, min_in_sync_replicas=2)

    async def scenario() -> None:
        me = "127.0.0.1:10911"
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, me, 3, frozenset({1}), 4), clock.monotonic_ms(), "poll")
        try:
            assert rm.role == MASTER
            assert ctx.write_fence() == (ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")
            await rm.apply(RoleInfo(1, me, 3, frozenset({1, 2}), 4), clock.monotonic_ms(), "push")  # same set epoch
            assert rm.sync_state_set == frozenset({1}) and ctx.write_fence() is not None
            await rm.apply(RoleInfo(1, me, 3, frozenset({1, 2}), 5), clock.monotonic_ms(), "push")
            assert rm.sync_state_set == frozenset({1, 2}) and rm.sss_epoch == 5
            assert ctx.write_fence() is None
        finally:
            await rm.stop()

    run(scenario())


def test_a_higher_epoch_without_master_steps_down_and_asks_for_an_election(tmp_path: Path) -> None:
    rm, ctx, clock, link = make(tmp_path)

    async def scenario() -> None:
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "register")
        try:
            ctx.store.put_messages_nowait([MessageInner("T", 0, b"x", {})])
            await rm.apply(RoleInfo(None, None, 2, frozenset(), 1), clock.monotonic_ms(), "poll")
            assert RequestCode.CONTROLLER_ELECT_MASTER in link.calls
            assert rm.role == FENCED and ctx.config.is_slave and rm.ha.role == "NONE"
            assert ctx.write_fence() is not None and rm.master_epoch == 1  # our epoch moves only with a new role
            assert not rm.source.lease.valid(clock.monotonic_ms(), 1)
        finally:
            await rm.stop()

    run(scenario())


def test_runtime_fields(tmp_path: Path) -> None:
    from orbitmq.broker.controller_mode.wire import epoch_cache_body, runtime

    rm, ctx, clock, _ = make(tmp_path)

    async def scenario() -> None:
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 7, frozenset({1}), 2), clock.monotonic_ms(), "register")
        try:
            info = runtime(rm)
            assert info["controllerRole"] == "MASTER" and info["brokerId"] == "0"
            assert info["controllerBrokerId"] == "1" and info["masterEpoch"] == "7"
            assert info["syncStateSet"] == "1" and info["syncStateSetEpoch"] == "2" and info["fenced"] == "false"
            assert int(info["leaseRemainingMs"]) == TIMEOUT - 2 * INTERVAL
            body = epoch_cache_body(rm)
            assert [e.epoch for e in body.epoch_list] == [7] and body.broker_id == 1
        finally:
            await rm.stop()

    run(scenario())


def test_no_heartbeat_to_the_leader_no_lease(tmp_path: Path) -> None:
    rm, ctx, clock, link = make(tmp_path)

    async def scenario() -> None:
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "register")
        try:
            assert rm.role == MASTER and ctx.write_fence() is not None  # master, but nothing proves liveness
            await rm.source.heartbeat_all()  # type: ignore[attr-defined]
            clock.mono += 1000  # the poll leaves 1 s after the heartbeat
            await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "poll")
            # min(send + 3000 - 1000, heartbeat + 3000 - 500) = heartbeat + 2500 = send + 1500
            assert rm.source.lease.remaining_ms(clock.monotonic_ms()) == 1500
        finally:
            await rm.stop()

    run(scenario())


def test_a_master_publishes_a_commit_only_once_every_member_acknowledged_it(tmp_path: Path) -> None:
    rm, ctx, clock, _ = make(tmp_path)
    client = rm.env.client

    async def scenario() -> None:
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1, 2, 3}), 1), clock.monotonic_ms(), "register")
        try:
            rm.member_addrs.update({2: "127.0.0.1:20911", 3: "127.0.0.1:30911"})
            client.refuse.add("127.0.0.1:30911")  # member 3 does not acknowledge yet
            for off in (5, 6, 9):
                ctx.offsets.commit("G", "T", 0, off)  # a PULL's commitOffset
            ctx.offsets.commit("G", "T", 1, 4)
            assert ctx.offsets.query("G", "T", 0) == -1 and ctx.offsets.latest("G", "T", 0) == 9
            await until(lambda: len(client.invoked) >= 4)
            assert ctx.offsets.query("G", "T", 0) == -1 and b"T@G" not in ctx.offsets.encode()
            first = [c for a, c in client.invoked if a == "127.0.0.1:20911"][0]
            assert first.code == RequestCode.ORBIT_REPLICATE_CONSUMER_OFFSETS
            assert decode_batch(bytes(first.body or b"")) == (1, {("T@G", 0): 9, ("T@G", 1): 4})  # one batch
            client.refuse.clear()
            await until(lambda: ctx.offsets.query("G", "T", 0) == 9 and ctx.offsets.query("G", "T", 1) == 4)
            rm._take_sync_state_set({1, 2}, 2)  # member 3 leaves: only 2 must acknowledge now
            client.refuse.add("127.0.0.1:30911")
            ctx.offsets.commit("G", "T", 0, 12)
            await until(lambda: ctx.offsets.query("G", "T", 0) == 12)
        finally:
            await rm.stop()

    run(scenario())


def test_a_client_commit_is_answered_once_published_and_a_slave_stores_only_its_masters_batches(
        tmp_path: Path) -> None:
    rm, ctx, clock, _ = make(tmp_path)
    client = rm.env.client
    handlers = rm.handlers()
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "7"}

    async def scenario() -> None:
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1, 2}), 1), clock.monotonic_ms(), "register")
        try:
            rm.member_addrs[2] = "127.0.0.1:20911"
            pending = handlers[RequestCode.UPDATE_CONSUMER_OFFSET](None, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, dict(ext)))
            resp = await pending
            assert resp.code == ResponseCode.SUCCESS and ctx.offsets.query("G", "T", 0) == 7
            assert [a for a, _ in client.invoked] == ["127.0.0.1:20911"]
            # a slave of epoch 1 stores a batch of epoch 1 and refuses one of another epoch
            await rm._step_down("test")
            rm.role, rm.master_epoch = "SLAVE", 1
            replicate = handlers[RequestCode.ORBIT_REPLICATE_CONSUMER_OFFSETS]
            ok = replicate(None, RemotingCommand.request(RequestCode.ORBIT_REPLICATE_CONSUMER_OFFSETS, {},
                                                         encode_batch(1, {("T@G", 0): 11})))
            stale = replicate(None, RemotingCommand.request(RequestCode.ORBIT_REPLICATE_CONSUMER_OFFSETS, {},
                                                            encode_batch(0, {("T@G", 0): 3})))
            assert ok.code == ResponseCode.SUCCESS and stale.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert ctx.offsets.query("G", "T", 0) == 11 and not ctx.offsets.gated
        finally:
            await rm.stop()

    run(scenario())


async def until(cond: Any, limit: int = 2000) -> None:
    for _ in range(limit):
        if cond():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


def test_config_is_replaced_not_mutated(tmp_path: Path) -> None:
    rm, ctx, clock, _ = make(tmp_path)
    before = ctx.config
    ctx.set_role("SYNC_MASTER", 0)
    assert dataclasses.replace(before, broker_role="SYNC_MASTER", broker_id=0) == ctx.config
    assert before.broker_role == "SLAVE"
