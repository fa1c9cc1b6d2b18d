"""HEART_BEAT body: HeartbeatData with ProducerData, ConsumerData and SubscriptionData.

Accepts the C++ client's forms: enum ordinals for consumeType/messageModel/consumeFromWhere, subVersion
as a string, and a garbage codeSet (codes are always rebuilt from subString for TAG subscriptions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbitmq.model.tags import java_hash, tags_of_expression
from orbitmq.protocol.bodies.base import JsonBody, as_bool, as_int, enum_name

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
SUB_ALL = "*"


@dataclass(slots=True)
class SubscriptionData(JsonBody):
    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def of_expression(cls, topic: str, expression: str | None, sub_version: int = 0,
                      expression_type: str = "TAG") -> SubscriptionData:
        """Build like Java FilterAPI: '*' or empty -> all; 'A || B' -> tags and their hash codes."""
        sd = cls(topic=topic, sub_string=(expression or "").strip() or SUB_ALL, sub_version=sub_version,
                 expression_type=expression_type or "TAG")
        sd.rebuild_codes()
        return sd

    def rebuild_codes(self) -> None:
        if self.expression_type != "TAG":
            return
        tags = tags_of_expression(self.sub_string)
        if tags is None:
            self.sub_string = SUB_ALL
            self.tags_set = []
            self.code_set = []
        else:
            self.tags_set = sorted(tags)
            self.code_set = [java_hash(t) for t in self.tags_set]

    @property
    def is_all(self) -> bool:
        return self.expression_type == "TAG" and (self.sub_string or SUB_ALL).strip() == SUB_ALL

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> SubscriptionData:
        sd = cls(
            topic=str(d["topic"]),
            sub_string=str(d.get("subString") or SUB_ALL),
            tags_set=[str(t) for t in d.get("tagsSet") or []],
            code_set=[],
            sub_version=as_int(d.get("subVersion")),
            expression_type=str(d.get("expressionType") or "TAG"),
            class_filter_mode=as_bool(d.get("classFilterMode")),
        )
        if sd.expression_type == "TAG":
            sd.rebuild_codes()
        return sd


@dataclass(slots=True)
class ConsumerData(JsonBody):
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_json_obj() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ConsumerData:
        return cls(
            group_name=str(d["groupName"]),
            consume_type=enum_name(d.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=enum_name(d.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=enum_name(d.get("consumeFromWhere"), CONSUME_FROM_WHERE,
                                         "CONSUME_FROM_LAST_OFFSET"),
            subscription_data_set=[SubscriptionData.from_json_obj(s)
                                   for s in d.get("subscriptionDataSet") or []],
            unit_mode=as_bool(d.get("unitMode")),
        )


@dataclass(slots=True)
class ProducerData(JsonBody):
    group_name: str

    def to_json_obj(self) -> dict[str, Any]:
        return {"groupName": self.group_name}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ProducerData:
        return cls(group_name=str(d["groupName"]))


@dataclass(slots=True)
class HeartbeatData(JsonBody):
    client_id: str
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [c.to_json_obj() for c in self.consumer_data_set],
            "producerDataSet": [p.to_json_obj() for p in self.producer_data_set],
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> HeartbeatData:
        return cls(
            client_id=str(d.get("clientID") or d.get("clientId") or ""),
            producer_data_set=[ProducerData.from_json_obj(p) for p in d.get("producerDataSet") or []],
            consumer_data_set=[ConsumerData.from_json_obj(c) for c in d.get("consumerDataSet") or []],
        )
