"""RouteTable (pure): registration, data versions, slaves, expiry, unregister, admin mutations, queries."""

from __future__ import annotations

import pytest

from orbitmq.base.errors import InvariantError
from orbitmq.model.topic import TopicConfig
from orbitmq.namesrv.route_table import RouteTable


def tc(name: str, r: int = 4, w: int = 4, perm: int = 6, sys_flag: int = 0) -> TopicConfig:
    return TopicConfig(name, read_queue_nums=r, write_queue_nums=w, perm=perm, topic_sys_flag=sys_flag)


def reg(t: RouteTable, name="broker-a", bid=0, addr="10.0.0.1:10911", *, cluster="C1", version=(1, 1),
        topics=None, now=1000, channel=None, ha=None, filter_servers=None):
    return t.register(cluster=cluster, broker_addr=addr, broker_name=name, broker_id=bid,
                      ha_server_addr=ha or addr.replace("10911", "10912"), data_version=version,
                      topic_configs=topics, now_ms=now, channel=channel, filter_servers=filter_servers)


@pytest.fixture
def t() -> RouteTable:
    return RouteTable(broker_channel_expired_time_ms=120_000)


def test_first_master_registration_builds_route(t):
    r = reg(t, topics=[tc("T1"), tc("T2", 8, 2, 4)])
    t.check_invariants()
    assert r.first_registration and r.queue_data_rebuilt
    assert r.master_addr is None and r.ha_server_addr is None
    route = t.route("T2")
    assert route is not None
    [qd] = route.queue_datas
    assert (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm) == ("broker-a", 8, 2, 4)
    [g] = route.broker_groups
    assert (g.cluster, g.broker_name, g.addrs) == ("C1", "broker-a", {0: "10.0.0.1:10911"})
    assert t.topics() == ["T1", "T2"]


def test_unknown_topic_has_no_route(t):
    reg(t, topics=[tc("T1")])
    assert t.route("nope") is None


def test_reregister_same_version_keeps_queue_data_changed_version_rebuilds(t):
    reg(t, topics=[tc("T1", 4, 4)], version=(1, 1))
    r = reg(t, topics=[tc("T1", 16, 16)], version=(1, 1), now=2000)
    assert not r.queue_data_rebuilt and not r.first_registration
    assert t.route("T1").queue_datas[0].read_queue_nums == 4
    r = reg(t, topics=[tc("T1", 16, 16), tc("T3")], version=(1, 2), now=3000)
    assert r.queue_data_rebuilt
    assert t.route("T1").queue_datas[0].read_queue_nums == 16
    assert t.route("T3") is not None
    t.check_invariants()


def test_topics_missing_from_registration_kept_unless_configured(t):
    reg(t, topics=[tc("T1"), tc("T2")], version=(1, 1))
    reg(t, topics=[tc("T1")], version=(1, 2))
    assert t.route("T2") is not None  # 4.x: incremental registrations carry only changed topics
    strict = RouteTable(delete_topic_with_broker_registration=True)
    reg(strict, topics=[tc("T1"), tc("T2")], version=(1, 1))
    reg(strict, topics=[tc("T1")], version=(1, 2))
    assert strict.route("T2") is None and strict.route("T1") is not None
    strict.check_invariants()


def test_slave_registration_gets_master_ha_address_and_topics_ignored(t):
    reg(t, topics=[tc("T1")], addr="10.0.0.1:10911", ha="10.0.0.1:10912")
    r = reg(t, bid=1, addr="10.0.0.2:10911", topics=[tc("T1", 99, 99), tc("SLAVE_ONLY")])
    assert r.master_addr == "10.0.0.1:10911" and r.ha_server_addr == "10.0.0.1:10912"
    assert not r.queue_data_rebuilt
    assert t.route("SLAVE_ONLY") is None
    route = t.route("T1")
    assert route.queue_datas[0].read_queue_nums == 4
    assert route.broker_groups[0].addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    t.check_invariants()


def test_slave_before_master_has_no_master_info_and_no_route(t):
    r = reg(t, bid=1, addr="10.0.0.2:10911", topics=[tc("T1")])
    assert r.master_addr is None and r.ha_server_addr is None
    assert t.route("T1") is None
    groups, clusters = t.cluster_info()
    assert groups["broker-a"].addrs == {1: "10.0.0.2:10911"} and clusters == {"C1": ["broker-a"]}


