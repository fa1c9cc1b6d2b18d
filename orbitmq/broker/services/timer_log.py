"""The timer service's files: the timing wheel (mmap, one 8-byte head link per 1-second slot), the append-only
timer log (32-byte records linked per slot, O(1) append) and the progress checkpoint (timercheck.json).

Owns opening, crash recovery (unwind the log tail past the checkpoint, rebuild when the wheel cannot be trusted),
append, slot detach and commit. Knows nothing about messages or the broker; formats are in timer_wheel.py.
"""

from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path

from orbitmq.base.errors import CorruptionError
from orbitmq.base.fsio import atomic_write, read_with_backup
from orbitmq.broker.services.timer_wheel import (
    RECORD_SIZE,
    SLOT_SIZE,
    TimerCheckpoint,
    dangling_slots,
    decode_record,
    encode_record,
    slot_of,
    unwind_tail,
)

log = logging.getLogger(__name__)

_CHUNK_RECORDS = 32768  # records read per pread when scanning the log


class TimerStore:
    """wheel file + timer log + checkpoint. Single writer (the broker's event loop)."""

    def __init__(self, store_dir: str | os.PathLike[str], checkpoint_path: str | os.PathLike[str],
                 slot_count: int) -> None:
        if slot_count <= 0:
            raise ValueError("timer wheel needs at least one slot")
        self.dir = Path(store_dir)
        self.log_path = self.dir / "timerlog"
        self.wheel_path = self.dir / "timerwheel"
        self.checkpoint_path = Path(checkpoint_path)
        self.slot_count = slot_count
        self.records = 0  # timer-log length in records
        self._fd = -1
        self._wheel_fd = -1
        self._mm: mmap.mmap | None = None
        self.heads: memoryview = memoryview(b"")
        # the slot being walked: its old list was handed out, new entries for it chain from detached_head
        self.detached_slot = -1
        self.detached_head = 0

    # ---- open / recovery ---------------------------------------------------------------------------------
    def open(self, default_delivered_sec: int) -> TimerCheckpoint:
        """Open (or create) the files and recover them to the last checkpoint. Returns the progress to resume
        from (a fresh one with delivered_sec=default_delivered_sec when no checkpoint exists)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        ckpt = self._read_checkpoint()
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        file_records = os.fstat(self._fd).st_size // RECORD_SIZE
        if ckpt is None:
            self._map_wheel(reset=True)
            self._truncate(0)
            ckpt = TimerCheckpoint(self.slot_count, default_delivered_sec)
        elif ckpt.slot_count != self.slot_count:
            log.warning("timer wheel: slot count changed %d -> %d, rebuilding the wheel from the timer log",
                        ckpt.slot_count, self.slot_count)
            self._map_wheel(reset=True)
            self._rebuild(ckpt, min(file_records, ckpt.log_records))
        else:
            self._map_wheel(reset=False)
            self._recover(ckpt, file_records)
        ckpt.slot_count = self.slot_count
        ckpt.log_records = self.records
        ckpt.pending_slot, ckpt.pending_head = -1, 0
        return ckpt

    def _read_checkpoint(self) -> TimerCheckpoint | None:
        for data in read_with_backup(self.checkpoint_path):
            try:
                return TimerCheckpoint.from_json(data)
            except (ValueError, KeyError, TypeError):
                log.warning("timer checkpoint %s unreadable, trying its backup", self.checkpoint_path)
        return None

    def _map_wheel(self, reset: bool) -> None:
        size = self.slot_count * SLOT_SIZE
        fd = os.open(self.wheel_path, os.O_RDWR | os.O_CREAT, 0o644)
        if reset or os.fstat(fd).st_size != size:
            os.ftruncate(fd, 0)
            os.ftruncate(fd, size)  # zeros = every slot empty
        self._mm = mmap.mmap(fd, size)
        self._wheel_fd = fd  # kept open: fdatasync(fd) writes the mapping's dirty pages without holding the GIL
        self.heads = memoryview(self._mm).cast("q")

    def _recover(self, ckpt: TimerCheckpoint, file_records: int) -> None:
        keep = min(ckpt.log_records, file_records)
        tail = []
        for index in range(keep, file_records):
            rec = self._read(index)
            if rec is None:
                break  # torn or garbage tail: nothing after it was acknowledged by a checkpoint
            tail.append((index, rec[0], rec[2]))
        unwind_tail(self.heads, tail, self.slot_count)
        if ckpt.pending_slot >= 0:
            self.heads[ckpt.pending_slot] = ckpt.pending_head
        bad = dangling_slots(self.heads, keep)
        if keep < ckpt.log_records or bad:
            log.warning("timer wheel: %d slot(s) refer past the timer log (%d < %d records): rebuilding",
                        len(bad), keep, ckpt.log_records)
            self._rebuild(ckpt, keep)
            return
        if file_records > keep:
            log.info("timer log: dropped %d record(s) written after the last checkpoint", file_records - keep)
        self._truncate(keep)

    def _rebuild(self, ckpt: TimerCheckpoint, readable: int) -> None:
        """Re-create the wheel and the log from the still-pending records (deliver second > delivered_sec),
        one entry per CommitLog message. Only after a config change or a lost log tail (power loss)."""
        pending: dict[int, tuple[int, int]] = {}
        for start in range(0, readable, _CHUNK_RECORDS):
            n = min(_CHUNK_RECORDS, readable - start)
            buf = os.pread(self._fd, n * RECORD_SIZE, start * RECORD_SIZE)
            for i in range(len(buf) // RECORD_SIZE):
                rec = decode_record(buf, i * RECORD_SIZE)
                if rec is not None and rec[0] // 1000 > ckpt.delivered_sec:
                    pending[rec[1]] = (rec[0], rec[3])
        self.heads[:] = memoryview(bytes(self.slot_count * SLOT_SIZE)).cast("q")
        self._truncate(0)
        for phys, (deliver_ms, size) in sorted(pending.items(), key=lambda kv: kv[1][0]):
            self.append(deliver_ms, phys, size)
        self.flush()

    def _truncate(self, records: int) -> None:
        os.ftruncate(self._fd, records * RECORD_SIZE)
        self.records = records

    # ---- records -----------------------------------------------------------------------------------------
    def _read(self, index: int) -> tuple[int, int, int, int] | None:
        return decode_record(os.pread(self._fd, RECORD_SIZE, index * RECORD_SIZE))

    def append(self, deliver_ms: int, phys_offset: int, size: int) -> None:
        """O(1): one 32-byte record at the log end, linked to the slot's previous head."""
        slot = slot_of(deliver_ms, self.slot_count)
        detached = slot == self.detached_slot
        prev = self.detached_head if detached else self.heads[slot]
        index = self.records
        os.pwrite(self._fd, encode_record(deliver_ms, phys_offset, prev, size), index * RECORD_SIZE)
        self.records = index + 1
        if detached:
            self.detached_head = index + 1
        else:
            self.heads[slot] = index + 1

    def detach(self, slot: int) -> list[tuple[int, int, int]]:
        """Hand out the slot's list as [(deliver_ms, phys_offset, size)] (newest first) and start a new list for
        entries appended to this slot meanwhile; commit() makes the new list the slot's. The old list stays the
        slot's on disk until then, so a crash before the commit walks it again."""
        self.detached_slot = slot
        self.detached_head = 0
        out: list[tuple[int, int, int]] = []
        link = self.heads[slot]
        steps = 0
        while link:
            rec = self._read(link - 1)
            if rec is None or link > self.records or steps > self.records:
                raise CorruptionError(str(self.log_path), (link - 1) * RECORD_SIZE,
                                      f"broken list of timer wheel slot {slot}")
            out.append((rec[0], rec[1], rec[3]))
            link = rec[2]
            steps += 1
        return out

    def slot_empty(self, slot: int) -> bool:
        return self.heads[slot] == 0

    # ---- durability --------------------------------------------------------------------------------------
    def flush(self) -> None:
        """fdatasync the log and the wheel (safe from a worker thread while the owner keeps appending)."""
        for fd in (self._fd, self._wheel_fd):
            if fd >= 0:
                os.fdatasync(fd)

    def commit(self, delivered_sec: int, enqueue_offset: int) -> None:
        """Make progress durable: log and wheel flushed, then the checkpoint (with the walked slot's new head),
        then the wheel takes the new head. A crash between the last two steps is repaired by open()."""
        ckpt = self.prepare_commit(delivered_sec, enqueue_offset)
        self.write_checkpoint(ckpt)
        self.finish_commit(ckpt)

    def prepare_commit(self, delivered_sec: int, enqueue_offset: int) -> TimerCheckpoint:
        """Step 1 (owner): capture the state to make durable."""
        return TimerCheckpoint(self.slot_count, delivered_sec, enqueue_offset, self.records, self.detached_slot,
                               self.detached_head)

    def write_checkpoint(self, ckpt: TimerCheckpoint) -> None:
        """Step 2 (blocking, may run in a worker thread): flush, then the checkpoint file. Appends made
        meanwhile lie past ckpt.log_records, so recovery unwinds them back to exactly this state."""
        self.flush()
        atomic_write(self.checkpoint_path, ckpt.to_json())

    def finish_commit(self, ckpt: TimerCheckpoint) -> None:
        """Step 3 (owner): the detached slot takes its new list (including entries appended during step 2)."""
        if ckpt.pending_slot >= 0 and ckpt.pending_slot == self.detached_slot:
            self.heads[self.detached_slot] = self.detached_head
            self.detached_slot, self.detached_head = -1, 0

    def close(self) -> None:
        if self._mm is not None:
            self.heads.release()
            self._mm.flush()
            self._mm.close()
            self._mm = None
        for fd in (self._fd, self._wheel_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._wheel_fd = -1
