"""ReplicasInfoManager: every validation rule and response code, epochs, events, apply, snapshot/restore."""

from __future__ import annotations

import orjson
import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.controller.election import CandidateInfo
from orbitmq.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)
from orbitmq.controller.state import ControllerResult, ControllerStateMachine, ReplicasInfoManager
from orbitmq.protocol.bodies import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from orbitmq.protocol.codes import ResponseCode as RC

C, B = "DefaultCluster", "broker-a"


class World:
    """A manager plus a liveness table the test controls; `run` applies a result's events like the leader does."""

    def __init__(self) -> None:
        self.m = ReplicasInfoManager()
        self.dead: set[int] = set()
        self.info: dict[int, CandidateInfo] = {}

    def alive(self, cluster: str, name: str, bid: int) -> bool:
        return bid not in self.dead

    def live_info(self, cluster: str, name: str, bid: int) -> CandidateInfo | None:
        return self.info.get(bid)

    def run(self, result: ControllerResult) -> ControllerResult:
        for e in result.events:
            self.m.apply(decode_event(encode_event(e)))  # through the log encoding, as on a replica
        return result

    def add(self, bid: int, addr: str | None = None, name: str = B) -> ControllerResult:
        nxt = self.m.get_next_broker_id(GetNextBrokerIdRequestHeader(C, name))
        assert nxt.header["nextBrokerId"] == str(bid)
        code = f"{addr or f'10.0.0.{bid}:10911'};17000{bid}"
        r = self.run(self.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, name, bid, code)))
        assert r.ok, r.remark
        return self.run(self.m.register_broker(
            RegisterBrokerToControllerRequestHeader(C, name, bid, addr or f"10.0.0.{bid}:10911"), self.alive))

    def elect(self, bid: int | None = -1, designate: bool = False, unclean: bool = False,
              name: str = B) -> ControllerResult:
        return self.run(self.m.elect_master(ElectMasterRequestHeader(C, name, bid, designate), self.alive,
                                            self.live_info, unclean=unclean))

    def alter(self, ids: set[int], master: int = 1, master_epoch: int = 1, ss_epoch: int = 1,
              name: str = B) -> ControllerResult:
        return self.run(self.m.alter_sync_state_set(AlterSyncStateSetRequestHeader(name, master, master_epoch),
                                                    SyncStateSet(frozenset(ids), ss_epoch), self.alive))

    def ssi(self, name: str = B):  # noqa: ANN201
        return self.m.sync_state_info[name]


@pytest.fixture()
def w() -> World:
    return World()


def three(w: World) -> World:
    for bid in (1, 2, 3):
        w.add(bid)
    assert w.elect(1).ok
    assert w.alter({1, 2, 3}).ok
    return w


# ---- broker-id flow -------------------------------------------------------------------------------------------
def test_broker_id_flow_assigns_sequential_ids(w: World) -> None:
    r = w.add(1)
    assert r.ok and r.events == ()  # same address: no UpdateBrokerAddressEvent
    assert r.header == {"clusterName": C, "brokerName": B}  # no master yet
    assert SyncStateSet.from_json(r.body) == SyncStateSet(frozenset(), 0)
    w.add(2)
    w.add(3)
    assert sorted(w.m.replica_info[B].broker_ids) == [1, 2, 3]
    assert w.m.replica_info[B].next_assign_broker_id == 4


def test_get_next_broker_id_is_a_read(w: World) -> None:
    r = w.m.get_next_broker_id(GetNextBrokerIdRequestHeader(C, B))
    assert r.ok and r.events == () and r.header == {"clusterName": C, "brokerName": B, "nextBrokerId": "1"}


def test_apply_broker_id_unknown_set_only_first_id(w: World) -> None:
    r = w.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, B, 2, "a:1;1"))
    assert r.code == RC.CONTROLLER_BROKER_ID_INVALID and r.events == ()
    r = w.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, B, 1, "a:1;1"))
    assert r.ok and r.events == (ApplyBrokerIdEvent(C, B, "a:1", "a:1;1", 1),)
    assert r.header == {"clusterName": C, "brokerName": B}


