"""Name server side of RIP-32 (per-broker heartbeat timeout, 904, 901, 905, supportActingMaster routes) and the
route push to OrbitMQ SDKs (orbitWatch / 9901), driven through NamesrvHandlers without sockets."""

from __future__ import annotations

import asyncio
import logging

import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.model.topic import TopicConfig
from orbitmq.namesrv.config import NamesrvConfig
from orbitmq.namesrv.handlers import NamesrvHandlers
from orbitmq.namesrv.kv_config import KvConfig
from orbitmq.namesrv.liveness import BrokerLiveness
from orbitmq.namesrv.route_push import RouteWatchers
from orbitmq.namesrv.route_table import RouteTable
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)

pytestmark = pytest.mark.timeout(30)

MASTER, SLAVE, SLAVE2 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000

    def now_ms(self) -> int:
        return self.t

    def monotonic_ms(self) -> int:
        return self.t


class FakeConn:
    """A connection recording the oneway requests the name server sends over it."""

    def __init__(self, name: str = "peer", *, fail: bool = False) -> None:
        self.remote_addr = name
        self.closed = False
        self.sent: list[RemotingCommand] = []
        self.fail = fail

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        if self.fail:
            raise ConnectionResetError("peer gone")
        self.sent.append(cmd)

    def close(self) -> None:
        self.closed = True

    def codes(self, code: int) -> list[dict[str, str]]:
        return [dict(c.ext_fields or {}) for c in self.sent if c.code == code]


def make(**cfg) -> tuple[NamesrvHandlers, RouteTable, FakeClock]:
    config = NamesrvConfig(kv_config_path="/nonexistent/kv.json", **cfg)
    table = RouteTable(config.broker_channel_expired_time_ms)
    clock = FakeClock()
    return NamesrvHandlers(table, KvConfig(None), config, clock), table, clock


def register(h: NamesrvHandlers, conn: FakeConn, addr: str, bid: int, *, name: str = "broker-a",
             topics: tuple[str, ...] = ("T1",), acting: bool = True, timeout_ms: int | None = None,
             counter: int = 1) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper(
        {t: TopicConfig(t, read_queue_nums=4, write_queue_nums=4) for t in topics}, DataVersion(111, counter))
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "DefaultCluster", "brokerId": str(bid),
           "haServerAddr": addr.rsplit(":", 1)[0] + ":" + str(int(addr.rsplit(":", 1)[1]) + 1),
           "enableActingMaster": "true" if acting else "false"}
    if timeout_ms is not None:
        ext["heartbeatTimeoutMillis"] = str(timeout_ms)
    resp = h(conn, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper).encode()))
    assert resp is not None and resp.code == ResponseCode.SUCCESS, resp
    return resp


def unregister(h: NamesrvHandlers, addr: str, bid: int, name: str = "broker-a") -> None:
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "DefaultCluster", "brokerId": str(bid)}
    assert h(FakeConn(), RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext)).code == 0


def route(h: NamesrvHandlers, topic: str = "T1", conn: FakeConn | None = None,
          watch: bool = False) -> RemotingCommand:
    ext = {"topic": topic, "acceptStandardJsonOnly": "true"}
    if watch:
        ext["orbitWatch"] = "true"
    return h(conn or FakeConn(), RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext))


def heartbeat(h: NamesrvHandlers, addr: str, timeout_ms: int | None = None, oneway: bool = True):
    ext = {"clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": "0"}
    if timeout_ms is not None:
        ext["heartbeatTimeoutMills"] = str(timeout_ms)
    return h(FakeConn(), RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, ext, oneway=oneway))


