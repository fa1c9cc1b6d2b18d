"""Binary wire codec of Raft messages and of message batches (big-endian struct, length-prefixed fields).

Owns only bytes <-> Message. Decoding never trusts a length or a count: every read is bounds-checked and any
malformed input raises ProtocolError (never IndexError, struct.error, UnicodeError or MemoryError). No I/O here.
Layout tables: docs/design/raft-storage.md ("Wire codec").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from orbitmq.base.errors import ProtocolError
from orbitmq.raft.messages import Entry, Message, MsgType, Snapshot

VERSION = 1
_FLAG_REJECT = 0x01
_FLAG_SNAPSHOT = 0x02
_KNOWN_FLAGS = _FLAG_REJECT | _FLAG_SNAPSHOT
_MSG_TYPES = frozenset(int(t) for t in MsgType)

# version u8, type u8, flags u8, term, log_index, log_term, commit, index, context (u64 each)
_HEAD = struct.Struct(">BBBQQQQQQ")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ENTRY_HEAD = struct.Struct(">QQI")  # term, index, data length
_SNAP_HEAD = struct.Struct(">QQI")   # index, term, data length
_BATCH_HEAD = struct.Struct(">BI")   # version, message count
MAX_ID_BYTES = 0xFFFF
MAX_DATA_BYTES = 0xFFFFFFFF


class _Reader:
    """A cursor over a bytes-like buffer whose every read is checked against the end."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.end - self.pos:
            raise ProtocolError(f"raft codec: truncated {what} at byte {self.pos} (need {n}, have {self.remaining})")

    def unpack(self, st: struct.Struct, what: str) -> tuple[int, ...]:
        self.need(st.size, what)
        out = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return out

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def text(self, what: str) -> str:
        (n,) = self.unpack(_U16, what)
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"raft codec: {what} is not UTF-8") from None


def _id_bytes(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > MAX_ID_BYTES:
        raise ValueError(f"raft codec: {what} longer than {MAX_ID_BYTES} bytes")
    return raw


def _data_len(data: bytes, what: str) -> int:
    if len(data) > MAX_DATA_BYTES:
        raise ValueError(f"raft codec: {what} longer than {MAX_DATA_BYTES} bytes")
    return len(data)


def encode_message(m: Message) -> bytes:
    """One message; ValueError for values the format cannot carry (negative or > u64 numbers, huge ids)."""
    flags = (_FLAG_REJECT if m.reject else 0) | (_FLAG_SNAPSHOT if m.snapshot is not None else 0)
    try:
        parts = [_HEAD.pack(VERSION, int(m.type), flags, m.term, m.log_index, m.log_term, m.commit, m.index,
                            m.context)]
        for value, what in ((m.src, "src"), (m.dst, "dst")):
            raw = _id_bytes(value, what)
            parts.append(_U16.pack(len(raw)))
            parts.append(raw)
        parts.append(_U32.pack(len(m.entries)))
        for e in m.entries:
            parts.append(_ENTRY_HEAD.pack(e.term, e.index, _data_len(e.data, "entry data")))
            parts.append(e.data)
        if m.snapshot is not None:
            s = m.snapshot
            parts.append(_SNAP_HEAD.pack(s.index, s.term, _data_len(s.data, "snapshot data")))
            parts.append(s.data)
    except struct.error as e:
        raise ValueError(f"raft codec: cannot encode {m.type!r}: {e}") from None
    return b"".join(parts)


def _read_message(r: _Reader) -> Message:
    version, mtype, flags, term, log_index, log_term, commit, index, context = r.unpack(_HEAD, "message header")
    if version != VERSION:
        raise ProtocolError(f"raft codec: unknown message version {version}")
    if mtype not in _MSG_TYPES:
        raise ProtocolError(f"raft codec: unknown message type {mtype}")
    if flags & ~_KNOWN_FLAGS:
        raise ProtocolError(f"raft codec: unknown flags 0x{flags:02x}")
    src = r.text("src")
    dst = r.text("dst")
    (count,) = r.unpack(_U32, "entry count")
    if count * _ENTRY_HEAD.size > r.remaining:  # refuse before allocating anything for a hostile count
        raise ProtocolError(f"raft codec: entry count {count} exceeds the {r.remaining} bytes left")
    entries = []
    for _ in range(count):
        e_term, e_index, n = r.unpack(_ENTRY_HEAD, "entry header")
        entries.append(Entry(e_term, e_index, r.take(n, "entry data")))
    snapshot = None
    if flags & _FLAG_SNAPSHOT:
        s_index, s_term, n = r.unpack(_SNAP_HEAD, "snapshot header")
        snapshot = Snapshot(s_index, s_term, r.take(n, "snapshot data"))
    return Message(MsgType(mtype), src, dst, term, log_index=log_index, log_term=log_term, commit=commit,
                   entries=tuple(entries), index=index, reject=bool(flags & _FLAG_REJECT), context=context,
                   snapshot=snapshot)


def decode_message(buf: bytes | bytearray | memoryview) -> Message:
    r = _Reader(buf)
    m = _read_message(r)
    if r.remaining:
        raise ProtocolError(f"raft codec: {r.remaining} trailing bytes after a message")
    return m


def encode_batch_parts(parts: Iterable[bytes]) -> bytes:
    """A batch from messages already encoded with encode_message (the transport encodes at send time)."""
    items = list(parts)
    out = [_BATCH_HEAD.pack(VERSION, len(items))]
    for p in items:
        out.append(_U32.pack(len(p)))
        out.append(p)
    return b"".join(out)


def encode_batch(messages: Iterable[Message]) -> bytes:
    return encode_batch_parts(encode_message(m) for m in messages)


def decode_batch(buf: bytes | bytearray | memoryview) -> list[Message]:
    r = _Reader(buf)
    version, count = r.unpack(_BATCH_HEAD, "batch header")
    if version != VERSION:
        raise ProtocolError(f"raft codec: unknown batch version {version}")
    if count * _U32.size > r.remaining:
        raise ProtocolError(f"raft codec: message count {count} exceeds the {r.remaining} bytes left")
    out = []
    for _ in range(count):
        (n,) = r.unpack(_U32, "message length")
        r.need(n, "message")
        inner = _Reader(r.buf, r.pos, r.pos + n)
        out.append(_read_message(inner))
        if inner.remaining:
            raise ProtocolError(f"raft codec: {inner.remaining} trailing bytes inside a batched message")
        r.pos += n
    if r.remaining:
        raise ProtocolError(f"raft codec: {r.remaining} trailing bytes after a batch")
    return out


__all__ = ["ProtocolError", "decode_batch", "decode_message", "encode_batch", "encode_batch_parts",
           "encode_message"]
