"""Pop checkpoints (CK) and acks kept in the revive topic, and the revive table that matches them.

Pure part (no I/O): PopCheckpoint (bitmap of popped queue offsets), extraInfo / record JSON codecs and ReviveTable
(CKs read from one revive log, acks applied to them, expiry, per-revive-queue progress). pop.py does the I/O.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
CK_TAG = "ck"
ACK_TAG = "ack"
MAX_CK_SPAN = 63  # offsets covered by one CK bitmap (bit i = start_offset + i), keeps the bitmap a JSON int64
RETRY_FLAG_NONE = 0
RETRY_FLAG_V1 = 1  # message came from %RETRY%<group>


def revive_topic(cluster_name: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster_name


CkKey = tuple[str, str, int, int, int]  # group, real topic, queue id, start offset, pop time


def bitmap_of(start_offset: int, offsets: list[int]) -> int:
    bm = 0
    for off in offsets:
        i = off - start_offset
        if not 0 <= i <= MAX_CK_SPAN:
            raise ValueError(f"offset {off} outside the CK span starting at {start_offset}")
        bm |= 1 << i
    return bm


def offsets_of(start_offset: int, bitmap: int) -> list[int]:
    out: list[int] = []
    i = 0
    while bitmap:
        if bitmap & 1:
            out.append(start_offset + i)
        bitmap >>= 1
        i += 1
    return out


def split_spans(offsets: list[int]) -> list[list[int]]:
    """Ascending offsets → groups whose span fits one CK bitmap."""
    groups: list[list[int]] = []
    for off in offsets:
        if groups and off - groups[-1][0] <= MAX_CK_SPAN:
            groups[-1].append(off)
        else:
            groups.append([off])
    return groups


@dataclass(slots=True)
class PopCheckpoint:
    group: str
    topic: str  # real topic: the normal topic or %RETRY%<group>
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    bitmap: int
    revive_qid: int
    broker_name: str = ""
    acked: int = 0  # bits acked (or already revived)
    record_offset: int = -1  # queue offset of the CK record in its revive queue

    @property
    def key(self) -> CkKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline_ms(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def done(self) -> bool:
        return self.bitmap & ~self.acked == 0

    def pending_offsets(self) -> list[int]:
        return offsets_of(self.start_offset, self.bitmap & ~self.acked)

    def ack(self, offset: int) -> bool:
        """Mark one queue offset acked; False if it is not part of this CK."""
        i = offset - self.start_offset
        if i < 0 or i > MAX_CK_SPAN or not self.bitmap >> i & 1:
            return False
        self.acked |= 1 << i
        return True

    def to_json(self) -> bytes:
        return orjson.dumps({"c": self.group, "t": self.topic, "q": self.queue_id, "so": self.start_offset,
                             "pt": self.pop_time, "it": self.invisible_time, "bm": self.bitmap,
                             "rq": self.revive_qid, "bn": self.broker_name})

    @classmethod
    def from_json(cls, data: bytes | memoryview) -> PopCheckpoint:
        d = orjson.loads(data)
        return cls(str(d["c"]), str(d["t"]), int(d["q"]), int(d["so"]), int(d["pt"]), int(d["it"]), int(d["bm"]),
                   int(d["rq"]), str(d.get("bn", "")))


def ack_json(key: CkKey, offsets: list[int]) -> bytes:
    group, topic, queue_id, start_offset, pop_time = key
    return orjson.dumps({"c": group, "t": topic, "q": queue_id, "so": start_offset, "pt": pop_time, "ao": offsets})


def parse_ack(data: bytes | memoryview) -> tuple[CkKey, list[int]]:
    d = orjson.loads(data)
    key = (str(d["c"]), str(d["t"]), int(d["q"]), int(d["so"]), int(d["pt"]))
    return key, [int(o) for o in d["ao"]]


class ExtraInfo(NamedTuple):
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry_flag: int
    broker_name: str
    queue_id: int
    queue_offset: int  # -1 when absent


def encode_extra_info(ck_offset: int, pop_time: int, invisible_time: int, revive_qid: int, retry_flag: int,
                      broker_name: str, queue_id: int, queue_offset: int) -> str:
    return f"{ck_offset} {pop_time} {invisible_time} {revive_qid} {retry_flag} {broker_name} {queue_id} {queue_offset}"


def decode_extra_info(s: str) -> ExtraInfo:
    """Parse `ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId [msgQueueOffset]`."""
    parts = s.split()
    if len(parts) < 7:
        raise ValueError(f"bad extraInfo {s!r}")
    return ExtraInfo(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4]), parts[5],
                     int(parts[6]), int(parts[7]) if len(parts) > 7 else -1)


class ReviveTable:
    """Live CKs by key and by revive queue. Records are applied in revive-log order (a CK precedes its acks)."""

    def __init__(self) -> None:
        self.cks: dict[CkKey, PopCheckpoint] = {}
        self._deadlines: list[tuple[int, CkKey]] = []  # heap; entries of resolved CKs are skipped lazily

    def __len__(self) -> int:
        return len(self.cks)

    def on_ck(self, ck: PopCheckpoint) -> None:
        if ck.key in self.cks:  # the same CK replayed (restart): keep the one with acks applied
            return
        if not ck.done:
            self.cks[ck.key] = ck
            heapq.heappush(self._deadlines, (ck.deadline_ms, ck.key))

    def on_ack(self, key: CkKey, offsets: list[int]) -> bool:
        """Apply acks; an ack for an unknown (already resolved) CK is ignored. True if the CK is now done."""
        ck = self.cks.get(key)
        if ck is None:
            return False
        for off in offsets:
            ck.ack(off)
        if ck.done:
            del self.cks[key]
            return True
        return False

    def expired(self, now_ms: int) -> list[PopCheckpoint]:
        """Live CKs whose invisible time has passed, taken off the deadline heap: a CK still live after the
        caller tried to revive it must be handed back with retry_later()."""
        out: list[PopCheckpoint] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms:
            _, key = heapq.heappop(heap)
            ck = self.cks.get(key)
            if ck is not None:
                out.append(ck)
        out.sort(key=lambda c: (c.revive_qid, c.record_offset))
        return out

    def retry_later(self, ck: PopCheckpoint) -> None:
        if ck.key in self.cks:
            heapq.heappush(self._deadlines, (ck.deadline_ms, ck.key))

    def resolve(self, ck: PopCheckpoint) -> None:
        self.cks.pop(ck.key, None)

    def progress(self, revive_qid: int, read_offset: int) -> int:
        """Where a restart must re-read revive queue `revive_qid`: the oldest live CK record, else `read_offset`."""
        return self.progress_all([read_offset if q == revive_qid else 0 for q in range(revive_qid + 1)])[revive_qid]

    def progress_all(self, read_offsets: list[int]) -> list[int]:
        """progress() of every revive queue in one pass."""
        lowest = list(read_offsets)
        n = len(lowest)
        for ck in self.cks.values():
            q = ck.revive_qid
            if 0 <= q < n and 0 <= ck.record_offset < lowest[q]:
                lowest[q] = ck.record_offset
        return lowest


def apply_record(table: ReviveTable, tags: str | None, body: bytes | memoryview, record_offset: int) -> Any:
    """Apply one revive-log record; returns the PopCheckpoint for a CK record, else None."""
    if tags == CK_TAG:
        ck = PopCheckpoint.from_json(body)
        ck.record_offset = record_offset
        table.on_ck(ck)
        return ck
    if tags == ACK_TAG:
        key, offsets = parse_ack(body)
        table.on_ack(key, offsets)
    return None
