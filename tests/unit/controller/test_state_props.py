"""Random request sequences against ReplicasInfoManager: invariants after every step, epochs never go back, a
replica applying the same (encoded) events has the same state, and snapshot/restore is exact."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.controller.events import decode_event, encode_event
from orbitmq.controller.state import ControllerResult, ReplicasInfoManager
from orbitmq.protocol.bodies import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)

C = "c"
NAMES = ("a", "a", "a", "b")

_next_apply = st.tuples(st.just("next_apply"), st.sampled_from(NAMES), st.integers(0, 3))
# ids are picked at run time among the registered ones (an index, -1 = the controller / an unknown id)
_elect = st.tuples(st.just("elect"), st.sampled_from(NAMES), st.integers(-2, 7), st.booleans(), st.booleans())
_alter = st.tuples(st.just("alter"), st.sampled_from(NAMES), st.integers(0, 255), st.booleans(), st.booleans())
# weighted towards the steps that grow the state, so later steps have something to act on
op = st.one_of(
    _next_apply, _next_apply, _next_apply, _elect, _elect, _elect, _alter, _alter, _alter, _alter, _alter,
    st.tuples(st.just("apply"), st.sampled_from(NAMES), st.integers(1, 6), st.integers(0, 3)),
    st.tuples(st.just("register"), st.sampled_from(NAMES), st.integers(1, 4), st.integers(0, 3)),
    st.tuples(st.just("kill"), st.integers(1, 4)),
    st.tuples(st.just("revive"), st.integers(1, 4)),
    st.tuples(st.just("clean"), st.sampled_from(NAMES), st.frozensets(st.integers(1, 5), max_size=2),
              st.sampled_from((False, False, False, True))),
    st.tuples(st.just("kill"), st.integers(1, 4)),
    st.tuples(st.just("revive"), st.integers(1, 4)),
)


def request(m: ReplicasInfoManager, o: tuple, dead: set[int]) -> ControllerResult | None:  # type: ignore[type-arg]
    def alive(c: str, n: str, b: int) -> bool:
        return b not in dead

    kind, name = o[0], o[1] if len(o) > 1 else ""
    if kind == "next_apply":
        nxt = int(m.get_next_broker_id(GetNextBrokerIdRequestHeader(C, name)).header["nextBrokerId"])
        return m.apply_broker_id(ApplyBrokerIdRequestHeader(C, name, nxt, f"h{o[2]}:1;{o[2]}"))
    if kind == "apply":
        return m.apply_broker_id(ApplyBrokerIdRequestHeader(C, name, o[2], f"h{o[3]}:1;{o[3]}"))
    if kind == "register":
        return m.register_broker(RegisterBrokerToControllerRequestHeader(C, name, o[2], f"h{o[3]}:1"), alive)
    bri = m.replica_info.get(name)
    registered = sorted(bri.broker_ids) if bri is not None else []
    if kind == "elect":  # o = (kind, name, id pick, designate, unclean)
        pick = o[2]
        bid = -1 if pick == -1 else 99 if pick == -2 or not registered else registered[pick % len(registered)]
        return m.elect_master(ElectMasterRequestHeader(C, name, bid, o[3]), alive, unclean=o[4])
    if kind == "alter":  # o = (kind, name, bitmask over the registered ids, include the master, current epochs)
        ssi = m.sync_state_info.get(name)
        master = ssi.master_broker_id if ssi and ssi.master_broker_id is not None else 1
        ids = frozenset(b for i, b in enumerate(registered) if o[2] >> i & 1) or frozenset({7})
        ids = ids | {master} if o[3] else ids
        me = ssi.master_epoch if ssi and o[4] else 0
        se = ssi.sync_state_set_epoch if ssi and o[4] else 0
        return m.alter_sync_state_set(AlterSyncStateSetRequestHeader(name, master, me), SyncStateSet(ids, se), alive)
    if kind == "clean":
        ids = ";".join(str(i) for i in sorted(o[2]))
        return m.clean_broker_data(CleanControllerBrokerDataRequestHeader(name, C, ids or None, o[3]), alive)
    if kind == "kill":
        dead.add(o[1])
    else:
        dead.discard(o[1])
    return None


def check_invariants(m: ReplicasInfoManager) -> None:
    assert set(m.sync_state_info) == set(m.replica_info)
    for name, ssi in m.sync_state_info.items():
        bri = m.replica_info[name]
        assert ssi.sync_state_set <= set(bri.broker_ids), (name, ssi, bri)
        if ssi.master_broker_id is not None:
            assert ssi.master_broker_id in ssi.sync_state_set
            assert ssi.master_broker_id in bri.broker_ids
        assert all(b < bri.next_assign_broker_id for b in bri.broker_ids)


@settings(max_examples=120, deadline=None)
@given(st.lists(op, min_size=10, max_size=60))
def test_random_requests_keep_invariants_and_replicas_agree(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    leader, follower = ReplicasInfoManager(), ReplicasInfoManager()
    dead: set[int] = set()
    epochs: dict[str, tuple[int, int]] = {}
    for o in ops:
        before = leader.snapshot()
        r = request(leader, o, dead)
        if r is None:
            continue
        assert leader.snapshot() == before  # requests never mutate
        for e in r.events:
            leader.apply(e)
            follower.apply(decode_event(encode_event(e)))
        check_invariants(leader)
        for name, ssi in leader.sync_state_info.items():
            prev = epochs.get(name, (0, 0))
            assert ssi.master_epoch >= prev[0] and ssi.sync_state_set_epoch >= prev[1]
            epochs[name] = (ssi.master_epoch, ssi.sync_state_set_epoch)
        for name in list(epochs):
            if name not in leader.sync_state_info:
                del epochs[name]  # cleaned: a new broker-set starts again at 0
    assert follower.snapshot() == leader.snapshot()
    copy = ReplicasInfoManager()
    copy.restore(leader.snapshot())
    assert copy.snapshot() == leader.snapshot()