def test_apply_broker_id_idempotent_retry_and_conflict(w: World) -> None:
    w.add(1)
    same = w.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, B, 1, "10.0.0.1:10911;170001"))
    assert same.ok and len(same.events) == 1
    w.run(same)
    assert w.m.replica_info[B].next_assign_broker_id == 2  # applying a known id changes nothing
    other = w.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, B, 1, "10.0.0.9:10911;5"))
    assert other.code == RC.CONTROLLER_BROKER_ID_INVALID and other.events == ()


def test_explicit_high_id_never_reused(w: World) -> None:
    w.add(1)
    w.run(w.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, B, 5, "x:1;1")))
    assert w.m.replica_info[B].next_assign_broker_id == 6


def test_register_unknown_set_or_id(w: World) -> None:
    r = w.m.register_broker(RegisterBrokerToControllerRequestHeader(C, B, 1, "a:1"), w.alive)
    assert r.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    w.add(1)
    r = w.m.register_broker(RegisterBrokerToControllerRequestHeader(C, B, 7, "a:1"), w.alive)
    assert r.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_register_updates_changed_address(w: World) -> None:
    w.add(1)
    r = w.run(w.m.register_broker(RegisterBrokerToControllerRequestHeader(C, B, 1, "10.9.9.9:1"), w.alive))
    assert r.events == (UpdateBrokerAddressEvent(C, B, "10.9.9.9:1", 1),)
    assert w.m.replica_info[B].broker_ids[1] == ("10.9.9.9:1", "10.0.0.1:10911;170001")


def test_register_reports_alive_master_only(w: World) -> None:
    three(w)
    r = w.m.register_broker(RegisterBrokerToControllerRequestHeader(C, B, 2, "10.0.0.2:10911"), w.alive)
    assert r.header["masterBrokerId"] == "1" and r.header["masterAddress"] == "10.0.0.1:10911"
    assert r.header["masterEpoch"] == "1" and r.header["syncStateSetEpoch"] == "2"
    assert SyncStateSet.from_json(r.body) == SyncStateSet(frozenset({1, 2, 3}), 2)
    w.dead.add(1)
    r = w.m.register_broker(RegisterBrokerToControllerRequestHeader(C, B, 2, "10.0.0.2:10911"), w.alive)
    assert "masterBrokerId" not in r.header and r.ok


# ---- election ---------------------------------------------------------------------------------------------
def test_elect_unknown_set(w: World) -> None:
    assert w.elect(1).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_first_election_takes_the_requester_without_policy(w: World) -> None:
    w.add(1)
    w.add(2)
    w.dead.add(2)  # liveness is not checked on the first election
    r = w.elect(2)
    assert r.ok and r.events == (ElectMasterEvent(B, True, 2),)
    assert r.header == {"masterBrokerId": "2", "masterAddress": "10.0.0.2:10911", "masterEpoch": "1",
                        "syncStateSetEpoch": "1"}
    body = ElectMasterResponseBody.from_json(r.body)
    assert body.sync_state_set == {2}
    assert body.broker_member_group.broker_addrs == {1: "10.0.0.1:10911", 2: "10.0.0.2:10911"}
    s = w.ssi()
    assert (s.master_broker_id, s.master_epoch, s.sync_state_set_epoch, s.sync_state_set) == (2, 1, 1, {2})


def test_first_election_of_an_unregistered_id_is_refused(w: World) -> None:
    w.add(1)
    assert w.elect(9).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_first_election_by_controller_uses_policy(w: World) -> None:
    w.add(1)  # empty SyncStateSet: no candidate
    r = w.elect(-1)
    assert r.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE and r.events == (ElectMasterEvent(B, False),)