def test_master_expiry_leaves_slave_only_group_in_route(t):
    reg(t, topics=[tc("T1")], addr="m:1", now=0)
    reg(t, bid=1, addr="s:1", topics=[tc("T1")], now=100_000)
    removed = t.expire(now_ms=120_001)
    assert [r.addr for r in removed] == ["m:1"]
    route = t.route("T1")
    assert route is not None and route.broker_groups[0].addrs == {1: "s:1"}
    assert route.queue_datas[0].broker_name == "broker-a"
    t.check_invariants()


def test_expiry_boundary_and_group_removal(t):
    reg(t, topics=[tc("T1")], now=0)
    assert t.expire(now_ms=120_000) == []  # exactly at the limit: still alive
    removed = t.expire(now_ms=120_001)
    assert len(removed) == 1 and removed[0].broker_name == "broker-a"
    assert t.route("T1") is None and t.topics() == []
    assert t.cluster_info() == ({}, {})
    t.check_invariants()


def test_touch_refreshes_liveness(t):
    reg(t, topics=[tc("T1")], now=0)
    assert t.touch("10.0.0.1:10911", 100_000)
    assert t.expire(now_ms=200_000) == []
    assert not t.touch("unknown:1", 5)


def test_data_version_queries(t):
    assert t.is_data_version_changed("10.0.0.1:10911", (1, 1))
    reg(t, topics=[tc("T1")], version=(5, 7))
    assert not t.is_data_version_changed("10.0.0.1:10911", (5, 7))
    assert t.is_data_version_changed("10.0.0.1:10911", (5, 8))
    assert t.data_version_of("10.0.0.1:10911") == (5, 7)
    assert t.data_version_of("x:1") is None


def test_channel_close_removes_only_that_broker(t):
    ch_a, ch_b, client = object(), object(), object()
    reg(t, "broker-a", addr="a:1", topics=[tc("T1")], channel=ch_a)
    reg(t, "broker-b", addr="b:1", topics=[tc("T1")], channel=ch_b)
    assert t.on_channel_closed(client) == []
    removed = t.on_channel_closed(ch_a)
    assert [r.addr for r in removed] == ["a:1"]
    route = t.route("T1")
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"]
    t.check_invariants()


def test_old_channel_close_after_reconnect_keeps_broker(t):
    old, new = object(), object()
    reg(t, topics=[tc("T1")], channel=old)
    reg(t, topics=[tc("T1")], channel=new, now=2000)
    assert t.on_channel_closed(old) == []
    assert t.route("T1") is not None


def test_unregister_master_keeps_slave_then_last_removes_everything(t):
    reg(t, topics=[tc("T1")], addr="m:1")
    reg(t, bid=1, addr="s:1")
    assert t.unregister(cluster="C1", broker_addr="m:1", broker_name="broker-a", broker_id=0)
    assert t.route("T1").broker_groups[0].addrs == {1: "s:1"}
    assert t.unregister(cluster="C1", broker_addr="s:1", broker_name="broker-a", broker_id=1)
    assert t.route("T1") is None and t.cluster_info() == ({}, {})
    assert not t.unregister(cluster="C1", broker_addr="s:1", broker_name="broker-a", broker_id=1)
    t.check_invariants()


def test_unregister_naming_another_group_is_ignored(t):
    reg(t, "broker-a", addr="x:1", topics=[tc("T1")])
    assert not t.unregister(cluster="C1", broker_addr="x:1", broker_name="broker-b", broker_id=0)
    assert t.route("T1") is not None
    t.check_invariants()


def test_stale_unregister_does_not_remove_replacement(t):
    reg(t, topics=[tc("T1")], addr="old:1")
    reg(t, topics=[tc("T1")], addr="new:1", version=(2, 2))  # a new master process took id 0
    assert "old:1" not in t.live_brokers()
    t.unregister(cluster="C1", broker_addr="old:1", broker_name="broker-a", broker_id=0)
    assert t.route("T1").broker_groups[0].addrs == {0: "new:1"}
    t.check_invariants()


