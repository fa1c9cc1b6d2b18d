"""The stored-message record layout (CommitLog record = pull/query/view body element), v1 magic.

 off  size  field
   0     4  TOTALSIZE         int, whole record
   4     4  MAGICCODE         0xDAA320A7
   8     4  BODYCRC           zlib crc32(body) & 0x7FFFFFFF
  12     4  QUEUEID
  16     4  FLAG
  20     8  QUEUEOFFSET       patched by the store at append
  28     8  PHYSICALOFFSET    patched by the store at append
  36     4  SYSFLAG           bit 0x10: born host IPv6, 0x20: store host IPv6
  40     8  BORNTIMESTAMP
  48   8|20 BORNHOST          address + int port
   s     8  STORETIMESTAMP    patched by the store at append (s = 56 or 68)
 s+8 8|20  STOREHOST
   .     4  RECONSUMETIMES
   .     8  PREPARED TRANSACTION OFFSET
   .   4+n  BODY              int length + bytes
   .   1+t  TOPIC             signed byte length + UTF-8
   .   2+p  PROPERTIES        short length + UTF-8
Pure functions only: no I/O.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Protocol

from orbitmq.base.errors import CorruptionError
from orbitmq.base.native import speedups
from orbitmq.model.message import MessageExt
from orbitmq.model.properties import decode_properties

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB (5.x, 2-byte topic length)
BLANK_MAGIC = -875286124  # 0xCBD43194
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
_NOT_V6 = ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)

POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_FLAG = 16
POS_QUEUE_OFFSET = 20
POS_PHYS_OFFSET = 28
POS_SYS_FLAG = 36
POS_BORN_TIMESTAMP = 40
POS_BORN_HOST = 48

_HEAD = struct.Struct(">iiiiiqqiq")  # 48 bytes: size..born timestamp
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_TAIL = struct.Struct(">iqi")  # reconsume times, prepared tx offset, body length
_HOST4 = struct.Struct(">4si")
_HOST6 = struct.Struct(">16si")
_SIZE_MAGIC = struct.Struct(">ii")

assert _HEAD.size == 48 and _TAIL.size == 16


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def pack_host(host: str, port: int) -> bytes:
    """4-byte (IPv4) or 16-byte (IPv6) address followed by an int port."""
    addr = ipaddress.ip_address(host.strip("[]")).packed
    return addr + _I.pack(port)


def pack_host_port(host_port: str) -> bytes:
    host, _, port = host_port.rpartition(":")
    return pack_host(host, int(port))


_HOST_TEXT: dict[bytes, str] = {}  # raw address+port -> "ip:port" (a broker sees few distinct hosts)
_HOST_TEXT_MAX = 4096


def unpack_host(raw: bytes | memoryview) -> str:
    key = bytes(raw)
    text = _HOST_TEXT.get(key)
    if text is None:
        text = _unpack_host(key)
        if len(_HOST_TEXT) >= _HOST_TEXT_MAX:
            _HOST_TEXT.clear()
        _HOST_TEXT[key] = text
    return text


def _unpack_host(raw: bytes) -> str:
    if len(raw) == 8:
        return f"{ipaddress.IPv4Address(bytes(raw[:4]))}:{_I.unpack_from(raw, 4)[0]}"
    return f"[{ipaddress.IPv6Address(bytes(raw[:16]))}]:{_I.unpack_from(raw, 16)[0]}"


def record_size(body_len: int, topic_len: int, props_len: int, born_host_len: int = 8, store_host_len: int = 8) -> int:
    return 48 + born_host_len + 8 + store_host_len + 16 + body_len + 1 + topic_len + 2 + props_len


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_host: bytes,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    phys_offset: int = 0,
    store_timestamp: int = 0,
    crc: int | None = None,
) -> bytes:
    """Encode one record; `topic`/`properties` are UTF-8 bytes, hosts come from pack_host()."""
    if len(topic) > 127:
        raise ValueError("topic longer than 127 bytes")
    if len(properties) > 32767:
        raise ValueError("properties longer than 32767 bytes")
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    if len(born_host) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store_host) == 20:
        sys_flag |= STOREHOST_V6_FLAG
    total = record_size(len(body), len(topic), len(properties), len(born_host), len(store_host))
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_V1,
                body_crc(body) if crc is None else crc,
                queue_id,
                flag,
                queue_offset,
                phys_offset,
                sys_flag,
                born_timestamp,
            ),
            born_host,
            _Q.pack(store_timestamp),
            store_host,
            _TAIL.pack(reconsume_times, prepared_transaction_offset, len(body)),
            body,
            bytes((len(topic),)),
            topic,
            _H.pack(len(properties)),
            properties,
        )
    )


def encode_record_into_py(
    buf: bytearray | memoryview,
    pos: int,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    queue_offset: int,
    phys_offset: int,
    store_timestamp: int,
    crc: int | None,
) -> int:
    """Write the record encode_record() builds at buf[pos:] (the CommitLog append: every field final, CRC of
    the body when `crc` is None); returns its size. ValueError if it does not fit (the buffer is never resized).
    Pure-Python twin of the native encode_record_into (positional arguments, same order)."""
    rec = encode_record(
        topic=topic, body=body, properties=properties, queue_id=queue_id, flag=flag, sys_flag=sys_flag,
        born_timestamp=born_timestamp, born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset, queue_offset=queue_offset,
        phys_offset=phys_offset, store_timestamp=store_timestamp, crc=crc,
    )
    n = len(rec)
    if pos < 0 or pos > len(buf) or n > len(buf) - pos:
        raise ValueError(f"record of {n} bytes does not fit the buffer at {pos}")
    buf[pos : pos + n] = rec
    return n


class RunMessage(Protocol):
    """The fields encode_run_into reads from each message (the store's MessageInner has them)."""

    body: bytes
    flag: int
    sys_flag: int
    born_timestamp: int
    reconsume_times: int
    prepared_transaction_offset: int


def encode_run_into_py(
    buf: bytearray | memoryview,
    pos: int,
    topic: bytes,
    born_host: bytes,
    store_host: bytes,
    queue_id: int,
    queue_offset: int,
    seg_base: int,
    store_timestamp: int,
    msgs: Sequence[RunMessage],
    props_list: Sequence[bytes],
    id_prefix: str,
) -> list[str]:
    """The records of a one-queue run (one topic, queue and host pair; `props_list` the messages' encoded
    properties) written back to back from buf[pos:] by encode_record_into, with consecutive queue offsets from
    queue_offset and phys offset seg_base + position; returns their msg ids (id_prefix + phys as 16 upper-case
    hex digits). An error leaves the records before the failing one written. Pure-Python twin of the native
    encode_run_into (positional arguments, same order)."""
    if len(msgs) != len(props_list):
        raise ValueError("msgs and props_list differ in length")
    ids: list[str] = []
    for m, props in zip(msgs, props_list, strict=True):
        phys = seg_base + pos
        pos += encode_record_into_py(
            buf, pos, topic, m.body, props, queue_id, m.flag, m.sys_flag & _NOT_V6, m.born_timestamp, born_host,
            store_host, m.reconsume_times, m.prepared_transaction_offset, queue_offset, phys, store_timestamp, None,
        )
        ids.append(f"{id_prefix}{phys:016X}")
        queue_offset += 1
    return ids


def store_timestamp_position(sys_flag: int) -> int:
    return POS_BORN_HOST + (20 if sys_flag & BORNHOST_V6_FLAG else 8)


def patch_record(buf: bytearray | memoryview, pos: int, queue_offset: int, phys_offset: int, store_timestamp: int) -> None:
    """Fill in the fields the store assigns at append time."""
    _Q.pack_into(buf, pos + POS_QUEUE_OFFSET, queue_offset)
    _Q.pack_into(buf, pos + POS_PHYS_OFFSET, phys_offset)
    sys_flag = _I.unpack_from(buf, pos + POS_SYS_FLAG)[0]
    _Q.pack_into(buf, pos + store_timestamp_position(sys_flag), store_timestamp)


def read_size_magic(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    return _SIZE_MAGIC.unpack_from(buf, pos)


# The common record: IPv4 born and store hosts. Head, both hosts, store timestamp and the tail in one unpack.
_HEAD_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")
assert _HEAD_V4.size == 88
_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
_host_text = _HOST_TEXT.get


def decode_record_py(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> MessageExt:
    """Decode the record at `pos`. Raises CorruptionError if it is not a well-formed record (pure Python)."""
    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts, born_raw, store_ts,
         store_raw, reconsume, prepared, body_len) = _HEAD_V4.unpack_from(buf, pos)
    except struct.error:
        pass  # shorter than a v4 header: the general path reports why
    else:
        # fast path (same checks, same result as the general path below): V1 magic, IPv4 hosts
        if magic == MAGIC_V1 and not sys_flag & _V6_FLAGS and total >= 48 and pos + total <= len(buf):
            p = pos + 88
            end = pos + total
            if 0 <= body_len and p + body_len + 3 <= end:
                body = bytes(buf[p : p + body_len])
                p += body_len
                topic_len = buf[p]
                p += 1
                if topic_len <= 127 and p + topic_len + 2 <= end:
                    try:
                        topic = str(buf[p : p + topic_len], "utf-8")
                        p += topic_len
                        props_len = _H.unpack_from(buf, p)[0]
                        p += 2
                        if props_len >= 0 and p + props_len == end:
                            props = decode_properties(str(buf[p:end], "utf-8")) if props_len else {}
                            if check_crc and body_crc(body) != crc:
                                raise CorruptionError("record", pos, "body CRC mismatch")
                            return MessageExt(
                                topic, body, props, flag, queue_id, queue_offset, phys_offset, sys_flag, born_ts,
                                _host_text(born_raw) or unpack_host(born_raw), store_ts,
                                _host_text(store_raw) or unpack_host(store_raw), reconsume, prepared, crc, total,
                            )
                    except UnicodeDecodeError:
                        pass  # the general path raises the CorruptionError
    return _decode_record_general(buf, pos, check_crc)


def decode_record_native(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> MessageExt:
    """decode_record_py with the common case (V1, IPv4 hosts already memoized, well-formed) decoded in C; anything
    else, including every error, goes through the Python decoder."""
    msg = _decode_v4(buf, pos, check_crc, MessageExt, _HOST_TEXT)
    return decode_record_py(buf, pos, check_crc=check_crc) if msg is None else msg


def _decode_record_general(buf: bytes | bytearray | memoryview, pos: int, check_crc: bool) -> MessageExt:
    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts) = _HEAD.unpack_from(buf, pos)
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise CorruptionError("record", pos, f"bad magic code {magic & 0xFFFFFFFF:#x}")
        if total < 48 or pos + total > len(buf):
            raise CorruptionError("record", pos, f"bad total size {total}")
        p = pos + 48
        if sys_flag & BORNHOST_V6_FLAG:
            born_host = unpack_host(buf[p : p + 20])
            p += 20
        else:
            born_host = unpack_host(buf[p : p + 8])
            p += 8
        store_ts = _Q.unpack_from(buf, p)[0]
        p += 8
        if sys_flag & STOREHOST_V6_FLAG:
            store_host = unpack_host(buf[p : p + 20])
            p += 20
        else:
            store_host = unpack_host(buf[p : p + 8])
            p += 8
        reconsume, prepared, body_len = _TAIL.unpack_from(buf, p)
        p += 16
        if body_len < 0 or p + body_len > pos + total:
            raise CorruptionError("record", pos, f"bad body length {body_len}")
        body = bytes(buf[p : p + body_len])
        p += body_len
        if magic == MAGIC_V1:
            topic_len = buf[p]
            if topic_len > 127:
                raise CorruptionError("record", pos, "bad topic length")
            p += 1
        else:
            topic_len = _H.unpack_from(buf, p)[0]
            p += 2
        topic = bytes(buf[p : p + topic_len]).decode("utf-8")
        p += topic_len
        props_len = _H.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len != pos + total:
            raise CorruptionError("record", pos, "size fields disagree with total size")
        props = decode_properties(bytes(buf[p : p + props_len]).decode("utf-8")) if props_len else {}
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, CorruptionError):
            raise
        raise CorruptionError("record", pos, f"undecodable record: {e}") from e
    if check_crc and body_crc(body) != crc:
        raise CorruptionError("record", pos, "body CRC mismatch")
    return MessageExt(
        topic=topic,
        body=body,
        properties=props,
        flag=flag,
        queue_id=queue_id,
        queue_offset=queue_offset,
        phys_offset=phys_offset,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
        store_size=total,
    )


def iter_records_py(buf: bytes | bytearray | memoryview) -> Iterator[MessageExt]:
    """Decode concatenated records (a pull or query response body). Pure-Python twin."""
    pos = 0
    end = len(buf)
    while pos + 8 <= end:
        msg = decode_record(buf, pos)
        pos += msg.store_size
        yield msg


def iter_records_native(buf: bytes | bytearray | memoryview) -> Iterator[MessageExt]:
    """iter_records_py with runs of common records decoded in one native call; any other record (and every error)
    goes through the Python decoder, in the same order."""
    pos = 0
    end = len(buf)
    while pos + 8 <= end:
        msgs, pos = _decode_many(buf, pos, MessageExt, _HOST_TEXT)
        yield from msgs
        if pos + 8 <= end:
            msg = decode_record_py(buf, pos)
            pos += msg.store_size
            yield msg


_native = speedups()
if _native is None:
    encode_record_into = encode_record_into_py
    encode_run_into = encode_run_into_py
    decode_record = decode_record_py
    iter_records = iter_records_py
else:
    encode_record_into = _native.encode_record_into
    encode_run_into = _native.encode_run_into
    _decode_v4 = _native.decode_record_v4
    _decode_many = _native.decode_records_v4
    decode_record = decode_record_native
    iter_records = iter_records_native


def read_properties_text(buf: bytes | bytearray | memoryview, pos: int = 0) -> str:
    """Just the PROPERTIES string of the record at `pos` (skips the body without copying it); for filters that
    look at properties only. Raises ValueError if the record is malformed."""
    try:
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        sys_flag = _I.unpack_from(buf, pos + POS_SYS_FLAG)[0]
        p = pos + POS_BORN_HOST + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
        p += (20 if sys_flag & STOREHOST_V6_FLAG else 8) + 12
        p += 4 + _I.unpack_from(buf, p)[0]
        if magic == MAGIC_V1:
            p += 1 + buf[p]
        else:
            p += 2 + _H.unpack_from(buf, p)[0]
        props_len = _H.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len != pos + total or pos + total > len(buf):
            raise ValueError(f"record at {pos}: size fields disagree with total size")
        return str(buf[p : p + props_len], "utf-8") if props_len else ""
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"record at {pos}: {e}") from e
