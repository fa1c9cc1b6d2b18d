"""Raft entry payloads of a broker group: a type byte, then the payload (docs/design/raft-group.md, On-disk mapping).
Pure functions, no I/O."""

from __future__ import annotations

import struct
import zlib

from orbitmq.base.errors import ProtocolError
from orbitmq.model.properties import decode_properties_py, encode_properties
from orbitmq.store.results import MessageInner

MESSAGES = 0x01  # a batch of messages for the CommitLog
OFFSETS = 0x02  # earlier versions: the leader's whole offset table (JSON {"topic@group": {"queueId": offset}})
TOPICS = 0x03  # the leader's topic configs (JSON list of RocketMQ TopicConfig objects), when they changed
TOPIC_DELETE = 0x04  # an admin topic deletion (JSON {"topic": name})
GROUP_CONFIG = 0x05  # an admin subscription-group create/update (JSON RocketMQ SubscriptionGroupConfig)
GROUP_DELETE = 0x06  # an admin subscription-group deletion (JSON {"group": name, "removeOffset": bool})
OFFSET_DELTA = 0x07  # commits made on the leader (JSON {"by": id, "term": t, "offsets": {"topic@group": {"q": o}}})
METADATA_PART = 0x01  # group snapshot part: topic and group configs, consumer offsets, deleted topics (JSON)
COMMAND_MIN, COMMAND_MAX = 0x10, 0x7F  # entry types other modules register (local delivery)

_COUNT = struct.Struct(">I")
_FIXED = struct.Struct(">iiiqiq")  # queue_id, flag, sys_flag, born_timestamp, reconsume_times, prepared tx offset
_LEN = struct.Struct(">I")


def _put_bytes(out: list[bytes], b: bytes) -> None:
    out.append(_LEN.pack(len(b)))
    out.append(b)


def encode_messages(msgs: list[MessageInner]) -> bytes:
    out: list[bytes] = [bytes((MESSAGES,)), _COUNT.pack(len(msgs))]
    for m in msgs:
        out.append(_FIXED.pack(m.queue_id, m.flag, m.sys_flag, m.born_timestamp, m.reconsume_times,
                               m.prepared_transaction_offset))
        _put_bytes(out, m.topic.encode("utf-8"))
        _put_bytes(out, bytes(m.body))
        _put_bytes(out, encode_properties(m.properties).encode("utf-8"))
        _put_bytes(out, m.born_host.encode("utf-8"))
        _put_bytes(out, m.store_host.encode("utf-8"))
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError(f"raft group entry truncated at byte {self.pos} (need {n} more)")
        b = self.data[self.pos:end]
        self.pos = end
        return b

    def unpack(self, st: struct.Struct) -> tuple[int, ...]:
        return st.unpack(self.take(st.size))

    def blob(self) -> bytes:
        (n,) = self.unpack(_LEN)
        return self.take(n)


def decode_messages(data: bytes) -> list[MessageInner]:
    """The messages of a MESSAGES entry (data includes the type byte); ProtocolError when malformed."""
    if not data or data[0] != MESSAGES:
        raise ProtocolError(f"not a MESSAGES entry (type {data[0] if data else None})")
    r = _Reader(data, 1)
    (count,) = r.unpack(_COUNT)
    msgs: list[MessageInner] = []
    for _ in range(count):
        queue_id, flag, sys_flag, born_ts, reconsume, prepared = r.unpack(_FIXED)
        topic = r.blob().decode("utf-8")
        body = r.blob()
        props = decode_properties_py(r.blob().decode("utf-8"))
        born_host = r.blob().decode("utf-8")
        store_host = r.blob().decode("utf-8")
        msgs.append(MessageInner(topic, queue_id, body, props, flag, sys_flag, born_ts, born_host, store_host,
                                 reconsume, prepared))
    if r.pos != len(data):
        raise ProtocolError(f"raft group entry has {len(data) - r.pos} trailing bytes")
    return msgs


def encode_command(entry_type: int, payload: bytes) -> bytes:
    check_command_type(entry_type)
    return bytes((entry_type,)) + payload


def check_command_type(entry_type: int) -> None:
    if not COMMAND_MIN <= entry_type <= COMMAND_MAX:
        raise ValueError(f"command entry type {entry_type:#x} outside {COMMAND_MIN:#x}..{COMMAND_MAX:#x}")


_SNAP = struct.Struct(">4sBQQI")  # magic, version, applied index, CommitLog end offset after it, part count
_PART = struct.Struct(">BI")  # part type, length; then the part's bytes
SNAP_MAGIC = b"ORGS"
_CHECKPOINT = struct.Struct(">4sBQQI")  # magic, version, applied index, CommitLog end, crc32 of what precedes
CHECKPOINT_MAGIC = b"ORGC"


def encode_snapshot(index: int, phys_end: int, parts: dict[int, bytes] | None = None) -> bytes:
    parts = parts or {}
    out = [_SNAP.pack(SNAP_MAGIC, 2, index, phys_end, len(parts))]
    for kind in sorted(parts):
        out.append(_PART.pack(kind, len(parts[kind])))
        out.append(parts[kind])
    return b"".join(out)


def decode_snapshot(data: bytes) -> tuple[int, int, dict[int, bytes]]:
    """(applied index, CommitLog end offset, {part type: bytes}) of a group snapshot."""
    if len(data) < _SNAP.size:
        raise ProtocolError(f"raft group snapshot of {len(data)} bytes (at least {_SNAP.size} expected)")
    magic, version, index, phys_end, count = _SNAP.unpack_from(data)
    if magic != SNAP_MAGIC or version != 2:
        raise ProtocolError(f"not a raft group snapshot (magic {magic!r}, version {version})")
    r = _Reader(data, _SNAP.size)
    parts: dict[int, bytes] = {}
    for _ in range(count):
        kind, n = r.unpack(_PART)
        parts[kind] = r.take(n)
    if r.pos != len(data):
        raise ProtocolError(f"raft group snapshot has {len(data) - r.pos} trailing bytes")
    return int(index), int(phys_end), parts


def encode_checkpoint(index: int, phys_end: int) -> bytes:
    head = _CHECKPOINT.pack(CHECKPOINT_MAGIC, 1, index, phys_end, 0)[:-4]
    return head + struct.pack(">I", zlib.crc32(head))


def decode_checkpoint(data: bytes) -> tuple[int, int] | None:
    """(applied index, CommitLog end) of an applied checkpoint file; None when torn or not one."""
    if len(data) != _CHECKPOINT.size:
        return None
    magic, version, index, phys_end, crc = _CHECKPOINT.unpack(data)
    if magic != CHECKPOINT_MAGIC or version != 1 or crc != zlib.crc32(data[:-4]):
        return None
    return int(index), int(phys_end)