def test_slave_promoted_in_place_keeps_one_id_per_address(t):
    reg(t, topics=[tc("T1")], addr="m:1")
    reg(t, bid=1, addr="s:1")
    t.unregister(cluster="C1", broker_addr="m:1", broker_name="broker-a", broker_id=0)
    r = reg(t, bid=0, addr="s:1", topics=[tc("T1", 2, 2)], version=(9, 9))
    assert r.queue_data_rebuilt
    assert t.route("T1").broker_groups[0].addrs == {0: "s:1"}
    t.check_invariants()


def test_address_moving_to_another_broker_name(t):
    reg(t, "broker-a", addr="x:1", topics=[tc("T1")])
    reg(t, "broker-b", addr="x:1", topics=[tc("T2")])
    groups, clusters = t.cluster_info()
    assert list(groups) == ["broker-b"] and clusters == {"C1": ["broker-b"]}
    assert t.route("T1") is None
    t.check_invariants()


def test_two_groups_route_sorted_and_filter_servers(t):
    reg(t, "broker-b", addr="b:1", topics=[tc("T1")], filter_servers=["f:1"])
    reg(t, "broker-a", addr="a:1", topics=[tc("T1")])
    route = t.route("T1")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert [g.broker_name for g in route.broker_groups] == ["broker-a", "broker-b"]
    assert route.filter_servers == {"b:1": ["f:1"]}
    reg(t, "broker-b", addr="b:1", topics=[tc("T1")], filter_servers=[])
    assert t.route("T1").filter_servers == {}


def test_route_is_a_copy(t):
    reg(t, topics=[tc("T1")])
    route = t.route("T1")
    route.queue_datas[0].perm = 0
    route.broker_groups[0].addrs[5] = "evil:1"
    again = t.route("T1")
    assert again.queue_datas[0].perm == 6 and 5 not in again.broker_groups[0].addrs


def test_cluster_info_and_topics_by_cluster(t):
    reg(t, "broker-a", addr="a:1", cluster="C1", topics=[tc("T1"), tc("TA")])
    reg(t, "broker-b", addr="b:1", cluster="C2", topics=[tc("T1"), tc("TB")])
    reg(t, "broker-b", bid=1, addr="b:2", cluster="C2")
    groups, clusters = t.cluster_info()
    assert clusters == {"C1": ["broker-a"], "C2": ["broker-b"]}
    assert groups["broker-b"].addrs == {0: "b:1", 1: "b:2"} and groups["broker-b"].cluster == "C2"
    assert t.topics_by_cluster("C1") == ["T1", "TA"]
    assert t.topics_by_cluster("C2") == ["T1", "TB"]
    assert t.topics_by_cluster("nope") == []


def test_group_changing_cluster_moves_membership(t):
    reg(t, addr="a:1", cluster="C1", topics=[tc("T1")])
    reg(t, addr="a:1", cluster="C2", topics=[tc("T1")])
    assert t.cluster_info()[1] == {"C2": ["broker-a"]}
    t.check_invariants()


def test_delete_topic_whole_and_per_cluster(t):
    reg(t, "broker-a", addr="a:1", cluster="C1", topics=[tc("T1"), tc("T2")])
    reg(t, "broker-b", addr="b:1", cluster="C2", topics=[tc("T1")])
    assert t.delete_topic("T1", cluster="C2")
    assert [q.broker_name for q in t.route("T1").queue_datas] == ["broker-a"]
    assert not t.delete_topic("T1", cluster="C2")
    assert t.delete_topic("T2")
    assert t.route("T2") is None
    assert not t.delete_topic("T2")
    t.check_invariants()


def test_wipe_and_add_write_perm(t):
    reg(t, "broker-a", addr="a:1", topics=[tc("T1"), tc("T2", perm=7)])
    reg(t, "broker-b", addr="b:1", topics=[tc("T1")])
    assert t.wipe_write_perm("broker-a") == 2
    perms = {q.broker_name: q.perm for q in t.route("T1").queue_datas}
    assert perms == {"broker-a": 4, "broker-b": 6}
    assert t.route("T2").queue_datas[0].perm == 5
    assert t.wipe_write_perm("nope") == 0
    assert t.add_write_perm("broker-a") == 2
    assert t.route("T2").queue_datas[0].perm == 6