# ---- BrokerMemberGroup body -------------------------------------------------------------------------------
def test_broker_member_group_codec_both_key_forms_and_bare_object():
    g = BrokerMemberGroup("C", "broker-a", {1: SLAVE, 0: MASTER})
    std = g.to_json()
    assert std == (b'{"brokerMemberGroup":{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"},'
                   b'"brokerName":"broker-a","cluster":"C"}}')
    assert b'{0:"127.0.0.1:10911",1:' in g.to_json(standard=False)
    assert BrokerMemberGroup.from_json(std) == g
    assert BrokerMemberGroup.from_json(g.to_json(standard=False)) == g
    bare = BrokerMemberGroup.from_json(b'{"brokerAddrs":{"2":"x:1"},"brokerName":"b","cluster":"c"}')
    assert bare.broker_addrs == {2: "x:1"} and bare.min_broker_id() == 2 and bare.master_addr() is None
    assert BrokerMemberGroup.from_json(b'{"brokerMemberGroup":null}') == BrokerMemberGroup()
    for bad in (b'{"brokerMemberGroup":{"brokerAddrs":[1]}}', b'{"brokerMemberGroup":{"brokerAddrs":{"x":"a"}}}',
                b'{"brokerMemberGroup":7}', b""):
        with pytest.raises(ProtocolError):
            BrokerMemberGroup.from_json(bad)


# ---- per-broker heartbeat timeout (register ext + 904) -----------------------------------------------------
def test_expiry_uses_each_brokers_own_heartbeat_timeout():
    h, table, clock = make()
    register(h, FakeConn(), MASTER, 0, timeout_ms=10_000)
    register(h, FakeConn(), SLAVE, 1)  # no heartbeatTimeoutMillis: brokerChannelExpiredTime (120 s)
    assert table.live_brokers()[MASTER].heartbeat_timeout_ms == 10_000
    assert table.live_brokers()[SLAVE].heartbeat_timeout_ms is None
    clock.t += 10_000
    assert table.expire(clock.t) == []  # silent for exactly the timeout: kept
    clock.t += 1
    assert [r.addr for r in table.expire(clock.t)] == [MASTER]
    clock.t += 120_000 - 10_001
    assert table.expire(clock.t) == []
    clock.t += 1
    assert [r.addr for r in table.expire(clock.t)] == [SLAVE]
    table.check_invariants()


def test_broker_heartbeat_refreshes_and_may_change_the_timeout():
    h, table, clock = make()
    register(h, FakeConn(), MASTER, 0, timeout_ms=10_000)
    clock.t += 9_000
    assert heartbeat(h, MASTER) is None  # oneway: never answered
    clock.t += 9_000
    assert table.expire(clock.t) == []  # refreshed 9 s ago
    assert heartbeat(h, MASTER, timeout_ms=3_000, oneway=False).code == ResponseCode.SUCCESS
    assert table.live_brokers()[MASTER].heartbeat_timeout_ms == 3_000
    clock.t += 3_001
    assert [r.addr for r in table.expire(clock.t)] == [MASTER]
    # a heartbeat from an unknown broker registers nothing
    heartbeat(h, MASTER)
    assert table.live_brokers() == {}


def test_broker_heartbeat_bad_header_is_system_error_not_a_crash():
    h, _, _ = make()
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {"brokerAddr": MASTER}))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "clusterName" in resp.remark
    assert h(FakeConn(), RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {}, oneway=True)) is None


def test_query_data_version_still_refreshes():
    h, table, clock = make()
    register(h, FakeConn(), MASTER, 0, timeout_ms=5_000)
    clock.t += 4_000
    ext = {"brokerAddr": MASTER, "brokerName": "broker-a", "clusterName": "DefaultCluster", "brokerId": "0"}
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, ext,
                                                 DataVersion(111, 1).to_json()))
    assert resp.ext_fields["changed"] == "false"
    clock.t += 4_000
    assert table.expire(clock.t) == []


# ---- 901 ---------------------------------------------------------------------------------------------------
def test_get_broker_member_group_lists_live_members_with_true_ids():
    h, _, _ = make(support_acting_master=True)
    register(h, FakeConn(), MASTER, 0)
    register(h, FakeConn(), SLAVE, 1)
    req = {"clusterName": "DefaultCluster", "brokerName": "broker-a"}
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP, req))
    assert resp.code == 0
    assert BrokerMemberGroup.from_json(resp.body) == BrokerMemberGroup("DefaultCluster", "broker-a",
                                                                      {0: MASTER, 1: SLAVE})
    unregister(h, MASTER, 0)
    g = BrokerMemberGroup.from_json(h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP,
                                                                          req)).body)
    assert g.broker_addrs == {1: SLAVE}  # true id even with supportActingMaster
    unknown = h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP,
                                                    {"clusterName": "C", "brokerName": "nope"}))
    assert unknown.code == ResponseCode.SUCCESS
    assert BrokerMemberGroup.from_json(unknown.body) == BrokerMemberGroup("C", "nope", {})
    assert b'"brokerAddrs":{}' in unknown.body
    missing = h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "C"}))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "brokerName" in missing.remark


