"""Recovery decisions, sans-IO: record validation and the decision table (abort × checkpoint × tail → action).

The table is a literal dict over every combination so tests can enumerate it; message_store.py executes the
chosen action (scan start, re-dispatch start, truncate or refuse). No file access here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from orbitmq.store.layout import BLANK_MAGIC, MAGIC_V1, MAGIC_V2

_HEAD = struct.Struct(">iiiiiqqi")  # total, magic, crc, queue id, flag, queue offset, phys offset, sys flag
_I = struct.Struct(">i")
_H = struct.Struct(">h")


class RecordKind(Enum):
    RECORD = "record"  # a well-formed record
    BLANK = "blank"  # end-of-file filler: continue in the next segment
    END = "end"  # zero header: nothing written here
    INVALID = "invalid"  # bytes that are not a record (torn write, bit flip, garbage)


def check_record(
    buf: memoryview | bytes | bytearray, position: int, expect_phys: int, check_crc: bool
) -> tuple[RecordKind, int]:
    """Classify the bytes at `position`; returns (kind, size). `expect_phys` is the record's own phys offset.

    A record must have a known magic, a total size that fits and agrees with its length fields, the phys offset
    field equal to where it lies (this also rejects stale records left by an earlier truncation), and (when
    asked) a body CRC that matches.
    """
    limit = len(buf)
    if position + 8 > limit:
        return RecordKind.END, 0
    total, magic = struct.unpack_from(">ii", buf, position)
    if magic == BLANK_MAGIC:
        return (RecordKind.BLANK, total) if total == limit - position else (RecordKind.INVALID, 0)
    if total == 0 and magic == 0:
        return RecordKind.END, 0
    if magic not in (MAGIC_V1, MAGIC_V2) or total < 91 or position + total > limit:
        return RecordKind.INVALID, 0
    _t, _m, crc, _qid, _flag, _qoff, phys, sys_flag = _HEAD.unpack_from(buf, position)
    if phys != expect_phys:
        return RecordKind.INVALID, 0
    p = position + 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
    body_len = _I.unpack_from(buf, p)[0]
    p += 4
    if body_len < 0 or p + body_len + 3 > position + total:
        return RecordKind.INVALID, 0
    body_start = p
    p += body_len
    if magic == MAGIC_V1:
        topic_len = buf[p]
        if topic_len > 127:
            return RecordKind.INVALID, 0
        p += 1
    else:
        topic_len = _H.unpack_from(buf, p)[0]
        p += 2
    p += topic_len
    if topic_len <= 0 or p + 2 > position + total:
        return RecordKind.INVALID, 0
    props_len = _H.unpack_from(buf, p)[0]
    if props_len < 0 or p + 2 + props_len != position + total:
        return RecordKind.INVALID, 0
    if check_crc and zlib.crc32(buf[body_start : body_start + body_len]) & 0x7FFFFFFF != crc:
        return RecordKind.INVALID, 0
    return RecordKind.RECORD, total


class CheckpointState(Enum):
    VALID = "valid"
    MISSING = "missing"
    CORRUPT = "corrupt"


class TailState(Enum):
    CLEAN = "clean"  # the scan ended at never-written (zero) bytes or the end of the last segment
    TORN = "torn"  # the scan ended at an invalid record, and no valid record follows below the flushed offset
    CORRUPT_MIDDLE = "corrupt_middle"  # invalid bytes below the flushed offset with a valid record after them


class ScanStart(Enum):
    THIRD_LAST_FILE = "third_last_file"  # clean shutdown: everything was flushed; check the recent files
    CHECKPOINT_FILE = "checkpoint_file"  # crash: last file whose first record is older than the checkpoint
    FIRST_FILE = "first_file"  # no trustworthy checkpoint: validate everything


class RedispatchFrom(Enum):
    CQ_END = "cq_end"  # largest phys end referenced by ConsumeQueues (derived stores were flushed)
    SCAN_START = "scan_start"  # min(scan start, CQ end): derived stores may lag the checkpoint


class TailAction(Enum):
    ACCEPT = "accept"
    TRUNCATE = "truncate"  # drop everything after the last valid record, zero the rest of its file
    REFUSE = "refuse"  # CorruptionError: acknowledged (flushed) data is damaged and later data exists


@dataclass(frozen=True, slots=True)
class Decision:
    scan_start: ScanStart
    redispatch_from: RedispatchFrom
    tail_action: TailAction
    mark: str


def scan_start(abort_present: bool, checkpoint: CheckpointState) -> ScanStart:
    if checkpoint is not CheckpointState.VALID:
        return ScanStart.FIRST_FILE
    return ScanStart.CHECKPOINT_FILE if abort_present else ScanStart.THIRD_LAST_FILE


def _row(abort: bool, cp: CheckpointState, tail: TailState) -> Decision:
    start = scan_start(abort, cp)
    redispatch = RedispatchFrom.CQ_END if start is ScanStart.THIRD_LAST_FILE else RedispatchFrom.SCAN_START
    exit_name = "crash" if abort else "clean exit"
    if tail is TailState.CLEAN:
        return Decision(start, redispatch, TailAction.ACCEPT, f"recover {exit_name} {cp.value} clean tail")
    if tail is TailState.TORN:
        return Decision(start, redispatch, TailAction.TRUNCATE, f"recover {exit_name} {cp.value} truncate torn tail")
    # Corruption below the flushed offset with valid data after it: truncating would silently drop acknowledged
    # messages, so refuse and let the operator decide (restore a replica, or move the damaged file away).
    return Decision(start, redispatch, TailAction.REFUSE, f"recover {exit_name} {cp.value} refuse corrupt middle")


DECISION_TABLE: dict[tuple[bool, CheckpointState, TailState], Decision] = {
    (abort, cp, tail): _row(abort, cp, tail) for abort in (False, True) for cp in CheckpointState for tail in TailState
}


def decide(abort_present: bool, checkpoint: CheckpointState, tail: TailState) -> Decision:
    return DECISION_TABLE[(abort_present, checkpoint, tail)]


def classify_tail(stop_kind: RecordKind, stop_offset: int, flushed_offset: int, later_valid: bool) -> TailState:
    """Tail state from where the forward scan stopped. `later_valid`: a valid record exists in
    (stop_offset, flushed_offset) — only meaningful when stop_offset < flushed_offset."""
    if stop_offset < flushed_offset and later_valid:
        return TailState.CORRUPT_MIDDLE
    if stop_kind is RecordKind.INVALID:
        return TailState.TORN
    return TailState.CLEAN if not later_valid else TailState.TORN


def choose_checkpoint_file(first_record_times: list[int | None], min_timestamp: int) -> int:
    """Index of the last segment whose first record's store time is <= min_timestamp (0 if none).

    `first_record_times[i]` is None when segment i does not start with a valid v1 record.
    """
    for i in range(len(first_record_times) - 1, -1, -1):
        ts = first_record_times[i]
        if ts is not None and ts <= min_timestamp:
            return i
    return 0


def validate_forward(
    segments: Sequence[tuple[int, memoryview | bytes | bytearray]],
    start_index: int,
    start_pos: int,
    check_crc: bool,
    on_progress: Callable[[int], None] | None = None,
    progress_step: int = 8 << 20,
) -> tuple[RecordKind, int]:
    """Validate records forward from segment `start_index` at `start_pos` (a record boundary) over
    `segments` ((start phys offset, bytes) in order); returns (why it stopped, stop phys offset).

    BLANK moves to the next segment; the scan stops at END, INVALID or past the last segment (END).
    `on_progress(phys)` is called about every `progress_step` bytes with the phys offset reached.
    """
    if not segments:
        return RecordKind.END, 0
    i = start_index
    start, buf = segments[i]
    size = len(buf)
    pos = start_pos
    report = pos + progress_step
    while True:
        kind, n = check_record(buf, pos, start + pos, check_crc)
        if kind is RecordKind.RECORD:
            pos += n
            if pos < size:
                if pos >= report and on_progress is not None:
                    on_progress(start + pos)
                    report = pos + progress_step
                continue
        elif kind is not RecordKind.BLANK:
            return kind, start + pos
        i += 1
        if i >= len(segments):
            return RecordKind.END, start + size
        start, buf = segments[i]
        size = len(buf)
        pos = 0
        report = progress_step
        if on_progress is not None:
            on_progress(start)


class RecoveryProgress:
    """Where a store load is (read by the broker's runtime info from another thread; written by the loader).

    `phase`: open → consumequeue → index → validate → redispatch → done; `scanned`/`total` are the bytes of the
    current byte-ranged phase (validate: CommitLog bytes CRC-checked; redispatch: CommitLog bytes re-dispatched);
    `validated`/`redispatched` what those phases covered once they ended.
    `report` logs a line at most every `log_interval_s` (via `log_fn`), so a long recovery is visible in the log.
    """

    __slots__ = ("phase", "scanned", "total", "started", "finished", "validated", "redispatched", "log_interval_s",
                 "phase_seconds", "_phase_started", "_last_log", "_clock", "_log_fn")

    def __init__(self, clock: Callable[[], float], log_fn: Callable[[str], None] | None = None,
                 log_interval_s: float = 5.0) -> None:
        self.phase = "idle"
        self.scanned = 0
        self.total = 0
        self.started = 0.0
        self.finished = 0.0
        self.validated = 0  # CommitLog bytes the validation covered (set when it ends)
        self.redispatched = 0  # CommitLog bytes re-dispatched (set when it ends)
        self.phase_seconds: dict[str, float] = {}  # time spent in each phase so far
        self._phase_started = 0.0
        self.log_interval_s = log_interval_s
        self._clock = clock
        self._log_fn = log_fn
        self._last_log = 0.0

    def begin(self) -> None:
        self.started = self._last_log = self._phase_started = self._clock()
        self.finished = 0.0
        self.phase_seconds = {}
        self.set_phase("open")

    def set_phase(self, phase: str, total: int = 0) -> None:
        now = self._clock()
        if self.started and self.phase not in ("idle", "done"):
            self.phase_seconds[self.phase] = self.phase_seconds.get(self.phase, 0.0) + now - self._phase_started
        self._phase_started = now
        self.phase = phase
        self.scanned = 0
        self.total = max(0, total)

    def advance(self, scanned: int) -> None:
        self.scanned = scanned
        if scanned > self.total:
            self.total = scanned
        now = self._clock()
        if self._log_fn is not None and now - self._last_log >= self.log_interval_s:
            self._last_log = now
            self._log_fn(self.describe())

    def done(self) -> None:
        self.finished = self._clock()
        self.set_phase("done")

    def elapsed_ms(self) -> int:
        if not self.started:
            return 0
        return int(((self.finished or self._clock()) - self.started) * 1000)

    def timings(self) -> str:
        """Seconds per phase, e.g. `open 0.01 s, consumequeue 0.52 s, validate 0.10 s`."""
        return ", ".join(f"{name} {sec:.2f} s" for name, sec in self.phase_seconds.items())

    def describe(self) -> str:
        if self.total:
            return (f"{self.phase} {self.scanned / 2**20:.1f} of {self.total / 2**20:.1f} MiB "
                    f"({100 * self.scanned // self.total} %), {self.elapsed_ms() / 1000:.1f} s since the load began")
        return f"{self.phase}, {self.elapsed_ms() / 1000:.1f} s since the load began"

    def fields(self) -> dict[str, str]:
        """The runtime-info keys (docs/design/restart.md)."""
        return {
            "recoveryPhase": self.phase,
            "recoveryScannedBytes": str(self.scanned),
            "recoveryTotalBytes": str(self.total),
            "recoveryElapsedMs": str(self.elapsed_ms()),
            "recoveryValidatedBytes": str(self.validated),
            "recoveryRedispatchedBytes": str(self.redispatched),
        }