def test_wiped_perm_survives_reregistration_with_same_version(t):
    reg(t, topics=[tc("T1")], version=(1, 1))
    t.wipe_write_perm("broker-a")
    reg(t, topics=[tc("T1")], version=(1, 1), now=5000)
    assert t.route("T1").queue_datas[0].perm == 4


def test_system_topics(t):
    assert t.system_topics() == ([], None)
    reg(t, "broker-b", addr="b:1", cluster="C1")
    reg(t, "broker-a", bid=1, addr="a:2", cluster="C1")
    topics, addr = t.system_topics()
    assert topics == ["C1", "broker-a", "broker-b"]
    assert addr == "a:2"


def test_unit_topics(t):
    reg(t, topics=[tc("N"), tc("U", sys_flag=1), tc("S", sys_flag=2), tc("US", sys_flag=3)])
    assert t.unit_topics(unit=True, unit_sub=None) == ["U", "US"]
    assert t.unit_topics(unit=None, unit_sub=True) == ["S", "US"]
    assert t.unit_topics(unit=False, unit_sub=True) == ["S"]


def test_invariant_check_detects_corruption(t):
    reg(t, topics=[tc("T1")])
    t._clusters["C1"].discard("broker-a")  # simulate a bug
    with pytest.raises(InvariantError):
        t.check_invariants()


def test_register_without_topic_wrapper_keeps_queue_data(t):
    reg(t, topics=[tc("T1")])
    r = reg(t, topics=None, version=(3, 3))
    assert not r.queue_data_rebuilt
    assert t.route("T1") is not None


# ---- randomized operation sequences: invariants hold after every step ----------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ADDRS = ["a:1", "a:2", "b:1", "b:2", "c:1"]
_NAMES = ["broker-a", "broker-b", "broker-c"]
_TOPICS = ["T1", "T2", "T3"]

_op = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(_NAMES), st.integers(0, 2), st.sampled_from(_ADDRS),
              st.sampled_from(["C1", "C2"]), st.integers(0, 3), st.sets(st.sampled_from(_TOPICS))),
    st.tuples(st.just("unregister"), st.sampled_from(_NAMES), st.integers(0, 2), st.sampled_from(_ADDRS)),
    st.tuples(st.just("close"), st.sampled_from(_ADDRS)),
    st.tuples(st.just("tick"), st.integers(0, 200_000)),
    st.tuples(st.just("delete"), st.sampled_from(_TOPICS), st.sampled_from([None, "C1", "C2"])),
    st.tuples(st.just("wipe"), st.sampled_from(_NAMES)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_op, max_size=40))
def test_random_operations_keep_invariants(ops):
    t = RouteTable(broker_channel_expired_time_ms=120_000)
    channels = {a: object() for a in _ADDRS}
    now = 0
    for op in ops:
        kind = op[0]
        if kind == "register":
            _, name, bid, addr, cluster, ver, topics = op
            r = reg(t, name, bid, addr, cluster=cluster, version=(ver, ver), topics=[tc(x) for x in sorted(topics)],
                    now=now, channel=channels[addr])
            if bid == 0:
                assert r.master_addr is None
            live = t.live_brokers()[addr]
            assert (live.broker_name, live.broker_id) == (name, bid)
            assert t.group(name).addrs[bid] == addr
        elif kind == "unregister":
            _, name, bid, addr = op
            before = t.live_brokers().get(addr)
            removed = t.unregister(cluster="C1", broker_addr=addr, broker_name=name, broker_id=bid)
            assert removed == (before is not None and before.broker_name == name)
            if removed:
                assert addr not in t.live_brokers()
        elif kind == "close":
            t.on_channel_closed(channels[op[1]])
            assert op[1] not in t.live_brokers()
        elif kind == "tick":
            now += op[1]
            t.expire(now)
            assert all(live.last_update_ms >= now - 120_000 for live in t.live_brokers().values())
        elif kind == "delete":
            t.delete_topic(op[1], op[2])
        else:
            t.wipe_write_perm(op[1])
        t.check_invariants()
        groups, clusters = t.cluster_info()
        for topic in t.topics():
            route = t.route(topic)
            if route is not None:
                assert {g.broker_name for g in route.broker_groups} <= set(groups)
                assert all(g.addrs for g in route.broker_groups)
