"""Timer messages, the pure part (sans-IO): property keys, delivery-time parsing, slot math, the timer-log record
format, the progress checkpoint and the crash-recovery rules (tail unwinding) of the timing wheel.

No file, clock or asyncio access here: timer_log.py owns the files, timer.py the service.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping, MutableSequence
from dataclasses import dataclass

import orjson

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_GROUP = "rmq_sys_wheel_timer_group"  # reader name used for the timer topic's ConsumeQueue

START_DELIVER_TIME = "__STARTDELIVERTIME"  # absolute ms (Aliyun/ONS, OpenMessaging)
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # absolute ms (RocketMQ 5)
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"  # relative seconds (RocketMQ 5)
TIMER_DELAY_MS = "TIMER_DELAY_MS"  # relative ms (RocketMQ 5)
TIMER_OUT_MS = "TIMER_OUT_MS"  # set on the delivered copy: the time it was due
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
# every key a client may use to ask for a timer; a frozenset so `isdisjoint(props)` is one cheap test
TIMER_KEYS = frozenset({TIMER_DELIVER_MS, START_DELIVER_TIME, TIMER_DELAY_SEC, TIMER_DELAY_MS})
# removed from the delivered copy (TIMER_OUT_MS is added instead)
TIMER_STRIP_KEYS = (*sorted(TIMER_KEYS), TIMER_ENQUEUE_MS, "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
                    "TIMER_DEL_UNIQKEY", "REAL_TOPIC", "REAL_QID")

# Timer-log record (32 bytes, big-endian):
#   0  deliver_ms   int64  when the message is due (ms since epoch)
#   8  phys_offset  int64  CommitLog offset of the rmq_sys_wheel_timer message
#  16  prev_link    int64  link of the previous record of the same slot (record index + 1; 0 = end of list)
#  24  size         int32  record size in the CommitLog
#  28  crc          uint32 crc32 of bytes 0..27 (detects a torn or garbage tail)
RECORD = struct.Struct(">qqqi")
RECORD_CRC = struct.Struct(">I")
RECORD_SIZE = 32
# Wheel slot (8 bytes, little-endian int64): link of the newest record of the slot (record index + 1; 0 = empty)
SLOT_SIZE = 8


def encode_record(deliver_ms: int, phys_offset: int, prev_link: int, size: int) -> bytes:
    head = RECORD.pack(deliver_ms, phys_offset, prev_link, size)
    return head + RECORD_CRC.pack(zlib.crc32(head))


def decode_record(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int, int, int] | None:
    """-> (deliver_ms, phys_offset, prev_link, size), or None when the record is torn / not a record."""
    if len(buf) - pos < RECORD_SIZE:
        return None
    head = bytes(buf[pos:pos + 28])
    (crc,) = RECORD_CRC.unpack_from(buf, pos + 28)
    if crc != zlib.crc32(head) or head == bytes(28):
        return None
    return RECORD.unpack(head)  # type: ignore[return-value]


def slot_of(deliver_ms: int, slot_count: int) -> int:
    """1-second slots over a horizon of slot_count seconds: slot = deliver second mod slot_count."""
    return (deliver_ms // 1000) % slot_count


def deliver_ms_of(props: Mapping[str, str], now_ms: int) -> int | None:
    """The absolute delivery time a message asks for, or None when it carries no timer key.
    Absolute keys win over relative ones. Raises ValueError for a value that is not an integer."""
    raw = props.get(TIMER_DELIVER_MS) or props.get(START_DELIVER_TIME)
    if raw is not None:
        return int(raw)
    raw = props.get(TIMER_DELAY_SEC)
    if raw is not None:
        return now_ms + int(raw) * 1000
    raw = props.get(TIMER_DELAY_MS)
    if raw is not None:
        return now_ms + int(raw)
    return None


def delivered_properties(props: Mapping[str, str], deliver_ms: int) -> tuple[str, int, dict[str, str]]:
    """(real topic, real queue id, properties of the copy put back to the real topic)."""
    topic = props["REAL_TOPIC"]
    queue_id = int(props.get("REAL_QID", "0") or 0)
    out = dict(props)
    for k in TIMER_STRIP_KEYS:
        out.pop(k, None)
    out[TIMER_OUT_MS] = str(deliver_ms)
    out["WAIT"] = "false"
    return topic, queue_id, out


@dataclass
class TimerCheckpoint:
    """Progress of the timer service (timercheck.json).

    delivered_sec: every entry due at or before this second was delivered.
    enqueue_offset: next ConsumeQueue offset of rmq_sys_wheel_timer to read into the wheel.
    log_records: timer-log length (records) covered by this checkpoint; the wheel refers to nothing beyond.
    pending_slot/pending_head: the slot walked last and its new head (revolution entries), applied on recovery
    in case the process died between writing this file and updating the wheel (-1 = none).
    """

    slot_count: int
    delivered_sec: int
    enqueue_offset: int = 0
    log_records: int = 0
    pending_slot: int = -1
    pending_head: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps({"slotCount": self.slot_count, "deliveredSec": self.delivered_sec,
                             "enqueueOffset": self.enqueue_offset, "logRecords": self.log_records,
                             "pendingSlot": self.pending_slot, "pendingHead": self.pending_head})

    @classmethod
    def from_json(cls, data: bytes) -> TimerCheckpoint:
        o = orjson.loads(data)
        return cls(int(o["slotCount"]), int(o["deliveredSec"]), int(o["enqueueOffset"]), int(o["logRecords"]),
                   int(o.get("pendingSlot", -1)), int(o.get("pendingHead", 0)))


def unwind_tail(heads: MutableSequence[int], tail: Iterable[tuple[int, int, int]], slot_count: int) -> None:
    """Undo timer-log records written after the last checkpoint: `tail` is (index, deliver_ms, prev_link) of every
    readable record past the checkpoint, oldest first. Walking them newest first, a slot whose head is a tail
    record gets that record's predecessor back; so each list ends where it ended at the checkpoint."""
    for index, deliver_ms, prev_link in reversed(list(tail)):
        slot = slot_of(deliver_ms, slot_count)
        if heads[slot] == index + 1:
            heads[slot] = prev_link


def dangling_slots(heads: Iterable[int], log_records: int) -> list[int]:
    """Slots whose head points past the checkpointed log (their tail records are gone): the wheel needs a rebuild."""
    return [s for s, h in enumerate(heads) if h > log_records]