def test_master_still_exists(w: World) -> None:
    three(w)
    r = w.elect(2)
    assert r.code == RC.CONTROLLER_MASTER_STILL_EXIST and r.events == ()
    assert r.header == {"masterBrokerId": "1", "masterAddress": "10.0.0.1:10911", "masterEpoch": "1",
                        "syncStateSetEpoch": "2"}
    assert ElectMasterResponseBody.from_json(r.body).sync_state_set == {1, 2, 3}


def test_failover_picks_best_sync_state_member(w: World) -> None:
    three(w)
    w.add(4)  # registered, not in the SyncStateSet, best offsets: not eligible (clean election)
    w.info = {2: CandidateInfo(1, 100, 5), 3: CandidateInfo(1, 200, 9), 4: CandidateInfo(1, 999, 0)}
    w.dead.add(1)
    r = w.elect(-1)
    assert r.ok and r.header["masterBrokerId"] == "3"
    assert (r.header["masterEpoch"], r.header["syncStateSetEpoch"]) == ("2", "3")
    s = w.ssi()
    assert (s.master_broker_id, s.master_epoch, s.sync_state_set_epoch, s.sync_state_set) == (3, 2, 3, {3})


def test_no_candidate_controller_triggered_clears_master(w: World) -> None:
    three(w)
    w.dead |= {1, 2, 3}
    r = w.elect(-1)
    assert r.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    s = w.ssi()
    assert (s.master_broker_id, s.master_epoch, s.sync_state_set_epoch, s.sync_state_set) == (None, 2, 2, {1, 2, 3})


def test_no_candidate_broker_triggered_fails_without_event(w: World) -> None:
    three(w)
    w.dead |= {1, 2, 3}
    r = w.elect(2)
    assert r.code == RC.CONTROLLER_ELECT_MASTER_FAILED and r.events == ()
    assert w.ssi().master_epoch == 1


def test_designated_election(w: World) -> None:
    three(w)
    r = w.elect(2, designate=True)
    assert r.ok and r.header["masterBrokerId"] == "2"
    w.dead.add(3)
    r = w.elect(3, designate=True)  # designated but dead: nobody, no fallback
    assert r.code == RC.CONTROLLER_ELECT_MASTER_FAILED


def test_unclean_election(w: World) -> None:
    three(w)
    w.add(4)
    w.dead |= {1, 2, 3}
    assert w.elect(-1, unclean=False).code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    r = w.elect(-1, unclean=True)
    assert r.ok and r.header["masterBrokerId"] == "4"


# ---- alter SyncStateSet: rules in order -----------------------------------------------------------------------
def test_alter_rules_in_order(w: World) -> None:
    assert w.alter({1, 2}).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # 1. unknown broker-set
    three(w)  # master 1, masterEpoch 1, set {1,2,3} epoch 2
    assert w.alter({1, 2, 3}, ss_epoch=2).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # 2. unchanged
    assert w.alter({1, 2}, master=2, ss_epoch=2).code == RC.CONTROLLER_INVALID_MASTER  # 3.
    assert w.alter({1, 2}, master_epoch=0, ss_epoch=2).code == RC.CONTROLLER_FENCED_MASTER_EPOCH  # 4.
    assert w.alter({1, 2}, ss_epoch=1).code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH  # 5.
    assert w.alter({1, 2, 7}, ss_epoch=2).code == RC.CONTROLLER_INVALID_REPLICAS  # 6.
    w.dead.add(2)
    assert w.alter({1, 2}, ss_epoch=2).code == RC.CONTROLLER_BROKER_NOT_ALIVE  # 7.
    assert w.alter({3}, ss_epoch=2).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # 8. master missing
    r = w.alter({1, 3}, ss_epoch=2)
    assert r.ok and r.header == {"newSyncStateSetEpoch": "3"}
    assert r.events == (AlterSyncStateSetEvent(B, frozenset({1, 3})),)
    assert SyncStateSet.from_json(r.body) == SyncStateSet(frozenset({1, 3}), 3)
    assert w.ssi().sync_state_set == {1, 3} and w.ssi().master_epoch == 1


