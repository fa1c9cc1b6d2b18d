"""Raft entry payloads of a broker group: a type byte, then the payload (docs/design/raft-group.md, On-disk mapping).
Pure functions, no I/O."""

from __future__ import annotations

import struct

from orbitmq.base.errors import ProtocolError

MESSAGES = 0x01  # earlier versions: a batch of messages applied into the CommitLog at commit (refused now)
OFFSETS = 0x02  # earlier versions: the leader's whole offset table (JSON {"topic@group": {"queueId": offset}})
TOPICS = 0x03  # the leader's topic configs (JSON list of RocketMQ TopicConfig objects), when they changed
TOPIC_DELETE = 0x04  # an admin topic deletion (JSON {"topic": name})
GROUP_CONFIG = 0x05  # an admin subscription-group create/update (JSON RocketMQ SubscriptionGroupConfig)
GROUP_DELETE = 0x06  # an admin subscription-group deletion (JSON {"group": name, "removeOffset": bool})
OFFSET_DELTA = 0x07  # commits made on the leader (JSON {"by": id, "term": t, "offsets": {"topic@group": {"q": o}}})
METADATA_PART = 0x01  # group snapshot part: topic and group configs, consumer offsets, deleted topics (JSON)
COMMAND_MIN, COMMAND_MAX = 0x10, 0x7F  # entry types other modules register (local delivery)


def encode_command(entry_type: int, payload: bytes) -> bytes:
    check_command_type(entry_type)
    return bytes((entry_type,)) + payload


def check_command_type(entry_type: int) -> None:
    if not COMMAND_MIN <= entry_type <= COMMAND_MAX:
        raise ValueError(f"command entry type {entry_type:#x} outside {COMMAND_MIN:#x}..{COMMAND_MAX:#x}")


_SNAP = struct.Struct(">4sBQQI")  # magic, version, applied index, CommitLog end offset after it, part count
_PART = struct.Struct(">BI")  # part type, length; then the part's bytes
SNAP_MAGIC = b"ORGS"


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
    return int(index), int(phys_end), dict(decode_items(data, _SNAP.size, count, "raft group snapshot"))


def decode_items(data: bytes | memoryview, pos: int, count: int, what: str) -> list[tuple[int, bytes]]:
    """`count` items (type u8, length u32, bytes) from `pos` to the end of `data` exactly; ProtocolError when the
    count cannot fit, an item is truncated or bytes trail (a hostile count allocates nothing)."""
    buf = memoryview(data)
    if count > (len(buf) - pos) // _PART.size:
        raise ProtocolError(f"{what} claims {count} items in {len(buf)} bytes")
    out: list[tuple[int, bytes]] = []
    for _ in range(count):
        if pos + _PART.size > len(buf):
            raise ProtocolError(f"{what} truncated at byte {pos}")
        kind, n = _PART.unpack_from(buf, pos)
        pos += _PART.size
        if pos + n > len(buf):
            raise ProtocolError(f"{what} truncated at byte {pos} (item of {n} bytes)")
        out.append((kind, bytes(buf[pos:pos + n])))
        pos += n
    if pos != len(buf):
        raise ProtocolError(f"{what} has {len(buf) - pos} trailing bytes")
    return out
