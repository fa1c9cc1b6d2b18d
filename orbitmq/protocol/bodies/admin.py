"""Small request/response bodies: KVTable, lock bodies, consumer/topic/group lists, connection lists,
statistics tables keyed by MessageQueue (fastjson object keys), offset tables with unquoted int keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import fastjson
from orbitmq.protocol.bodies.base import JsonBody, as_int, as_str_list, enum_name
from orbitmq.protocol.bodies.heartbeat import (
    CONSUME_FROM_WHERE,
    CONSUME_TYPES,
    MESSAGE_MODELS,
    SubscriptionData,
)
from orbitmq.protocol.bodies.register import DataVersion


def _mq(k: Any) -> MessageQueue:
    if isinstance(k, MessageQueue):
        return k
    if isinstance(k, dict):
        return MessageQueue.from_json_obj(k)
    if isinstance(k, tuple):  # frozen object key from fastjson.loads
        return MessageQueue.from_json_obj(dict(k))
    raise ValueError(f"not a MessageQueue key: {k!r}")


def _mq_table(raw: Any) -> list[tuple[MessageQueue, Any]]:
    """Map<MessageQueue, V>: fastjson object-key form, or Gson-style [[mq, v], ...]."""
    if not raw:
        return []
    if isinstance(raw, list):
        return [(_mq(e[0]), e[1]) for e in raw]
    return [(_mq(k), v) for k, v in raw.items()]


@dataclass(slots=True)
class KVTable(JsonBody):
    table: dict[str, str] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {"table": self.table}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> KVTable:
        return cls({str(k): "" if v is None else str(v) for k, v in (d.get("table") or {}).items()})


@dataclass(slots=True)
class LockBatchBody(JsonBody):
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request body."""

    consumer_group: str = ""
    client_id: str = ""
    mq_set: list[MessageQueue] = field(default_factory=list)
    only_this_broker: bool = False  # 5.x; written only when true

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": [mq.to_json_obj() for mq in self.mq_set],
        }
        if self.only_this_broker:
            d["onlyThisBroker"] = True
        return d

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> LockBatchBody:
        return cls(
            consumer_group=str(d.get("consumerGroup") or ""),
            client_id=str(d.get("clientId") or ""),
            mq_set=[MessageQueue.from_json_obj(m) for m in d.get("mqSet") or []],
            only_this_broker=bool(d.get("onlyThisBroker", False)),
        )


@dataclass(slots=True)
class LockBatchResponseBody(JsonBody):
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    def to_json_obj(self) -> dict[str, Any]:
        return {"lockOKMQSet": [mq.to_json_obj() for mq in self.lock_ok_mq_set]}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> LockBatchResponseBody:
        return cls([MessageQueue.from_json_obj(m) for m in d.get("lockOKMQSet") or []])


@dataclass(slots=True)
class ConsumerListBody(JsonBody):
    consumer_id_list: list[str] = field(default_factory=list)

    def to_json_obj(self) -> dict[str, Any]:
        return {"consumerIdList": list(self.consumer_id_list)}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConsumerListBody:
        return cls(as_str_list(d.get("consumerIdList")))


@dataclass(slots=True)
class TopicList(JsonBody):
    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.broker_addr is not None:
            d["brokerAddr"] = self.broker_addr
        d["topicList"] = list(self.topic_list)
        return d

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> TopicList:
        return cls(as_str_list(d.get("topicList")), d.get("brokerAddr"))


@dataclass(slots=True)
class GroupList(JsonBody):
    group_list: list[str] = field(default_factory=list)

    def to_json_obj(self) -> dict[str, Any]:
        return {"groupList": list(self.group_list)}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> GroupList:
        return cls(as_str_list(d.get("groupList")))


@dataclass(slots=True)
class TopicOffset:
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"lastUpdateTimestamp": self.last_update_timestamp, "maxOffset": self.max_offset,
                "minOffset": self.min_offset}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> TopicOffset:
        return cls(as_int(d.get("minOffset")), as_int(d.get("maxOffset")), as_int(d.get("lastUpdateTimestamp")))


@dataclass(slots=True)
class TopicStatsTable(JsonBody):
    """GET_TOPIC_STATS_INFO body: Map<MessageQueue, TopicOffset> with fastjson object keys."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {"offsetTable": {mq: v.to_json_obj() for mq, v in sorted(self.offset_table.items())}}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> TopicStatsTable:
        return cls({mq: TopicOffset.from_json_obj(v) for mq, v in _mq_table(d.get("offsetTable"))})


@dataclass(slots=True)
class OffsetWrapper:
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset,
                "lastTimestamp": self.last_timestamp}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> OffsetWrapper:
        return cls(as_int(d.get("brokerOffset")), as_int(d.get("consumerOffset")), as_int(d.get("lastTimestamp")))


@dataclass(slots=True)
class ConsumeStats(JsonBody):
    """GET_CONSUME_STATS body: consumeTps and Map<MessageQueue, OffsetWrapper>."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def to_json_obj(self) -> dict[str, Any]:
        return {"consumeTps": float(self.consume_tps),
                "offsetTable": {mq: v.to_json_obj() for mq, v in sorted(self.offset_table.items())}}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConsumeStats:
        return cls({mq: OffsetWrapper.from_json_obj(v) for mq, v in _mq_table(d.get("offsetTable"))},
                   float(d.get("consumeTps") or 0.0))

    def total_diff(self) -> int:
        return sum(v.broker_offset - v.consumer_offset for v in self.offset_table.values())