def test_alter_without_master(w: World) -> None:
    w.add(1)
    assert w.alter({1}, master_epoch=0, ss_epoch=0).code == RC.CONTROLLER_INVALID_MASTER


def test_results_never_mutate(w: World) -> None:
    three(w)
    before = w.m.snapshot()
    w.dead.add(3)
    for r in (w.m.elect_master(ElectMasterRequestHeader(C, B, 2, True), w.alive),
              w.m.alter_sync_state_set(AlterSyncStateSetRequestHeader(B, 1, 1), SyncStateSet(frozenset({1}), 2),
                                       w.alive),
              w.m.apply_broker_id(ApplyBrokerIdRequestHeader(C, B, 4, "x:1;1")),
              w.m.register_broker(RegisterBrokerToControllerRequestHeader(C, B, 1, "new:1"), w.alive),
              w.m.clean_broker_data(CleanControllerBrokerDataRequestHeader(B, C, "3"), w.alive)):
        assert r.events
    assert w.m.snapshot() == before


# ---- reads ------------------------------------------------------------------------------------------------
def test_get_replica_info(w: World) -> None:
    r = w.m.get_replica_info(GetReplicaInfoRequestHeader(B))
    assert r.code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    three(w)
    r = w.m.get_replica_info(GetReplicaInfoRequestHeader(B))
    assert r.header == {"masterBrokerId": "1", "masterAddress": "10.0.0.1:10911", "masterEpoch": "1"}
    assert SyncStateSet.from_json(r.body) == SyncStateSet(frozenset({1, 2, 3}), 2)


def test_get_sync_state_data(w: World) -> None:
    three(w)
    w.add(4)
    w.dead.add(3)
    r = w.m.get_sync_state_data([B, "unknown"], w.alive)
    info = BrokerReplicasInfo.from_json(r.body).replicas_info_table
    assert list(info) == [B]
    ri = info[B]
    assert (ri.master_broker_id, ri.master_address, ri.master_epoch, ri.sync_state_set_epoch) == (
        1, "10.0.0.1:10911", 1, 2)
    assert [(x.broker_id, x.alive) for x in ri.in_sync_replicas] == [(1, True), (2, True), (3, False)]
    assert [(x.broker_id, x.broker_address) for x in ri.not_in_sync_replicas] == [(4, "10.0.0.4:10911")]


# ---- clean ------------------------------------------------------------------------------------------------
def test_clean_rules(w: World) -> None:
    three(w)
    clean = w.m.clean_broker_data
    assert clean(CleanControllerBrokerDataRequestHeader(B, C, "1;x"), w.alive).code == \
        RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert clean(CleanControllerBrokerDataRequestHeader(B, C), w.alive).code == \
        RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA  # master recorded
    assert clean(CleanControllerBrokerDataRequestHeader(B, C, "2"), w.alive).code == \
        RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA  # alive
    assert clean(CleanControllerBrokerDataRequestHeader("nope", C, "2", True), w.alive).code == \
        RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA  # unknown set
    w.dead.add(3)
    r = w.run(clean(CleanControllerBrokerDataRequestHeader(B, C, "3"), w.alive))
    assert r.ok and r.events == (CleanBrokerDataEvent(B, frozenset({3})),)
    assert sorted(w.m.replica_info[B].broker_ids) == [1, 2] and w.ssi().sync_state_set == {1, 2}
    r = w.run(clean(CleanControllerBrokerDataRequestHeader(B, C, "1", True), w.alive))
    assert r.ok and w.ssi().master_broker_id is None
    w.run(clean(CleanControllerBrokerDataRequestHeader(B, C, None, True), w.alive))
    assert not w.m.contains(B) and B not in w.m.replica_info


