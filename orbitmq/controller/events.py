"""The controller's replicated events (RocketMQ's ids 1-6) and their log encoding: 2-byte big-endian type id + JSON.

One Raft entry carries one event. Pure data: what an event does to the state is ReplicasInfoManager.apply's job.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import orjson

from orbitmq.base.errors import ProtocolError

_TYPE = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetEvent:
    TYPE = 1
    broker_name: str
    new_sync_state_set: frozenset[int]

    def to_obj(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "newSyncStateSet": sorted(self.new_sync_state_set)}

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> AlterSyncStateSetEvent:
        return cls(str(d["brokerName"]), frozenset(int(x) for x in d["newSyncStateSet"]))


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdEvent:
    TYPE = 2
    cluster_name: str
    broker_name: str
    broker_address: str
    register_check_code: str
    new_broker_id: int

    def to_obj(self) -> dict[str, Any]:
        return {"brokerAddress": self.broker_address, "brokerName": self.broker_name,
                "clusterName": self.cluster_name, "newBrokerId": self.new_broker_id,
                "registerCheckCode": self.register_check_code}

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> ApplyBrokerIdEvent:
        return cls(str(d["clusterName"]), str(d["brokerName"]), str(d["brokerAddress"]),
                   str(d["registerCheckCode"]), int(d["newBrokerId"]))


@dataclass(frozen=True, slots=True)
class ElectMasterEvent:
    """new_master_elected=False: the master is gone and nobody replaced it (masterEpoch still moves on)."""
    TYPE = 3
    broker_name: str
    new_master_elected: bool
    new_master_broker_id: int | None = None

    def to_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {"brokerName": self.broker_name, "newMasterElected": self.new_master_elected}
        if self.new_master_broker_id is not None:
            d["newMasterBrokerId"] = self.new_master_broker_id
        return d

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> ElectMasterEvent:
        mid = d.get("newMasterBrokerId")
        return cls(str(d["brokerName"]), bool(d["newMasterElected"]), None if mid is None else int(mid))


@dataclass(frozen=True, slots=True)
class CleanBrokerDataEvent:
    """An empty id set drops the whole broker-set."""
    TYPE = 5
    broker_name: str
    broker_id_set_to_clean: frozenset[int] = frozenset()

    def to_obj(self) -> dict[str, Any]:
        return {"brokerIdSetToClean": sorted(self.broker_id_set_to_clean), "brokerName": self.broker_name}

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> CleanBrokerDataEvent:
        return cls(str(d["brokerName"]), frozenset(int(x) for x in d.get("brokerIdSetToClean") or ()))


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddressEvent:
    TYPE = 6
    cluster_name: str
    broker_name: str
    broker_address: str
    broker_id: int

    def to_obj(self) -> dict[str, Any]:
        return {"brokerAddress": self.broker_address, "brokerId": self.broker_id, "brokerName": self.broker_name,
                "clusterName": self.cluster_name}

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> UpdateBrokerAddressEvent:
        return cls(str(d["clusterName"]), str(d["brokerName"]), str(d["brokerAddress"]), int(d["brokerId"]))


Event = (AlterSyncStateSetEvent | ApplyBrokerIdEvent | ElectMasterEvent | CleanBrokerDataEvent
         | UpdateBrokerAddressEvent)
_BY_TYPE: dict[int, Any] = {c.TYPE: c for c in (AlterSyncStateSetEvent, ApplyBrokerIdEvent, ElectMasterEvent,
                                               CleanBrokerDataEvent, UpdateBrokerAddressEvent)}


def encode_event(event: Event) -> bytes:
    return _TYPE.pack(event.TYPE) + orjson.dumps(event.to_obj(), option=orjson.OPT_SORT_KEYS)


def decode_event(data: bytes) -> Event:
    """ProtocolError for a truncated entry, an unknown type id (4 = ReadEvent is never logged) or bad JSON."""
    if len(data) < 2:
        raise ProtocolError(f"controller event of {len(data)} bytes")
    (type_id,) = _TYPE.unpack_from(data)
    cls = _BY_TYPE.get(type_id)
    if cls is None:
        raise ProtocolError(f"unknown controller event type {type_id}")
    try:
        obj = orjson.loads(data[2:])
        event: Event = cls.from_obj(obj)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"bad controller event type {type_id}: {type(e).__name__}: {e}") from None
    return event
