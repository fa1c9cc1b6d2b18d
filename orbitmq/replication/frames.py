"""HA wire frames (sans-IO): the classic RocketMQ layout extended with the master epoch.

Slave -> master: a stream of 8-byte big-endian longs, each the slave's CommitLog max phys offset (classic, §7.1);
the master keeps the last complete value.
Master -> slave: `[startPhyOffset q 8][size i 4][epoch i 4]` + `size` bytes of CommitLog data (16-byte header;
classic is 12 bytes without the epoch). size 0 = heartbeat. A slave refuses a frame whose epoch is older than
the newest epoch it has seen (a stale, deposed master). Layout and rationale: docs/design/replication.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from orbitmq.base.errors import ProtocolError

REPORT = struct.Struct(">q")
DATA_HEADER = struct.Struct(">qiI")
REPORT_SIZE = REPORT.size  # 8
DATA_HEADER_SIZE = DATA_HEADER.size  # 16
MAX_CHUNK_SIZE = 32 * 1024 * 1024  # sanity bound on a frame a peer may announce


@dataclass(slots=True)
class DataFrame:
    phys_offset: int
    epoch: int
    data: bytes  # empty = heartbeat

    @property
    def is_heartbeat(self) -> bool:
        return not self.data


def encode_report(max_offset: int) -> bytes:
    return REPORT.pack(max_offset)


def encode_data(phys_offset: int, epoch: int, data: bytes | memoryview = b"") -> bytes:
    return DATA_HEADER.pack(phys_offset, len(data), epoch) + bytes(data)


class ReportDecoder:
    """Master side: accumulate slave bytes; `feed` returns the last complete reported offset (or None)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> int | None:
        buf = self._buf + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._buf = buf[whole:]
        if whole == 0:
            return None
        offset = REPORT.unpack_from(buf, whole - REPORT_SIZE)[0]
        if offset < 0:
            raise ProtocolError(f"negative slave offset {offset}")
        return int(offset)


class DataDecoder:
    """Slave side: split the master's byte stream into DataFrames (partial frames are kept for the next feed)."""

    __slots__ = ("_buf", "_pos")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> list[DataFrame]:
        self._buf += data
        buf = self._buf
        out: list[DataFrame] = []
        pos = self._pos
        while len(buf) - pos >= DATA_HEADER_SIZE:
            phys, size, epoch = DATA_HEADER.unpack_from(buf, pos)
            if size < 0 or size > MAX_CHUNK_SIZE or phys < 0:
                raise ProtocolError(f"bad HA frame header: offset {phys} size {size}")
            end = pos + DATA_HEADER_SIZE + size
            if len(buf) < end:
                break
            out.append(DataFrame(phys, epoch, bytes(buf[pos + DATA_HEADER_SIZE : end])))
            pos = end
        if pos:
            del buf[:pos]
        self._pos = 0
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)
