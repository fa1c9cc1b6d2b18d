"""Routes versioned by master epoch (#6316): a registration as id 0 loses to a live id 0 holder with a higher
DataVersion stateVersion; equal or higher wins; slaves keep "newest wins". Pure table tests plus one through the
request handler (stateVersion carried in the REGISTER_BROKER body)."""

from __future__ import annotations

import pytest

from orbitmq.model.topic import TopicConfig
from orbitmq.namesrv.config import NamesrvConfig
from orbitmq.namesrv.handlers import NamesrvHandlers
from orbitmq.namesrv.kv_config import KvConfig
from orbitmq.namesrv.route_table import RouteTable, state_version
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
)

EXPIRY_MS = 120_000


def reg(t: RouteTable, addr: str, *, bid: int = 0, epoch: int | None = 0, now: int = 1000, counter: int = 1,
        topics: tuple[str, ...] = ("T1",), name: str = "broker-a", channel: object = None):
    version = (100, counter) if epoch is None else (100, counter, epoch)
    return t.register(cluster="C1", broker_addr=addr, broker_name=name, broker_id=bid, ha_server_addr=addr + "-ha",
                      data_version=version, topic_configs=[TopicConfig(x, read_queue_nums=4, write_queue_nums=4)
                                                           for x in topics], now_ms=now, channel=channel)


@pytest.fixture
def t() -> RouteTable:
    return RouteTable(broker_channel_expired_time_ms=EXPIRY_MS)


def test_state_version_of_stamps() -> None:
    assert state_version(None) == 0
    assert state_version((1, 2)) == 0
    assert state_version((1, 2, 7)) == 7


def test_deposed_master_with_lower_epoch_does_not_steal_id_0(t: RouteTable) -> None:
    reg(t, "old:1", epoch=1, topics=("T1",))
    r = reg(t, "new:1", epoch=2, topics=("T1", "T2"))  # the controller elected new:1 at epoch 2
    assert r.rejected_by is None and t.group("broker-a").addrs == {0: "new:1"}
    # the old master comes back from a partition still believing it is master of epoch 1
    r = reg(t, "old:1", epoch=1, topics=("T1", "T3"), now=2000)
    assert r.rejected_by == "new:1"
    assert (r.ha_server_addr, r.master_addr, r.first_registration, r.queue_data_rebuilt) == (None, None, False, False)
    assert t.group("broker-a").addrs == {0: "new:1"}
    assert "old:1" not in t.live_brokers()
    assert t.route("T3") is None  # its topics were not routed
    assert t.route("T2").broker_groups[0].addrs == {0: "new:1"}
    t.check_invariants()


def test_equal_or_higher_epoch_replaces_the_holder(t: RouteTable) -> None:
    reg(t, "a:1", epoch=3)
    r = reg(t, "b:1", epoch=3)  # equal: the newest registration wins (as before this rule)
    assert r.rejected_by is None and t.group("broker-a").addrs == {0: "b:1"}
    assert "a:1" not in t.live_brokers()
    r = reg(t, "c:1", epoch=4)
    assert r.rejected_by is None and t.group("broker-a").addrs == {0: "c:1"}
    t.check_invariants()


def test_brokers_without_state_version_keep_newest_wins(t: RouteTable) -> None:
    reg(t, "a:1", epoch=None)
    reg(t, "b:1", epoch=None)
    assert t.group("broker-a").addrs == {0: "b:1"}
    # a classic broker (stateVersion 0) does lose against a holder that reports an epoch
    reg(t, "c:1", epoch=5)
    assert reg(t, "d:1", epoch=None).rejected_by == "c:1"
    t.check_invariants()


def test_holder_past_its_expiry_time_does_not_block(t: RouteTable) -> None:
    reg(t, "new:1", epoch=2, now=1000)
    assert reg(t, "old:1", epoch=1, now=1000 + EXPIRY_MS).rejected_by == "new:1"  # boundary: still live
    r = reg(t, "old:1", epoch=1, now=1001 + EXPIRY_MS)
    assert r.rejected_by is None and t.group("broker-a").addrs == {0: "old:1"}
    t.check_invariants()


def test_holder_gone_lets_the_lower_epoch_register(t: RouteTable) -> None:
    ch = object()
    reg(t, "new:1", epoch=2, channel=ch)
    t.on_channel_closed(ch)
    assert reg(t, "old:1", epoch=1).rejected_by is None
    assert t.group("broker-a").addrs == {0: "old:1"}


def test_same_address_reregistering_is_never_fenced_by_itself(t: RouteTable) -> None:
    reg(t, "m:1", epoch=5)
    r = reg(t, "m:1", epoch=4, counter=2)
    assert r.rejected_by is None and t.group("broker-a").addrs == {0: "m:1"}