def test_clean_last_id_drops_the_set(w: World) -> None:
    w.add(1)
    w.dead.add(1)
    w.run(w.m.clean_broker_data(CleanControllerBrokerDataRequestHeader(B, C, "1"), w.alive))
    assert not w.m.replica_info and not w.m.sync_state_info


# ---- scan -------------------------------------------------------------------------------------------------
def test_scan_need_reelect(w: World) -> None:
    three(w)
    assert w.m.scan_need_reelect(w.alive) == []
    w.dead.add(1)
    assert w.m.scan_need_reelect(w.alive) == [B]
    w.dead |= {2, 3}
    assert w.m.scan_need_reelect(w.alive) == []  # nobody alive
    w.elect(-1)  # clears the master
    assert w.m.scan_need_reelect(w.alive) == []
    w.dead.discard(3)  # a SyncStateSet member returns: electable
    assert w.m.scan_need_reelect(w.alive) == [B]
    assert w.elect(-1).header["masterBrokerId"] == "3"


def test_scan_skips_never_elected(w: World) -> None:
    w.add(1)
    assert w.m.scan_need_reelect(w.alive) == []


# ---- events, apply, snapshot ----------------------------------------------------------------------------------
@pytest.mark.parametrize("event", [
    AlterSyncStateSetEvent(B, frozenset({1, 2})),
    ApplyBrokerIdEvent(C, B, "a:1", "a:1;5", 1),
    ElectMasterEvent(B, True, 2),
    ElectMasterEvent(B, False),
    CleanBrokerDataEvent(B, frozenset({3})),
    CleanBrokerDataEvent(B),
    UpdateBrokerAddressEvent(C, B, "b:2", 1),
])
def test_event_round_trip(event: object) -> None:
    data = encode_event(event)  # type: ignore[arg-type]
    assert data[:2] == event.TYPE.to_bytes(2, "big")  # type: ignore[attr-defined]
    orjson.loads(data[2:])
    assert decode_event(data) == event


def test_event_encoding_shape() -> None:
    assert encode_event(AlterSyncStateSetEvent(B, frozenset({2, 1}))) == \
        b'\x00\x01{"brokerName":"broker-a","newSyncStateSet":[1,2]}'


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x04{}", b"\x00\x09{}", b"\x00\x01{", b"\x00\x01{}"])
def test_bad_events(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_event(data)


def test_apply_to_unknown_sets_is_ignored(w: World) -> None:
    for e in (AlterSyncStateSetEvent("x", frozenset({1})), ElectMasterEvent("x", True, 1),
              CleanBrokerDataEvent("x", frozenset({1})), UpdateBrokerAddressEvent(C, "x", "a", 1)):
        w.m.apply(e)
    assert not w.m.replica_info and not w.m.sync_state_info


def test_snapshot_restore_round_trip(w: World) -> None:
    three(w)
    w.add(1, name="broker-b")
    snap = w.m.snapshot()
    other = ReplicasInfoManager()
    other.restore(snap)
    assert other.snapshot() == snap
    assert other.replica_info == w.m.replica_info and other.sync_state_info == w.m.sync_state_info
    other.restore(b"")
    assert not other.replica_info


@pytest.mark.parametrize("data", [b"{", b'{"version":2}', b'{"version":1}'])
def test_bad_snapshot(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        ReplicasInfoManager().restore(data)


def test_state_machine_adapter(w: World) -> None:
    sm = ControllerStateMachine()
    seen: list[tuple[int, object]] = []
    sm.listeners.append(lambda i, e: seen.append((i, e)))
    assert sm.apply(1, b"") is None
    e = ApplyBrokerIdEvent(C, B, "a:1", "a:1;1", 1)
    assert sm.apply(2, encode_event(e)) == e
    assert sm.applied_index == 2 and seen == [(2, e)]
    replica = ControllerStateMachine()
    replica.restore(sm.snapshot())
    assert replica.snapshot() == sm.snapshot()
