"""TopicConfig and MessageQueue with their RocketMQ JSON shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orbitmq.model.enums import Perm, TopicFilterType


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = Perm.READ | Perm.WRITE
    topic_filter_type: str = TopicFilterType.SINGLE_TAG.value
    topic_sys_flag: int = 0
    order: bool = False

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=d["topicName"],
            read_queue_nums=int(d.get("readQueueNums", 16)),
            write_queue_nums=int(d.get("writeQueueNums", 16)),
            perm=int(d.get("perm", 6)),
            topic_filter_type=str(d.get("topicFilterType") or "SINGLE_TAG"),
            topic_sys_flag=int(d.get("topicSysFlag", d.get("topicSynFlag", 0)) or 0),
            order=bool(d.get("order", False)),
        )

    @property
    def readable(self) -> bool:
        return bool(self.perm & Perm.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Perm.WRITE)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json_obj(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> MessageQueue:
        return cls(topic=d["topic"], broker_name=d["brokerName"], queue_id=int(d["queueId"]))