# ---- 905 ---------------------------------------------------------------------------------------------------
def test_min_broker_id_change_notifies_remaining_acting_members():
    h, table, _ = make()
    m, s1, s2 = FakeConn("m"), FakeConn("s1"), FakeConn("s2")
    register(h, m, MASTER, 0)
    register(h, s1, SLAVE, 1)
    register(h, s2, SLAVE2, 2)
    assert m.sent == s1.sent == s2.sent == []  # min stayed 0
    unregister(h, SLAVE2, 2)  # not the min: nothing
    assert s1.sent == [] and m.sent == []
    register(h, s2, SLAVE2, 2)

    unregister(h, MASTER, 0)
    note = {"brokerName": "broker-a", "minBrokerId": "1", "minBrokerAddr": SLAVE, "offlineBrokerAddr": MASTER}
    assert s1.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE) == [note]
    assert s2.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE) == [note]
    assert all(c.is_oneway for c in s1.sent)
    assert m.sent == []

    # the master comes back: the slaves learn it with its HA address; the master itself is not told
    register(h, m, MASTER, 0)
    back = {"brokerName": "broker-a", "minBrokerId": "0", "minBrokerAddr": MASTER, "haBrokerAddr": "127.0.0.1:10912"}
    assert s1.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)[-1] == back
    assert s2.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)[-1] == back
    assert m.sent == []
    table.check_invariants()


def test_min_id_change_on_connection_close_and_expiry():
    h, table, clock = make()
    m, s1 = FakeConn("m"), FakeConn("s1")
    register(h, m, MASTER, 0, timeout_ms=10_000)
    register(h, s1, SLAVE, 1, timeout_ms=60_000)
    h.on_channel_closed(m)
    assert s1.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)[-1]["offlineBrokerAddr"] == MASTER
    m2 = FakeConn("m2")
    register(h, m2, MASTER, 0, timeout_ms=10_000)
    assert s1.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)[-1]["minBrokerId"] == "0"
    liveness = BrokerLiveness(table, 5_000, clock, on_change=h.after_mutation)
    clock.t += 10_001
    assert [r.addr for r in liveness.scan_once()] == [MASTER]
    assert m2.closed  # the expired broker's connection is closed
    assert s1.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)[-1] == {
        "brokerName": "broker-a", "minBrokerId": "1", "minBrokerAddr": SLAVE, "offlineBrokerAddr": MASTER}
    assert len(s1.codes(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)) == 3


def test_no_notice_without_enable_acting_master_and_send_failure_is_logged(caplog):
    h, _, _ = make()
    m, plain, broken = FakeConn("m"), FakeConn("plain"), FakeConn("broken", fail=True)
    register(h, m, MASTER, 0)
    register(h, plain, SLAVE, 1, acting=False)
    register(h, broken, SLAVE2, 2)
    with caplog.at_level(logging.WARNING):
        unregister(h, MASTER, 0)  # the failing recipient must not break the unregister
    assert plain.sent == []
    assert "failed" in caplog.text and "peer gone" in caplog.text