def test_rejected_registrant_loses_its_other_entry(t: RouteTable) -> None:
    """Like Java: the refused address is dropped from the live table (it no longer serves as that slave)."""
    reg(t, "m:1", epoch=5)
    reg(t, "s:1", bid=2, epoch=4)
    assert t.group("broker-a").addrs == {0: "m:1", 2: "s:1"}
    assert reg(t, "s:1", epoch=4).rejected_by == "m:1"
    assert t.group("broker-a").addrs == {0: "m:1"}
    t.check_invariants()


def test_slave_ids_keep_newest_wins_whatever_the_epoch(t: RouteTable) -> None:
    reg(t, "m:1", epoch=5)
    reg(t, "s1:1", bid=1, epoch=5)
    r = reg(t, "s2:1", bid=1, epoch=1)
    assert r.rejected_by is None and t.group("broker-a").addrs == {0: "m:1", 1: "s2:1"}
    assert r.master_addr == "m:1"
    t.check_invariants()


def test_promotion_in_place_with_higher_epoch(t: RouteTable) -> None:
    """The new master was registered as a slave (its controller id) and re-registers as id 0 with the new epoch
    while the old master's entry is still live: it takes id 0 and drops its slave id."""
    reg(t, "m:1", epoch=1)
    reg(t, "s:1", bid=2, epoch=1)
    assert reg(t, "s:1", epoch=2, counter=2).rejected_by is None
    assert t.group("broker-a").addrs == {0: "s:1"}
    assert "m:1" not in t.live_brokers()
    t.check_invariants()


# ---- through the request handler -------------------------------------------------------------------------
class Clock:
    t = 5_000

    def now_ms(self) -> int:
        return self.t

    def monotonic_ms(self) -> int:
        return self.t


def register_cmd(addr: str, epoch: int, topics: tuple[str, ...]) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper({x: TopicConfig(x, read_queue_nums=4, write_queue_nums=4) for x in topics},
                                          DataVersion(timestamp=111, counter=1, state_version=epoch))
    ext = {"brokerName": "broker-a", "brokerAddr": addr, "clusterName": "C1", "brokerId": "0",
           "haServerAddr": addr, "compressed": "false"}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper, []).encode())


def test_handler_reads_state_version_from_the_body_and_refuses_the_stale_master() -> None:
    config = NamesrvConfig(kv_config_path="/nonexistent/kv.json")
    table = RouteTable(config.broker_channel_expired_time_ms)
    h = NamesrvHandlers(table, KvConfig(None), config, Clock())

    class Conn:
        remote_addr = "127.0.0.1:1"
        closed = False

    assert h(Conn(), register_cmd("127.0.0.1:20911", 7, ("T1",))).code == ResponseCode.SUCCESS
    resp = h(Conn(), register_cmd("127.0.0.1:10911", 6, ("T1", "T9")))
    assert resp.code == ResponseCode.SUCCESS  # as Java: answered, but not routed
    assert not (resp.ext_fields or {}).get("masterAddr")
    info = ClusterInfo.from_json(h(Conn(), RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "127.0.0.1:20911"}
    # the refused broker's QUERY_DATA_VERSION says "changed", so it keeps re-registering (and keeps losing)
    q = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION,
                                {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C1",
                                 "brokerId": "0"}, DataVersion(111, 1, 6).to_json())
    assert h(Conn(), q).ext_fields["changed"] == "true"


# ---- randomized: registrations with epochs, closes and time; invariants after every step -------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ADDRS = ["a:1", "b:1", "c:1"]
_op = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(_ADDRS), st.integers(0, 2), st.integers(0, 4)),
    st.tuples(st.just("close"), st.sampled_from(_ADDRS)),
    st.tuples(st.just("tick"), st.integers(0, 2 * EXPIRY_MS)),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_op, max_size=40))
def test_random_registrations_respect_master_epochs(ops) -> None:
    t = RouteTable(broker_channel_expired_time_ms=EXPIRY_MS)
    channels = {a: object() for a in _ADDRS}
    now = 0
    for op in ops:
        if op[0] == "register":
            _, addr, bid, epoch = op
            group = t.group("broker-a")
            holder = None if group is None else group.addrs.get(0)
            live = t.live_brokers().get(holder) if holder else None
            stronger = (bid == 0 and holder not in (None, addr) and live is not None
                        and live.last_update_ms >= now - EXPIRY_MS and state_version(live.data_version) > epoch)
            r = reg(t, addr, bid=bid, epoch=epoch, now=now, channel=channels[addr])
            if stronger:
                assert r.rejected_by == holder and t.group("broker-a").addrs[0] == holder
                assert addr not in t.live_brokers()
            else:
                assert r.rejected_by is None and t.group("broker-a").addrs[bid] == addr
        elif op[0] == "close":
            t.on_channel_closed(channels[op[1]])
        else:
            now += op[1]
            t.expire(now)
        t.check_invariants()