@dataclass(slots=True)
class ConnectionInfo:
    client_id: str
    client_addr: str
    language: str = "JAVA"
    version: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"clientAddr": self.client_addr, "clientId": self.client_id, "language": self.language,
                "version": self.version}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConnectionInfo:
        return cls(str(d.get("clientId") or ""), str(d.get("clientAddr") or ""),
                   str(d.get("language") or "JAVA"), as_int(d.get("version")))


@dataclass(slots=True)
class ConsumerConnection(JsonBody):
    connection_set: list[ConnectionInfo] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "connectionSet": [c.to_json_obj() for c in self.connection_set],
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "messageModel": self.message_model,
            "subscriptionTable": {k: v.to_json_obj() for k, v in self.subscription_table.items()},
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConsumerConnection:
        return cls(
            connection_set=[ConnectionInfo.from_json_obj(c) for c in d.get("connectionSet") or []],
            subscription_table={str(k): SubscriptionData.from_json_obj(v)
                                for k, v in (d.get("subscriptionTable") or {}).items()},
            consume_type=enum_name(d.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=enum_name(d.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=enum_name(d.get("consumeFromWhere"), CONSUME_FROM_WHERE,
                                         "CONSUME_FROM_LAST_OFFSET"),
        )


@dataclass(slots=True)
class ProducerConnection(JsonBody):
    connection_set: list[ConnectionInfo] = field(default_factory=list)

    def to_json_obj(self) -> dict[str, Any]:
        return {"connectionSet": [c.to_json_obj() for c in self.connection_set]}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ProducerConnection:
        return cls([ConnectionInfo.from_json_obj(c) for c in d.get("connectionSet") or []])


@dataclass(slots=True)
class ResetOffsetBody(JsonBody):
    """RESET_CONSUMER_CLIENT_OFFSET body: Map<MessageQueue, Long> (fastjson object keys)."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {"offsetTable": dict(sorted(self.offset_table.items()))}

    def to_json_for_c(self) -> bytes:
        """ResetOffsetBodyForC: the list form the C++ client parses."""
        return fastjson.dumps({"offsetTable": [
            {"brokerName": mq.broker_name, "offset": off, "queueId": mq.queue_id, "topic": mq.topic}
            for mq, off in sorted(self.offset_table.items())
        ]})

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ResetOffsetBody:
        raw = d.get("offsetTable")
        if isinstance(raw, list) and raw and isinstance(raw[0], dict):  # ResetOffsetBodyForC
            return cls({MessageQueue.from_json_obj(e): as_int(e.get("offset")) for e in raw})
        return cls({mq: as_int(v) for mq, v in _mq_table(raw)})


@dataclass(slots=True)
class ConsumerOffsetSerializeWrapper(JsonBody):
    """consumerOffset.json / GET_ALL_CONSUMER_OFFSET: {"offsetTable":{"topic@group":{0:12,1:7}}}; 5.x adds
    "dataVersion" (None when absent: a 4.x body)."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)
    data_version: DataVersion | None = None

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {} if self.data_version is None else {"dataVersion": self.data_version.to_json_obj()}
        d["offsetTable"] = {k: dict(sorted(v.items())) for k, v in self.offset_table.items()}
        return d

    def to_json(self, standard: bool = False) -> bytes:
        return fastjson.dumps(self.to_json_obj(), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConsumerOffsetSerializeWrapper:
        return cls({str(k): {as_int(q): as_int(o) for q, o in (v or {}).items()}
                    for k, v in (d.get("offsetTable") or {}).items()}, _data_version(d))


@dataclass(slots=True)
class DelayOffsetSerializeWrapper(JsonBody):
    """delayOffset.json / GET_ALL_DELAY_OFFSET: {"offsetTable":{1:0,2:15}} keyed by delay level; 5.x adds
    "dataVersion" (None when absent: a 4.x body)."""

    offset_table: dict[int, int] = field(default_factory=dict)
    data_version: DataVersion | None = None

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {} if self.data_version is None else {"dataVersion": self.data_version.to_json_obj()}
        d["offsetTable"] = dict(sorted(self.offset_table.items()))
        return d

    def to_json(self, standard: bool = False) -> bytes:
        return fastjson.dumps(self.to_json_obj(), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> DelayOffsetSerializeWrapper:
        return cls({as_int(k): as_int(v) for k, v in (d.get("offsetTable") or {}).items()}, _data_version(d))


def _data_version(d: dict[str, Any]) -> DataVersion | None:
    """The optional 5.x "dataVersion" of an offset wrapper (RIP-32 pre-online)."""
    raw = d.get("dataVersion")
    return DataVersion.from_json_obj(raw) if isinstance(raw, dict) else None