def test_table_queues_no_notice_for_a_new_group_or_when_nobody_listens():
    t = RouteTable()
    t.register(cluster="C", broker_addr=SLAVE, broker_name="b", broker_id=1, ha_server_addr="", data_version=None,
               topic_configs=None, now_ms=0, channel=object(), enable_acting_master=True)
    assert t.drain_notices() == []  # group created: nothing changed for anyone
    t.register(cluster="C", broker_addr=MASTER, broker_name="b", broker_id=0, ha_server_addr="h:1",
               data_version=None, topic_configs=None, now_ms=0, channel=object(), enable_acting_master=True)
    [n] = t.drain_notices()
    assert (n.min_broker_id, n.min_broker_addr, n.ha_broker_addr) == (0, MASTER, "h:1")
    assert [a for a, _ in n.targets] == [SLAVE]
    assert t.drain_notices() == []
    # a slave promoted in place (same address, id 1 -> 0) after the master left
    t.unregister(cluster="C", broker_addr=MASTER, broker_name="b", broker_id=0)
    assert [n.min_broker_id for n in t.drain_notices()] == [1]
    t.register(cluster="C", broker_addr=SLAVE, broker_name="b", broker_id=0, ha_server_addr="s:1",
               data_version=None, topic_configs=None, now_ms=0, channel=object(), enable_acting_master=True)
    [n] = t.drain_notices()  # alone in its group: the promoted broker itself is told
    assert (n.min_broker_id, n.min_broker_addr, [a for a, _ in n.targets]) == (0, SLAVE, [SLAVE])
    t.check_invariants()
    t.unregister(cluster="C", broker_addr=SLAVE, broker_name="b", broker_id=0)
    assert t.drain_notices() == []  # group gone: nobody left to tell
    t.check_invariants()


# ---- supportActingMaster routes ----------------------------------------------------------------------------
def _route_view(resp: RemotingCommand) -> tuple[dict[int, str], int]:
    rd = TopicRouteData.from_json(resp.body)
    assert len(rd.broker_datas) == 1 and len(rd.queue_datas) == 1
    return rd.broker_datas[0].broker_addrs, rd.queue_datas[0].perm


