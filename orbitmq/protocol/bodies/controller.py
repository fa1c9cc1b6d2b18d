"""RIP-44 controller wire shapes (RocketMQ 5.1.1+): the JSON bodies and typed custom headers of codes 904, 1001-1013.

Headers travel as string ext fields named after the Java fields; `Header.to_ext()` / `from_ext()` convert, with
missing required fields raising HeaderError. Bodies use fastjson's shapes (Map<Long,String> keys unquoted when
written for Java, both forms read). Pure data: no validation of controller rules here.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Self

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol import fastjson
from orbitmq.protocol.bodies.base import JsonBody, as_bool, as_int
from orbitmq.protocol.bodies.member_group import BrokerMemberGroup
from orbitmq.protocol.ext import REQUIRED, HeaderError, ext_bool, ext_int, ext_str


# ---- bodies ------------------------------------------------------------------------------------------------
def _id_set(v: Any) -> frozenset[int]:
    if not v:
        return frozenset()
    if not isinstance(v, list | tuple | set | frozenset):
        raise TypeError(f"expected a JSON array of broker ids, got {type(v).__name__}")
    return frozenset(as_int(x) for x in v)


@dataclass(frozen=True, slots=True)
class SyncStateSet(JsonBody):
    """`{"syncStateSet":[1,2],"syncStateSetEpoch":3}`: the in-sync broker ids of one group and their version."""

    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> SyncStateSet:
        return cls(_id_set(d.get("syncStateSet")), as_int(d.get("syncStateSetEpoch")))


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody(JsonBody):
    """Body of a successful ELECT_MASTER: the group's registered members and the new SyncStateSet."""

    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: frozenset[int] = frozenset()

    def to_json_obj(self, standard: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.broker_member_group is not None:
            d["brokerMemberGroup"] = self.broker_member_group.to_json_obj(standard)["brokerMemberGroup"]
        d["syncStateSet"] = sorted(self.sync_state_set)
        return d

    def to_json(self, standard: bool = False) -> bytes:
        """fastjson form by default (`"brokerAddrs":{1:"ip:port"}`, what a Java controller sends)."""
        return fastjson.dumps(self.to_json_obj(standard), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ElectMasterResponseBody:
        g = d.get("brokerMemberGroup")
        group = BrokerMemberGroup.from_json_obj(g) if g is not None else None
        return cls(group, _id_set(d.get("syncStateSet")))


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str | None
    alive: bool = False

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {"alive": self.alive}
        if self.broker_address is not None:
            d["brokerAddress"] = self.broker_address
        d["brokerId"] = self.broker_id
        d["brokerName"] = self.broker_name
        return d

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ReplicaIdentity:
        addr = d.get("brokerAddress")
        return cls(str(d.get("brokerName") or ""), as_int(d.get("brokerId")),
                   None if addr is None else str(addr), as_bool(d.get("alive")))


@dataclass(frozen=True, slots=True)
class ReplicasInfo:
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...] = ()
    not_in_sync_replicas: tuple[ReplicaIdentity, ...] = ()

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {"inSyncReplicas": [r.to_json_obj() for r in self.in_sync_replicas]}
        if self.master_address is not None:
            d["masterAddress"] = self.master_address
        if self.master_broker_id is not None:
            d["masterBrokerId"] = self.master_broker_id
        d["masterEpoch"] = self.master_epoch
        d["notInSyncReplicas"] = [r.to_json_obj() for r in self.not_in_sync_replicas]
        d["syncStateSetEpoch"] = self.sync_state_set_epoch
        return d

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ReplicasInfo:
        mid = d.get("masterBrokerId")
        addr = d.get("masterAddress")
        return cls(
            None if mid is None else as_int(mid), None if addr is None else str(addr),
            as_int(d.get("masterEpoch")), as_int(d.get("syncStateSetEpoch")),
            tuple(ReplicaIdentity.from_json_obj(r) for r in d.get("inSyncReplicas") or []),
            tuple(ReplicaIdentity.from_json_obj(r) for r in d.get("notInSyncReplicas") or []),
        )


@dataclass(frozen=True, slots=True)
class BrokerReplicasInfo(JsonBody):
    """GET_SYNC_STATE_DATA (1006) answer: `{"replicasInfoTable":{"<brokerName>":{ReplicasInfo}}}`."""

    replicas_info_table: dict[str, ReplicasInfo] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {"replicasInfoTable": {k: v.to_json_obj() for k, v in sorted(self.replicas_info_table.items())}}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> BrokerReplicasInfo:
        table = d.get("replicasInfoTable") or {}
        return cls({str(k): ReplicasInfo.from_json_obj(v) for k, v in table.items()})


def broker_names_body(names: list[str]) -> bytes:
    """GET_SYNC_STATE_DATA request body: a JSON array of broker names."""
    return fastjson.dumps(list(names))


def broker_names_from_body(body: bytes | None) -> list[str]:
    if not body:
        return []
    obj = fastjson.loads(body)
    if not isinstance(obj, list):
        raise ProtocolError("GET_SYNC_STATE_DATA body is not a JSON array of broker names")
    return [str(x) for x in obj]


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int = (1 << 63) - 1  # Long.MAX_VALUE: the last (open) epoch

    def to_json_obj(self) -> dict[str, Any]:
        return {"endOffset": self.end_offset, "epoch": self.epoch, "startOffset": self.start_offset}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> EpochEntry:
        end = d.get("endOffset")
        return cls(as_int(d.get("epoch")), as_int(d.get("startOffset")),
                   (1 << 63) - 1 if end is None else as_int(end))


@dataclass(frozen=True, slots=True)
class EpochEntryCache(JsonBody):
    """GET_BROKER_EPOCH_CACHE (1007, answered by a broker): its epoch file entries and max offset."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    epoch_list: tuple[EpochEntry, ...] = ()
    max_offset: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "brokerName": self.broker_name, "clusterName": self.cluster_name,
                "epochList": [e.to_json_obj() for e in self.epoch_list], "maxOffset": self.max_offset}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> EpochEntryCache:
        return cls(str(d.get("clusterName") or ""), str(d.get("brokerName") or ""), as_int(d.get("brokerId")),
                   tuple(EpochEntry.from_json_obj(e) for e in d.get("epochList") or []), as_int(d.get("maxOffset")))


# ---- headers -----------------------------------------------------------------------------------------------
def _key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


class Header:
    """Mixin for the header dataclasses: Java field name = camelCase of the Python field unless listed in
    KEYS; fields without a default are required on decode; None values are not sent (as Java skips nulls)."""

    __slots__ = ()
    KEYS: ClassVar[dict[str, str]] = {}

    def to_ext(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is not None:
                out[self.KEYS.get(f.name, _key(f.name))] = _text(v)
        return out

    @classmethod
    def from_ext(cls, ext: dict[str, str] | None) -> Self:
        kwargs: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            key = cls.KEYS.get(f.name, _key(f.name))
            default = REQUIRED if f.default is MISSING else f.default
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if kind.startswith("bool"):
                kwargs[f.name] = ext_bool(ext, key, default)
            elif kind.startswith("int"):
                kwargs[f.name] = ext_int(ext, key, default)
            else:
                kwargs[f.name] = ext_str(ext, key, default)
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequestHeader(Header):
    """904 (oneway): a broker's liveness report to every controller."""
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: int | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: int | None = None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequestHeader(Header):
    broker_name: str
    master_broker_id: int
    master_epoch: int
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ElectMasterRequestHeader(Header):
    """brokerId -1 (or absent) = triggered by the controller itself; designateElect = the admin command."""
    cluster_name: str
    broker_name: str
    broker_id: int | None = -1
    designate_elect: bool = False
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class ElectMasterResponseHeader(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerRequestHeader(Header):
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class GetReplicaInfoRequestHeader(Header):
    broker_name: str


@dataclass(frozen=True, slots=True)
class GetReplicaInfoResponseHeader(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class GetMetaDataResponseHeader(Header):
    """`peers` is "id:addr;id:addr"; `isLeader` keeps Java's field name."""
    KEYS: ClassVar[dict[str, str]] = {"is_leader": "isLeader"}
    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


@dataclass(frozen=True, slots=True)
class CleanControllerBrokerDataRequestHeader(Header):
    KEYS: ClassVar[dict[str, str]] = {"is_clean_living_broker": "isCleanLivingBroker"}
    broker_name: str
    cluster_name: str | None = None
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: bool = False
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdRequestHeader(Header):
    cluster_name: str
    broker_name: str


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: int | None = None


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdRequestHeader(Header):
    """registerCheckCode is "<brokerAddress>;<epochMillis>"."""
    cluster_name: str
    broker_name: str
    applied_broker_id: int
    register_check_code: str

    @property
    def broker_address(self) -> str:
        return self.register_check_code.split(";", 1)[0]


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None


@dataclass(frozen=True, slots=True)
class NotifyBrokerRoleChangedRequestHeader(Header):
    """1008 (controller -> broker, oneway); the body is the new SyncStateSet."""
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    master_broker_id: int | None = None


def parse_id_list(text: str | None) -> frozenset[int]:
    """"1;2;3" (CLEAN_BROKER_DATA's brokerControllerIdsToClean) -> ids; HeaderError when not numbers."""
    if text is None or not text.strip():
        return frozenset()
    try:
        return frozenset(int(p) for p in text.split(";") if p.strip())
    except ValueError:
        raise HeaderError(f"brokerControllerIdsToClean {text!r} is not a ';'-separated list of ids") from None
