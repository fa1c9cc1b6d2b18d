"""ReplicasInfoManager: the controller's replicated metadata (broker ids, masters, SyncStateSets) as a sans-IO object.

Request methods validate against the current state and return a ControllerResult (code, remark, header fields,
body, events) WITHOUT changing anything; `apply(event)` is the only mutation, run on every replica in log order.
Liveness comes in as callbacks. No asyncio, sockets, threads, clocks or randomness here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from orbitmq.base.errors import ProtocolError
from orbitmq.controller.election import CandidateInfo, DefaultElectPolicy
from orbitmq.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
    decode_event,
)
from orbitmq.protocol.bodies.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    Header,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    parse_id_list,
)
from orbitmq.protocol.bodies.member_group import BrokerMemberGroup
from orbitmq.protocol.codes import ResponseCode as RC
from orbitmq.protocol.ext import HeaderError

log = logging.getLogger(__name__)

FIRST_BROKER_CONTROLLER_ID = 1
SNAPSHOT_VERSION = 1

# (clusterName, brokerName, brokerId) -> alive?
AliveFn = Callable[[str, str, int], bool]
# (clusterName, brokerName, brokerId) -> what the broker last reported
LiveInfoFn = Callable[[str, str, int], CandidateInfo | None]


@dataclass(slots=True)
class BrokerReplicaInfo:
    cluster_name: str
    broker_name: str
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    broker_ids: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (address, registerCheckCode)

    def address(self, broker_id: int | None) -> str | None:
        entry = self.broker_ids.get(broker_id) if broker_id is not None else None
        return entry[0] if entry is not None else None


@dataclass(slots=True)
class SyncStateInfo:
    cluster_name: str
    broker_name: str
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    master_broker_id: int | None = None


@dataclass(frozen=True, slots=True)
class ControllerResult:
    code: int = RC.SUCCESS
    remark: str | None = None
    header: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    events: tuple[Event, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == RC.SUCCESS


def _result(header: Header | None = None, code: int = RC.SUCCESS, remark: str | None = None,
            body: bytes | None = None, events: tuple[Event, ...] = ()) -> ControllerResult:
    return ControllerResult(int(code), remark, header.to_ext() if header is not None else {}, body, events)


class ReplicasInfoManager:
    def __init__(self) -> None:
        self.replica_info: dict[str, BrokerReplicaInfo] = {}
        self.sync_state_info: dict[str, SyncStateInfo] = {}

    def contains(self, broker_name: str) -> bool:
        """A broker-set exists only when both tables know it."""
        return broker_name in self.replica_info and broker_name in self.sync_state_info

    # ---- requests (no mutation) -----------------------------------------------------------------------------
    def alter_sync_state_set(self, req: AlterSyncStateSetRequestHeader, body: SyncStateSet,
                             alive: AliveFn) -> ControllerResult:
        name = req.broker_name
        if not self.contains(name):
            return _result(code=RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, remark="Broker metadata is not existed")
        ssi, bri = self.sync_state_info[name], self.replica_info[name]
        new_set = body.sync_state_set
        if new_set == ssi.sync_state_set:
            return _result(code=RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                           remark="The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
        if ssi.master_broker_id is None or ssi.master_broker_id != req.master_broker_id:
            return _result(code=RC.CONTROLLER_INVALID_MASTER,
                           remark=f"Rejecting alter syncStateSet request because the current master is "
                                  f"{ssi.master_broker_id}, not {req.master_broker_id}")
        if req.master_epoch != ssi.master_epoch:
            return _result(code=RC.CONTROLLER_FENCED_MASTER_EPOCH,
                           remark=f"Rejecting alter syncStateSet request because the current master epoch is "
                                  f"{ssi.master_epoch}, not {req.master_epoch}")
        if body.sync_state_set_epoch != ssi.sync_state_set_epoch:
            return _result(code=RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                           remark=f"Rejecting alter syncStateSet request because the current syncStateSet epoch "
                                  f"is {ssi.sync_state_set_epoch}, not {body.sync_state_set_epoch}")
        unknown = sorted(b for b in new_set if b not in bri.broker_ids)
        if unknown:
            return _result(code=RC.CONTROLLER_INVALID_REPLICAS,
                           remark=f"Rejecting alter syncStateSet request because the replicas {unknown} don't exist")
        dead = sorted(b for b in new_set if not alive(bri.cluster_name, name, b))
        if dead:
            return _result(code=RC.CONTROLLER_BROKER_NOT_ALIVE,
                           remark=f"Rejecting alter syncStateSet request because the replicas {dead} are not alive")
        if ssi.master_broker_id not in new_set:
            return _result(code=RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                           remark=f"Rejecting alter syncStateSet request because the newSyncStateSet doesn't "
                                  f"contain the master {ssi.master_broker_id}")
        epoch = ssi.sync_state_set_epoch + 1
        return _result(AlterSyncStateSetResponseHeader(epoch), body=SyncStateSet(new_set, epoch).to_json(),
                       events=(AlterSyncStateSetEvent(name, new_set),))

    def elect_master(self, req: ElectMasterRequestHeader, alive: AliveFn, live_info: LiveInfoFn | None = None,
                     *, unclean: bool = False) -> ControllerResult:
        """brokerId -1/None: triggered by the controller; designateElect: the admin names the new master."""
        name = req.broker_name
        if not self.contains(name):
            return _result(code=RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, remark="Broker hasn't been registered")
        ssi, bri = self.sync_state_info[name], self.replica_info[name]
        requested = req.broker_id if req.broker_id is not None and req.broker_id != -1 else None
        old = ssi.master_broker_id
        new: int | None = None
        if ssi.master_epoch == 0 and requested is not None:
            # never elected before: the first broker asking becomes master, without any policy
            if requested not in bri.broker_ids:
                return _result(code=RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                               remark=f"BrokerId {requested} hasn't been registered in broker-set {name}")
            new = requested
        if new is None:
            policy = DefaultElectPolicy(
                lambda b: alive(bri.cluster_name, name, b),
                None if live_info is None else (lambda b: live_info(bri.cluster_name, name, b)))
            new = policy.elect(ssi.sync_state_set, set(bri.broker_ids) if unclean else None, old,
                               requested if req.designate_elect else None)
        if new is not None and new == old:
            header = ElectMasterResponseHeader(old, bri.address(old), ssi.master_epoch, ssi.sync_state_set_epoch)
            return _result(header, RC.CONTROLLER_MASTER_STILL_EXIST,
                           f"The old master {old} is still alive, not need to elect new master for broker {name}",
                           ElectMasterResponseBody(None, frozenset(ssi.sync_state_set)).to_json())
        if new is not None:
            header = ElectMasterResponseHeader(new, bri.address(new), ssi.master_epoch + 1,
                                               ssi.sync_state_set_epoch + 1)
            body = ElectMasterResponseBody(self.member_group(name), frozenset({new})).to_json()
            return _result(header, body=body, events=(ElectMasterEvent(name, True, new),))
        if requested is None:
            return _result(ElectMasterResponseHeader(), RC.CONTROLLER_MASTER_NOT_AVAILABLE,
                           "Old master has down and failed to elect a new broker master",
                           events=(ElectMasterEvent(name, False),))
        return _result(ElectMasterResponseHeader(), RC.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def get_next_broker_id(self, req: GetNextBrokerIdRequestHeader) -> ControllerResult:
        bri = self.replica_info.get(req.broker_name)
        nxt = FIRST_BROKER_CONTROLLER_ID if bri is None else bri.next_assign_broker_id
        return _result(GetNextBrokerIdResponseHeader(req.cluster_name, req.broker_name, nxt))

    def apply_broker_id(self, req: ApplyBrokerIdRequestHeader) -> ControllerResult:
        name, bid, code = req.broker_name, req.applied_broker_id, req.register_check_code
        header = ApplyBrokerIdResponseHeader(req.cluster_name, name)
        event = ApplyBrokerIdEvent(req.cluster_name, name, req.broker_address, code, bid)
        bri = self.replica_info.get(name)
        if bri is None:
            if bid == FIRST_BROKER_CONTROLLER_ID:
                return _result(header, events=(event,))
            return _result(header, RC.CONTROLLER_BROKER_ID_INVALID,
                           f"Broker-set: {name} hasn't been registered in controller, but broker try to apply "
                           f"brokerId: {bid}")
        existing = bri.broker_ids.get(bid)
        if existing is None or existing[1] == code:
            return _result(header, events=(event,))
        return _result(header, RC.CONTROLLER_BROKER_ID_INVALID,
                       f"Fail to apply brokerId: {bid} in broker-set: {name}: the id is used by another broker")

    def register_broker(self, req: RegisterBrokerToControllerRequestHeader, alive: AliveFn) -> ControllerResult:
        """5.1.1+ "register success": the last step of the broker-id flow; fixes a changed address."""
        name, bid = req.broker_name, req.broker_id
        if not self.contains(name):
            return _result(code=RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                           remark=f"Broker-set: {name} hasn't been registered in controller")
        ssi, bri = self.sync_state_info[name], self.replica_info[name]
        if bid not in bri.broker_ids:
            return _result(code=RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                           remark=f"BrokerId: {bid} hasn't been registered in broker-set: {name}")
        header = RegisterBrokerToControllerResponseHeader(req.cluster_name, name)
        master = ssi.master_broker_id
        if master is not None and alive(bri.cluster_name, name, master):
            header = RegisterBrokerToControllerResponseHeader(req.cluster_name, name, master, bri.address(master),
                                                              ssi.master_epoch, ssi.sync_state_set_epoch)
        events: tuple[Event, ...] = ()
        if req.broker_address != bri.address(bid):
            events = (UpdateBrokerAddressEvent(req.cluster_name, name, req.broker_address, bid),)
        body = SyncStateSet(frozenset(ssi.sync_state_set), ssi.sync_state_set_epoch).to_json()
        return _result(header, body=body, events=events)

    def get_replica_info(self, req: GetReplicaInfoRequestHeader) -> ControllerResult:
        name = req.broker_name
        if not self.contains(name):
            return _result(code=RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, remark="Broker metadata is not existed")
        ssi, bri = self.sync_state_info[name], self.replica_info[name]
        header = GetReplicaInfoResponseHeader(ssi.master_broker_id, bri.address(ssi.master_broker_id),
                                              ssi.master_epoch)
        return _result(header, body=SyncStateSet(frozenset(ssi.sync_state_set), ssi.sync_state_set_epoch).to_json())

    def get_sync_state_data(self, broker_names: Iterable[str], alive: AliveFn) -> ControllerResult:
        table: dict[str, ReplicasInfo] = {}
        for name in broker_names:
            if not self.contains(name):
                continue
            ssi, bri = self.sync_state_info[name], self.replica_info[name]
            in_sync: list[ReplicaIdentity] = []
            not_in_sync: list[ReplicaIdentity] = []
            for bid, (addr, _) in sorted(bri.broker_ids.items()):
                r = ReplicaIdentity(name, bid, addr, alive(bri.cluster_name, name, bid))
                (in_sync if bid in ssi.sync_state_set else not_in_sync).append(r)
            table[name] = ReplicasInfo(ssi.master_broker_id, bri.address(ssi.master_broker_id), ssi.master_epoch,
                                       ssi.sync_state_set_epoch, tuple(in_sync), tuple(not_in_sync))
        return _result(body=BrokerReplicasInfo(table).to_json())

    def clean_broker_data(self, req: CleanControllerBrokerDataRequestHeader, alive: AliveFn) -> ControllerResult:
        name = req.broker_name
        cluster = req.cluster_name or (self.replica_info[name].cluster_name if name in self.replica_info else "")
        try:
            ids = parse_id_list(req.broker_controller_ids_to_clean)
        except HeaderError as e:
            return _result(code=RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, remark=str(e))
        if not req.is_clean_living_broker:
            ssi = self.sync_state_info.get(name)
            if not ids and ssi is not None and ssi.master_broker_id is not None:
                return _result(code=RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                               remark=f"Broker-set {name} still has a master ({ssi.master_broker_id}); clean up "
                                      "failure (name the ids or set isCleanLivingBroker)")
            living = sorted(b for b in ids if alive(cluster, name, b))
            if living:
                return _result(code=RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                               remark=f"Broker [{name}, {living}] is still alive, clean up failure")
        if not self.contains(name):
            return _result(code=RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                           remark=f"Broker {name} is not existed, clean broker data failure.")
        return _result(events=(CleanBrokerDataEvent(name, ids),))

    def scan_need_reelect(self, alive: AliveFn, *, unclean: bool = False) -> list[str]:
        """Broker-sets to re-elect: the recorded master is dead while some registered replica lives, or there is
        no master (after a first election) while an electable candidate lives."""
        out: list[str] = []
        for name in sorted(self.sync_state_info):
            ssi, bri = self.sync_state_info[name], self.replica_info.get(name)
            if bri is None:
                continue
            master = ssi.master_broker_id
            if master is not None:
                if not alive(bri.cluster_name, name, master) and any(
                        alive(bri.cluster_name, name, b) for b in bri.broker_ids):
                    out.append(name)
            elif ssi.master_epoch > 0:
                pool = set(bri.broker_ids) if unclean else ssi.sync_state_set
                if any(alive(bri.cluster_name, name, b) for b in pool):
                    out.append(name)
        return out

    # ---- views -----------------------------------------------------------------------------------------------
    def member_group(self, broker_name: str) -> BrokerMemberGroup | None:
        bri = self.replica_info.get(broker_name)
        if bri is None:
            return None
        return BrokerMemberGroup(bri.cluster_name, broker_name, {b: a for b, (a, _) in bri.broker_ids.items()})

    def master_of(self, broker_name: str) -> int | None:
        ssi = self.sync_state_info.get(broker_name)
        return None if ssi is None else ssi.master_broker_id

    # ---- the only mutation -----------------------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        if isinstance(event, AlterSyncStateSetEvent):
            ssi = self.sync_state_info.get(event.broker_name)
            if ssi is not None:
                ssi.sync_state_set = set(event.new_sync_state_set)
                ssi.sync_state_set_epoch += 1
        elif isinstance(event, ApplyBrokerIdEvent):
            self._apply_broker_id(event)
        elif isinstance(event, ElectMasterEvent):
            ssi = self.sync_state_info.get(event.broker_name)
            if ssi is None:
                return
            ssi.master_epoch += 1
            if event.new_master_elected and event.new_master_broker_id is not None:
                ssi.master_broker_id = event.new_master_broker_id
                ssi.sync_state_set = {event.new_master_broker_id}
                ssi.sync_state_set_epoch += 1
            else:
                ssi.master_broker_id = None
        elif isinstance(event, CleanBrokerDataEvent):
            self._apply_clean(event)
        elif isinstance(event, UpdateBrokerAddressEvent):
            bri = self.replica_info.get(event.broker_name)
            if bri is not None and event.broker_id in bri.broker_ids:
                bri.broker_ids[event.broker_id] = (event.broker_address, bri.broker_ids[event.broker_id][1])

    def _apply_broker_id(self, e: ApplyBrokerIdEvent) -> None:
        bri = self.replica_info.get(e.broker_name)
        if bri is None:
            bri = self.replica_info[e.broker_name] = BrokerReplicaInfo(e.cluster_name, e.broker_name)
            self.sync_state_info.setdefault(e.broker_name, SyncStateInfo(e.cluster_name, e.broker_name))
        if e.new_broker_id in bri.broker_ids:
            return
        bri.broker_ids[e.new_broker_id] = (e.broker_address, e.register_check_code)
        # never hand out an id that is taken (RocketMQ only adds one, which can wedge the id sequence)
        bri.next_assign_broker_id = max(bri.next_assign_broker_id + 1, e.new_broker_id + 1)

    def _apply_clean(self, e: CleanBrokerDataEvent) -> None:
        name = e.broker_name
        if not e.broker_id_set_to_clean:
            self.replica_info.pop(name, None)
            self.sync_state_info.pop(name, None)
            return
        bri, ssi = self.replica_info.get(name), self.sync_state_info.get(name)
        if bri is None or ssi is None:
            return
        for bid in e.broker_id_set_to_clean:
            bri.broker_ids.pop(bid, None)
            ssi.sync_state_set.discard(bid)
            if ssi.master_broker_id == bid:
                ssi.master_broker_id = None
        if not bri.broker_ids:
            del self.replica_info[name]
            del self.sync_state_info[name]

    # ---- snapshot --------------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole state as canonical JSON (sorted keys): equal states give equal bytes."""
        replicas = {n: {"clusterName": b.cluster_name, "nextAssignBrokerId": b.next_assign_broker_id,
                        "brokerIdInfo": {str(i): [a, c] for i, (a, c) in sorted(b.broker_ids.items())}}
                    for n, b in self.replica_info.items()}
        sync = {n: {"clusterName": s.cluster_name, "masterEpoch": s.master_epoch,
                    "syncStateSetEpoch": s.sync_state_set_epoch, "syncStateSet": sorted(s.sync_state_set),
                    "masterBrokerId": s.master_broker_id}
                for n, s in self.sync_state_info.items()}
        doc = {"version": SNAPSHOT_VERSION, "replicaInfoTable": replicas, "syncStateSetInfoTable": sync}
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)

    def restore(self, data: bytes) -> None:
        """Replace the whole state (b"" = empty). ProtocolError if the snapshot is unreadable."""
        if not data:
            self.replica_info, self.sync_state_info = {}, {}
            return
        try:
            doc: dict[str, Any] = orjson.loads(data)
            if doc.get("version") != SNAPSHOT_VERSION:
                raise ValueError(f"snapshot version {doc.get('version')!r}")
            replicas = {
                n: BrokerReplicaInfo(str(d["clusterName"]), n, int(d["nextAssignBrokerId"]),
                                     {int(i): (str(a), str(c)) for i, (a, c) in d["brokerIdInfo"].items()})
                for n, d in doc["replicaInfoTable"].items()}
            sync = {
                n: SyncStateInfo(str(d["clusterName"]), n, int(d["masterEpoch"]), int(d["syncStateSetEpoch"]),
                                 {int(x) for x in d["syncStateSet"]},
                                 None if d["masterBrokerId"] is None else int(d["masterBrokerId"]))
                for n, d in doc["syncStateSetInfoTable"].items()}
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise ProtocolError(f"bad controller snapshot: {type(e).__name__}: {e}") from None
        self.replica_info, self.sync_state_info = replicas, sync


class ControllerStateMachine:
    """The Raft driver's StateMachine: each committed entry is one encoded event (b"" = a leader no-op)."""

    def __init__(self, manager: ReplicasInfoManager | None = None) -> None:
        self.manager = manager if manager is not None else ReplicasInfoManager()
        self.applied_index = 0
        self.listeners: list[Callable[[int, Event], None]] = []

    def apply(self, index: int, data: bytes) -> object:
        self.applied_index = index
        if not data:
            return None
        event = decode_event(data)
        self.manager.apply(event)
        for cb in self.listeners:
            cb(index, event)
        return event

    def snapshot(self) -> bytes:
        return self.manager.snapshot()

    def restore(self, data: bytes) -> None:
        self.manager.restore(data)
