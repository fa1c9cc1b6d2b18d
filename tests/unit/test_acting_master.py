"""RIP-32 acting master: the pure state machine, the service's reaction to member groups and 905 notices, and the
registration's heartbeat / isolation switch."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from orbitmq.base.clock import REAL_CLOCK
from orbitmq.base.errors import RemotingConnectError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.registration import BrokerRegistration
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.acting_master import ActingMasterService, ActingMasterState, member_group_topic
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import BrokerData, BrokerMemberGroup, QueueData, TopicRouteData

pytestmark = pytest.mark.timeout(20)

M, S1, S2 = "127.0.0.1:1000", "127.0.0.1:2000", "127.0.0.1:3000"


# ---- state machine ------------------------------------------------------------------------------------------
def test_slave_acts_only_without_master_and_with_smallest_id() -> None:
    st = ActingMasterState(broker_id=1, is_slave=True, enabled=True)
    assert not st.update_members({0: M, 1: S1, 2: S2})
    assert not st.is_acting_master and st.min_broker_id == 0
    assert st.update_members({1: S1, 2: S2})
    assert st.is_acting_master and st.min_broker_id == 1
    assert not st.update_members({1: S1})  # no change
    assert st.update_members({0: M, 1: S1})  # master back: steps down
    assert not st.is_acting_master


def test_second_slave_waits_for_the_first() -> None:
    st = ActingMasterState(broker_id=2, is_slave=True, enabled=True)
    st.update_members({1: S1, 2: S2})
    assert not st.is_acting_master and st.min_broker_id == 1
    assert st.update_members({2: S2})
    assert st.is_acting_master


def test_self_counts_as_live_even_when_not_listed() -> None:
    st = ActingMasterState(broker_id=1, is_slave=True, enabled=True)
    assert st.update_members({})
    assert st.is_acting_master and st.min_broker_id == 1


@pytest.mark.parametrize(("broker_id", "is_slave", "enabled"), [(1, True, False), (0, False, True)])
def test_never_acts_when_disabled_or_master(broker_id: int, is_slave: bool, enabled: bool) -> None:
    st = ActingMasterState(broker_id=broker_id, is_slave=is_slave, enabled=enabled)
    assert not st.update_members({broker_id: S1})
    assert not st.on_min_broker_id_change(broker_id, S1, M)
    assert not st.is_acting_master


def test_min_broker_id_notice() -> None:
    st = ActingMasterState(broker_id=1, is_slave=True, enabled=True)
    st.update_members({0: M, 1: S1, 2: S2})
    assert st.on_min_broker_id_change(1, S1, M)  # master went offline
    assert st.is_acting_master and st.member_addrs == {1: S1, 2: S2}
    assert st.on_min_broker_id_change(0, M, None)  # master is back
    assert not st.is_acting_master and st.master_addr() == M
    assert not st.on_min_broker_id_change(None, None, S2)  # another slave left: nothing changes for us
    assert st.member_addrs == {0: M, 1: S1}


# ---- service ---------------------------------------------------------------------------------------------------
class FakeTopics:
    def __init__(self) -> None:
        self.created: dict[str, tuple[int, int]] = {}

    def create_system_topic(self, topic: str, nums: int, perm: int = 6, flag: int = 0) -> Any:
        self.created[topic] = (nums, perm)


class FakeClient:
    def __init__(self, answers: list[RemotingCommand | Exception]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, RemotingCommand]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        self.sent.append((addr, cmd))
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self.sent.append((addr, cmd))


def _config(**kw: Any) -> BrokerConfig:
    base = dict(broker_name="broker-a", broker_id=1, broker_role="SLAVE", namesrv_addr="127.0.0.1:9876",
                enable_slave_acting_master=True, compatible_with_old_name_srv=False)
    base.update(kw)
    return BrokerConfig(**base)  # type: ignore[arg-type]


def _service(client: FakeClient, **kw: Any) -> tuple[ActingMasterService, BrokerContext, FakeTopics]:
    topics = FakeTopics()
    ctx = BrokerContext(_config(**kw), None, topics, None, None, None, None, "127.0.0.1:2000")  # type: ignore[arg-type]
    env = ServiceEnv(REAL_CLOCK, client, "/nonexistent", None)  # type: ignore[arg-type]
    return ActingMasterService(ctx, env), ctx, topics


def _member_group(addrs: dict[int, str]) -> RemotingCommand:
    req = RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP)
    return req.response(body=BrokerMemberGroup("DefaultCluster", "broker-a", addrs).to_json())


def test_service_polls_901_and_notifies_listeners() -> None:
    client = FakeClient([_member_group({0: M, 1: S1}), _member_group({1: S1}),
                         RemotingConnectError("down"), _member_group({0: M, 1: S1})])
    svc, ctx, topics = _service(client)
    seen: list[bool] = []
    ctx.role_listeners.append(seen.append)
    assert topics.created == {member_group_topic("broker-a"): (1, 1)}

    async def go() -> None:
        assert await svc.sync_once()
        assert not ctx.acting_master
        assert await svc.sync_once()
        assert ctx.acting_master and seen == [True]
        assert svc.runtime() == {"actingMaster": "true", "minBrokerId": "1"}
        assert not await svc.sync_once()  # name server unreachable: the state is kept
        assert ctx.acting_master
        assert await svc.sync_once()
        assert not ctx.acting_master and seen == [True, False]

    asyncio.run(go())
    addr, cmd = client.sent[0]
    assert addr == "127.0.0.1:9876" and cmd.code == RequestCode.GET_BROKER_MEMBER_GROUP
    assert cmd.ext_fields == {"clusterName": "DefaultCluster", "brokerName": "broker-a"}


def test_service_compatible_mode_reads_the_member_group_topic_route() -> None:
    route = TopicRouteData([QueueData("broker-a", 1, 1, 1)],
                           [BrokerData("DefaultCluster", "broker-a", {1: S1}),
                            BrokerData("DefaultCluster", "broker-b", {0: "127.0.0.1:4000"})])
    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    client = FakeClient([req.response(body=route.to_json())])
    svc, ctx, _ = _service(client, compatible_with_old_name_srv=True)
    assert asyncio.run(svc.sync_once())
    assert ctx.acting_master and svc.state.member_addrs == {1: S1}
    assert client.sent[0][1].ext_fields == {"topic": "rmq_sys_SYNC_BROKER_MEMBER_broker-a"}


def test_service_reacts_to_905_at_once_and_ignores_other_groups() -> None:
    svc, ctx, _ = _service(FakeClient([]))
    svc.state.update_members({0: M, 1: S1})
    svc.on_notify({"brokerName": "broker-b", "minBrokerId": "1", "offlineBrokerAddr": M})
    assert not ctx.acting_master
    svc.on_notify({"brokerName": "broker-a", "minBrokerId": "1", "minBrokerAddr": S1, "offlineBrokerAddr": M})
    assert ctx.acting_master
    svc.on_notify({"brokerName": "broker-a", "minBrokerId": "0", "minBrokerAddr": M})
    assert not ctx.acting_master
    svc.on_notify({"brokerName": "broker-a", "minBrokerId": "junk"})  # bad input: no crash, no change
    assert not ctx.acting_master


def test_master_is_never_acting_and_feature_off_creates_nothing() -> None:
    svc, ctx, topics = _service(FakeClient([]), broker_id=0, broker_role="ASYNC_MASTER")
    svc.on_notify({"brokerName": "broker-a", "minBrokerId": "1", "minBrokerAddr": S1})
    assert not ctx.acting_master
    svc2, _, topics2 = _service(FakeClient([]), enable_slave_acting_master=False)
    assert topics2.created == {}
    asyncio.run(asyncio.wait_for(svc2.run(), 1))  # returns at once when the feature is off


# ---- registration: heartbeat and isolation ------------------------------------------------------------------
class FakeTopicTable:
    data_version = dataclasses.make_dataclass("DV", [("timestamp", int), ("counter", int)])(5, 7)

    def all(self) -> dict[str, Any]:
        return {}


def test_heartbeat_oneway_and_isolation() -> None:
    cfg = _config(broker_id=0, broker_role="ASYNC_MASTER", namesrv_addr="127.0.0.1:9876;127.0.0.1:9877",
                  broker_not_active_timeout_millis=4000)
    client = FakeClient([])
    reg = BrokerRegistration(lambda: cfg, FakeTopicTable(), client,  # type: ignore[arg-type]
                             lambda: {"epoch": "3", "maxOffset": "100", "confirmOffset": "90"})

    async def go() -> None:
        assert await reg.heartbeat_all() == 2
        reg.set_isolated(True)
        assert await reg.heartbeat_all() == 0
        assert await reg.register_all() == 0
        reg.set_isolated(False)
        assert reg._wake_pending  # leaving isolation asks for a registration at once

    asyncio.run(go())
    assert [a for a, _ in client.sent] == ["127.0.0.1:9876", "127.0.0.1:9877"]
    cmd = client.sent[0][1]
    assert cmd.code == RequestCode.BROKER_HEARTBEAT and cmd.is_oneway
    assert cmd.ext_fields == {"brokerName": "broker-a", "brokerAddr": cfg.broker_addr,
                              "clusterName": "DefaultCluster", "brokerId": "0", "heartbeatTimeoutMills": "4000",
                              "epoch": "3", "maxOffset": "100", "confirmOffset": "90"}


def test_compatible_heartbeat_is_query_data_version_and_registers_on_change() -> None:
    cfg = _config(broker_id=0, broker_role="ASYNC_MASTER", compatible_with_old_name_srv=True)
    req = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION)
    client = FakeClient([req.response(ext_fields={"changed": "false"}),
                         req.response(ext_fields={"changed": "true"})])
    reg = BrokerRegistration(lambda: cfg, FakeTopicTable(), client)  # type: ignore[arg-type]
    assert asyncio.run(reg.heartbeat_all()) == 1
    assert not reg._wake_pending
    cmd = client.sent[0][1]
    assert cmd.code == RequestCode.QUERY_DATA_VERSION and b'"counter":7' in (cmd.body or b"")
    assert asyncio.run(reg.heartbeat_all()) == 1
    assert reg._wake_pending


def test_register_header_carries_rip32_fields_only_when_enabled() -> None:
    for enabled in (True, False):
        cfg = _config(broker_id=0, broker_role="ASYNC_MASTER", enable_slave_acting_master=enabled,
                      broker_not_active_timeout_millis=4000)
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER)
        client = FakeClient([req.response(ResponseCode.SUCCESS)])
        reg = BrokerRegistration(lambda cfg=cfg: cfg, FakeTopicTable(), client)  # type: ignore[misc, arg-type]
        reg.build_body = lambda: b"{}"  # type: ignore[method-assign]
        assert asyncio.run(reg.register_all()) == 1
        ext = client.sent[0][1].ext_fields or {}
        assert (ext.get("heartbeatTimeoutMillis"), ext.get("enableActingMaster")) == \
            (("4000", "true") if enabled else (None, None))


# ---- transaction decisions made while acting: persisted and handed to the master --------------------------
def test_acting_ops_persist_and_hand_off(tmp_path: Any) -> None:
    from orbitmq.broker.services.transaction_acting import ActingOp, ActingOps

    path = str(tmp_path / "ops.json")
    ops = ActingOps(path)
    ops.record(ActingOp(3, 300, "PG", "U3", 8))
    ops.record(ActingOp(4, 400, "PG", "U4", 12))
    ops.record(ActingOp(5, 500, "PG", "U5", 8))
    again = ActingOps(path)
    again.load()
    assert again.pending == ops.pending

    req = RemotingCommand.request(RequestCode.END_TRANSACTION)
    client = FakeClient([req.response(ResponseCode.SUCCESS), RemotingConnectError("down"),
                         req.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")])
    assert asyncio.run(again.hand_off(client, M)) == 2  # success + a half the master no longer has
    assert [o.uniq for o in again.pending] == ["U4"]  # the unreachable one is kept
    ext = client.sent[0][1].ext_fields
    assert ext == {"producerGroup": "PG", "tranStateTableOffset": "3", "commitLogOffset": "300",
                   "commitOrRollback": "8", "fromTransactionCheck": "true", "msgId": "U3", "transactionId": "U3",
                   "actingMasterHandOff": "true"}
    reloaded = ActingOps(path)
    reloaded.load()
    assert [o.uniq for o in reloaded.pending] == ["U4"]
    client2 = FakeClient([req.response(ResponseCode.SLAVE_NOT_AVAILABLE)])
    assert asyncio.run(reloaded.hand_off(client2, M)) == 0 and len(reloaded.pending) == 1


# ---- transaction service on an acting slave (real store, fake bridge and producer channel) ----------------
class _Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def monotonic_ms(self) -> int:
        return self.now


class _Conn:
    remote_addr = "127.0.0.1:5555"
    closed = False

    def __init__(self) -> None:
        self.attrs: dict[str, Any] = {}
        self.sent: list[RemotingCommand] = []

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


class _Bridge:
    def __init__(self) -> None:
        self.put_msgs: list[Any] = []

    async def put(self, msg: Any) -> Any:
        from orbitmq.store import PutResult, PutStatus

        self.put_msgs.append(msg)
        return PutResult(PutStatus.PUT_OK, msg_ids=["X"], queue_offset=0, msg_count=1)


def test_transaction_service_on_acting_slave(tmp_path: Any) -> None:
    from orbitmq.broker.client_registry import ClientRegistry
    from orbitmq.broker.metadata.groups import SubscriptionGroupManager
    from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
    from orbitmq.broker.metadata.topics import TRANS_HALF_TOPIC, TopicConfigManager
    from orbitmq.broker.services.transaction import create
    from orbitmq.broker.stats import BrokerStats
    from orbitmq.model.properties import Prop
    from orbitmq.store import MessageInner, MessageStore, StoreConfig

    born = 1_700_000_000_000
    store = MessageStore(StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                                     mapped_file_size_consume_queue=20 * 1000, max_message_size=1024 * 1024,
                                     max_hash_slot_num=1000, max_index_num=4000))
    store.load()
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1", broker_id=1, broker_role="SLAVE",
                       enable_slave_acting_master=True, transaction_timeout=1000, transaction_check_max=2)
    config_dir = str(tmp_path / "store" / "config")
    ctx = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                        ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
    bridge = _Bridge()
    ctx.escape = bridge
    clock = _Clock(born + 5000)
    svc = create(ctx, ServiceEnv(clock, None, config_dir, store.config))  # type: ignore[arg-type]
    conn = _Conn()
    ctx.clients.register_producer(conn, "client-1", "PG", "JAVA", 409)

    async def go() -> None:
        halves = []
        for i in range(2):  # what replication wrote: two half messages of the master
            props = {Prop.REAL_TOPIC: "T", Prop.REAL_QID: "1", Prop.PGROUP: "PG", Prop.UNIQ_KEY: f"U{i}",
                     Prop.TRAN_MSG: "true"}
            r = await store.put_message(MessageInner(TRANS_HALF_TOPIC, 0, b"tx%d" % i, props, born_timestamp=born))
            halves.append(r)
        await svc.start()
        end_before = store.max_phys_offset

        def end_tx(i: int, kind: int) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.END_TRANSACTION, {
                "producerGroup": "PG", "tranStateTableOffset": str(halves[i].queue_offset),
                "commitLogOffset": str(halves[i].phys_offset), "commitOrRollback": str(kind)})

        assert await svc.check_once() == 0  # plain slave: no check
        resp = await svc.end_transaction(conn, end_tx(0, 8))
        assert resp is not None and resp.code == ResponseCode.SLAVE_NOT_AVAILABLE
        ctx.acting_master = True
        assert await svc.check_once() == 2  # both halves checked as they are
        assert [c.ext_fields["tranStateTableOffset"] for c in conn.sent] == ["0", "1"]
        assert [c.ext_fields["commitLogOffset"] for c in conn.sent] == [str(h.phys_offset) for h in halves]
        resp = await svc.end_transaction(conn, end_tx(0, 8))  # commit → real message through the bridge
        assert resp is not None and resp.code == ResponseCode.SUCCESS
        assert [(m.topic, m.queue_id, m.body) for m in bridge.put_msgs] == [("T", 1, b"tx0")]
        assert Prop.TRAN_MSG not in bridge.put_msgs[0].properties
        resp = await svc.end_transaction(conn, end_tx(0, 8))
        assert resp is not None and resp.remark == "transaction already finished"
        assert [(o.half_offset, o.kind) for o in svc.acting_ops.pending] == [(0, 8)]
        conn.sent.clear()
        assert await svc.check_once() == 1  # only the unresolved one, checked a second time
        assert await svc.check_once() == 0  # past transactionCheckMax (2): rolled back locally
        assert [(o.half_offset, o.kind) for o in svc.acting_ops.pending] == [(0, 8), (1, 12)]
        assert svc.state.half_offset == 2  # progress passes finished halves only
        assert store.max_phys_offset == end_before  # nothing written to the replica
        await svc.stop()
        await store.shutdown()

    asyncio.run(go())