def test_acting_master_route_rewrite_and_its_end():
    h, _, _ = make(support_acting_master=True)
    register(h, FakeConn(), MASTER, 0)
    register(h, FakeConn(), SLAVE, 1)
    register(h, FakeConn(), SLAVE2, 2)
    assert _route_view(route(h)) == ({0: MASTER, 1: SLAVE, 2: SLAVE2}, 6)
    unregister(h, MASTER, 0)
    assert _route_view(route(h)) == ({0: SLAVE, 2: SLAVE2}, 4)  # listed once, read-only
    # cluster info keeps the true ids
    info = ClusterInfo.from_json(h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info.broker_addr_table["broker-a"].broker_addrs == {1: SLAVE, 2: SLAVE2}
    unregister(h, SLAVE, 1)
    assert _route_view(route(h)) == ({0: SLAVE2}, 4)
    register(h, FakeConn(), MASTER, 0)  # master back: rewriting stops, writable again
    assert _route_view(route(h)) == ({0: MASTER, 2: SLAVE2}, 6)


def test_no_acting_master_rewrite_when_off_or_slave_not_acting_or_member_group_topic():
    h, _, _ = make()  # supportActingMaster=false
    register(h, FakeConn(), SLAVE, 1)
    register(h, FakeConn(), MASTER, 0)
    unregister(h, MASTER, 0)
    assert _route_view(route(h)) == ({1: SLAVE}, 6)

    h, _, _ = make(support_acting_master=True)
    register(h, FakeConn(), MASTER, 0)
    register(h, FakeConn(), SLAVE, 1, acting=False)
    unregister(h, MASTER, 0)
    assert _route_view(route(h)) == ({1: SLAVE}, 6)

    h, _, _ = make(support_acting_master=True)
    topic = "rmq_sys_SYNC_BROKER_MEMBER_broker-a"
    register(h, FakeConn(), MASTER, 0, topics=(topic,))
    register(h, FakeConn(), SLAVE, 1)
    unregister(h, MASTER, 0)
    assert _route_view(route(h, topic)) == ({1: SLAVE}, 6)


def test_acting_master_rewrite_only_touches_masterless_groups():
    h, _, _ = make(support_acting_master=True)
    register(h, FakeConn(), MASTER, 0, name="a")
    register(h, FakeConn(), SLAVE, 1, name="a")
    register(h, FakeConn(), "127.0.0.1:20911", 0, name="b")
    unregister(h, MASTER, 0, name="a")
    rd = TopicRouteData.from_json(route(h).body)
    assert {b.broker_name: b.broker_addrs for b in rd.broker_datas} == {"a": {0: SLAVE}, "b": {0: "127.0.0.1:20911"}}
    assert {q.broker_name: q.perm for q in rd.queue_datas} == {"a": 4, "b": 6}


# ---- route push --------------------------------------------------------------------------------------------
def test_route_watch_pushes_changed_routes_only():
    h, _, _ = make()
    register(h, FakeConn(), MASTER, 0)
    client, plain = FakeConn("client"), FakeConn("plain")
    resp = route(h, conn=client, watch=True)
    assert resp.code == 0 and resp.ext_fields == {"orbitWatch": "true"}
    assert route(h, conn=plain).ext_fields is None  # no watch asked
    register(h, FakeConn(), MASTER, 0)  # periodic re-registration: same route
    assert client.sent == []
    b = FakeConn("b")
    register(h, b, "127.0.0.1:20911", 0, name="broker-b")
    assert client.codes(RequestCode.ORBIT_NOTIFY_ROUTE_CHANGED) == [{"topic": "T1"}]
    assert client.sent[0].is_oneway and plain.sent == []
    h.on_channel_closed(b)  # broker connection lost: route changes again
    assert len(client.codes(RequestCode.ORBIT_NOTIFY_ROUTE_CHANGED)) == 2
    h.on_channel_closed(client)  # watcher gone: nothing more is sent to it
    register(h, FakeConn(), "127.0.0.1:20911", 0, name="broker-b")
    assert len(client.sent) == 2
    assert h.watchers.count == 0


def test_route_watch_of_unknown_topic_fires_when_it_appears_and_on_perm_change():
    h, _, _ = make(support_acting_master=True)
    client = FakeConn("client")
    assert route(h, "T9", conn=client, watch=True).code == ResponseCode.TOPIC_NOT_EXIST
    register(h, FakeConn(), MASTER, 0, topics=("T9",))
    assert client.codes(RequestCode.ORBIT_NOTIFY_ROUTE_CHANGED) == [{"topic": "T9"}]
    h(FakeConn(), RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert len(client.sent) == 2
    register(h, FakeConn(), SLAVE, 1, topics=("T9",))
    unregister(h, MASTER, 0)  # acting-master rewrite is part of the route too
    assert len(client.sent) == 4


def test_route_watchers_are_bounded_and_coalesced_per_loop_turn():
    calls: list[str] = []

    def route_of(topic: str) -> TopicRouteData | None:
        calls.append(topic)
        return TopicRouteData(order_topic_conf=str(len(calls)))  # a new route on every recompute

    w = RouteWatchers(route_of, max_watches=3, max_per_conn=2)
    c1, c2 = FakeConn("c1"), FakeConn("c2")
    assert w.watch(c1, "A", None) and w.watch(c1, "B", None)
    assert w.watch(c1, "A", None)  # already watched: fine, no extra slot
    assert not w.watch(c1, "C", None)  # per-connection bound
    assert w.watch(c2, "A", None) and not w.watch(c2, "B", None)  # total bound
    closed = FakeConn("closed")
    closed.closed = True
    assert w.count == 3

    async def burst() -> None:
        for _ in range(5):
            w.schedule()
        assert calls == []  # nothing yet: pushed once at the end of this loop turn
        await asyncio.sleep(0)

    asyncio.run(burst())
    assert sorted(calls) == ["A", "B"]
    assert len(c1.sent) == 2 and len(c2.sent) == 1
    assert w.forget(c1) == 2 and w.count == 1 and w.watchers("B") == []
    assert not w.watch(closed, "A", None)


def test_bad_rip32_register_fields_are_ignored_not_fatal():
    h, table, clock = make()
    wrapper = TopicConfigSerializeWrapper({"T1": TopicConfig("T1", read_queue_nums=1, write_queue_nums=1)},
                                          DataVersion(1, 1))
    ext = {"brokerName": "broker-a", "brokerAddr": MASTER, "clusterName": "C", "brokerId": "0", "haServerAddr": "",
           "heartbeatTimeoutMillis": "soon", "enableActingMaster": "yes"}
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper).encode()))
    assert resp.code == ResponseCode.SUCCESS
    live = table.live_brokers()[MASTER]
    assert live.heartbeat_timeout_ms is None and live.enable_acting_master is False
    ext["heartbeatTimeoutMillis"] = "0"  # not positive: the table's expiry time applies
    h(FakeConn(), RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper).encode()))
    clock.t += 120_000
    assert table.expire(clock.t) == []
