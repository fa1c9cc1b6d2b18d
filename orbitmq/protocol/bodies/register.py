"""Broker registration bodies: DataVersion, TopicConfigSerializeWrapper, RegisterBrokerBody.

RegisterBrokerBody has a JSON form and a compressed form (zlib of: int-prefixed DataVersion JSON,
topic count, per topic an int-prefixed "<name> <read> <write> <perm> <filterType>" text, filter list JSON).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from orbitmq.base.errors import ProtocolError
from orbitmq.base.inflate import InflateError, inflate
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import fastjson
from orbitmq.protocol.bodies.base import JsonBody, as_int

_I32 = struct.Struct(">i")
# ceiling of an inflated compressed REGISTER_BROKER body: ~300k topic configs; a few MB of zeros must not
# become GBs of memory in the name server
MAX_INFLATED_REGISTER_BODY = 64 * 1024 * 1024


@dataclass(slots=True)
class DataVersion(JsonBody):
    timestamp: int = 0
    counter: int = 0
    state_version: int = 0  # 5.x; written only when non-zero

    def next_version(self, now_ms: int) -> None:
        self.timestamp = now_ms
        self.counter += 1

    def copy(self) -> DataVersion:
        return DataVersion(self.timestamp, self.counter, self.state_version)

    def to_json_obj(self) -> dict[str, Any]:
        d: dict[str, Any] = {"counter": self.counter}
        if self.state_version:
            d["stateVersion"] = self.state_version
        d["timestamp"] = self.timestamp
        return d

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> DataVersion:
        return cls(timestamp=as_int(d.get("timestamp")), counter=as_int(d.get("counter")),
                   state_version=as_int(d.get("stateVersion")))


@dataclass(slots=True)
class TopicConfigSerializeWrapper(JsonBody):
    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json_obj(),
            "topicConfigTable": {k: v.to_json_obj() for k, v in self.topic_config_table.items()},
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> TopicConfigSerializeWrapper:
        table = d.get("topicConfigTable") or {}
        return cls(
            topic_config_table={str(k): TopicConfig.from_json_obj({"topicName": k, **v}) for k, v in table.items()},
            data_version=DataVersion.from_json_obj(d.get("dataVersion") or {}),
        )


def topic_config_text(tc: TopicConfig) -> str:
    return f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}"


def topic_config_from_text(text: str) -> TopicConfig:
    parts = text.split(" ")
    if len(parts) < 5:
        raise ValueError(f"bad topic config text {text!r}")
    return TopicConfig(topic_name=parts[0], read_queue_nums=int(parts[1]), write_queue_nums=int(parts[2]),
                       perm=int(parts[3]), topic_filter_type=parts[4])


@dataclass(slots=True)
class RegisterBrokerBody(JsonBody):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json_obj(),
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> RegisterBrokerBody:
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper.from_json_obj(
                d.get("topicConfigSerializeWrapper") or {}),
            filter_server_list=[str(x) for x in d.get("filterServerList") or []],
        )

    def encode(self, compressed: bool = False) -> bytes:
        return self.to_compressed() if compressed else self.to_json()

    @classmethod
    def decode(cls, body: bytes | None, compressed: bool = False, version: int = 409) -> RegisterBrokerBody:
        """Request body of REGISTER_BROKER; versions < 37 (V3_0_11) sent a bare TopicConfigSerializeWrapper."""
        if not body:
            return cls()
        if compressed:
            return cls.from_compressed(body)
        if version < 37:
            return cls(topic_config_serialize_wrapper=TopicConfigSerializeWrapper.from_json(body))
        return cls.from_json(body)

    def to_compressed(self) -> bytes:
        w = self.topic_config_serialize_wrapper
        parts: list[bytes] = []
        dv = w.data_version.to_json()
        parts += [_I32.pack(len(dv)), dv, _I32.pack(len(w.topic_config_table))]
        for tc in w.topic_config_table.values():
            t = topic_config_text(tc).encode()
            parts += [_I32.pack(len(t)), t]
        fl = fastjson.dumps(list(self.filter_server_list))
        parts += [_I32.pack(len(fl)), fl]
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def from_compressed(cls, body: bytes) -> RegisterBrokerBody:
        try:
            raw = inflate(body, MAX_INFLATED_REGISTER_BODY)
            pos = 0

            def chunk() -> bytes:
                nonlocal pos
                (n,) = _I32.unpack_from(raw, pos)
                if n < 0 or pos + 4 + n > len(raw):
                    raise ValueError(f"length {n} out of range")
                pos += 4 + n
                return raw[pos - n:pos]

            dv = DataVersion.from_json(chunk())
            (count,) = _I32.unpack_from(raw, pos)
            pos += 4
            table: dict[str, TopicConfig] = {}
            for _ in range(count):
                tc = topic_config_from_text(chunk().decode())
                table[tc.topic_name] = tc
            filters = [str(x) for x in fastjson.loads(chunk()) or []] if pos < len(raw) else []
        except (InflateError, struct.error, ValueError, UnicodeDecodeError) as e:
            raise ProtocolError(f"bad compressed RegisterBrokerBody: {e}") from None
        return cls(TopicConfigSerializeWrapper(table, dv), filters)
