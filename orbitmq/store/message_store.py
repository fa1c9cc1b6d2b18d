"""MessageStore: the store facade (contracts.md L3) — wiring, recovery execution, visibility and reads.

Owns the lock/abort files, the CommitLog, FlushService, ConsumeQueueTable, IndexService, checkpoint, epoch file,
retention and the dispatcher. Single writer: every method runs on the event-loop thread; only fsync goes to a
worker thread. Records become visible (CQ/index/listeners) only up to confirm_offset. Why: docs/design/store.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Collection, Coroutine, Iterable
from functools import partial
from typing import Any

from orbitmq.base import marks
from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.errors import CorruptionError, StoreError
from orbitmq.model.enums import takes_queue_offset
from orbitmq.model.message import MessageExt
from orbitmq.model.properties import Prop
from orbitmq.model.record import decode_record
from orbitmq.model.tags import tag_code
from orbitmq.store.checkpoint import CheckpointFile, EpochFile
from orbitmq.store.checkpoint_writer import CheckpointWriter
from orbitmq.store.commitlog import CommitLog
from orbitmq.store.config import StoreConfig
from orbitmq.store.consume_queue import ConsumeQueueTable
from orbitmq.store.disk import Disk, FileLock, MmapDisk
from orbitmq.store.dispatch import Dispatcher, DispatchListeners, DispatchRequest, SkipLog
from orbitmq.store.flush import FlushService, flush_ranges
from orbitmq.store.index_file import IndexService
from orbitmq.store.layout import ABORT_FILE, CONSUMEQUEUE_DIR, CQ_ENTRY_SIZE, CQ_FILLER, INDEX_DIR, LOCK_FILE
from orbitmq.store.recovery import (
    CheckpointState,
    Decision,
    RecordKind,
    RecoveryProgress,
    RedispatchFrom,
    ScanStart,
    TailAction,
    check_record,
    choose_checkpoint_file,
    classify_tail,
    decide,
    scan_start,
    validate_forward,
)
from orbitmq.store.replica import ReplicaState
from orbitmq.store.results import GetResult, GetStatus, MessageInner, PutResult, PutStatus, QueryResult
from orbitmq.store.retention import RetentionService
from orbitmq.store.schedule import DEFAULT_DELAY_LEVELS, SCHEDULE_TOPIC, delivery_time
from orbitmq.store.segment import Segment

log = logging.getLogger(__name__)

_FILLER_SIZE = CQ_FILLER[1]
MAX_BYTES_IN_MEMORY, MAX_COUNT_IN_MEMORY = 256 * 1024, 32
MAX_BYTES_ON_DISK, MAX_COUNT_ON_DISK = 64 * 1024, 8


CLEAN_CHECK_TAIL_BYTES = 32 << 20  # see MessageStore.clean_check_tail_bytes


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def request_of(msg: MessageExt, delay_spec: str = DEFAULT_DELAY_LEVELS) -> DispatchRequest:
    props = msg.properties
    code = (tag_code(props.get(Prop.TAGS)) if msg.topic != SCHEDULE_TOPIC
            else delivery_time(props, msg.store_timestamp, delay_spec))
    return DispatchRequest(
        msg.topic, msg.queue_id, msg.phys_offset, msg.store_size, code,
        msg.store_timestamp, msg.queue_offset, props.get(Prop.KEYS), props.get(Prop.UNIQ_KEY), msg.sys_flag,
        msg.prepared_transaction_offset, props,
    )


def _flush_timed_out(result: PutResult, flusher: FlushService) -> None:
    """The group commit did not cover the put in time: the message stays written, the answer says so. If the flush
    failed (the store is read-only now) the put is refused: SERVICE_NOT_AVAILABLE, never a success."""
    if flusher.failed is not None:
        result.status = PutStatus.SERVICE_NOT_AVAILABLE
        marks.hit("put refused after a failed flush")
        return
    result.status = PutStatus.FLUSH_DISK_TIMEOUT
    marks.hit("sync flush timeout")


def _flushed_result(result: PutResult, callback: Callable[[PutResult], None], flusher: FlushService,
                    ok: bool) -> None:
    if not ok:
        _flush_timed_out(result, flusher)
    callback(result)


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Clock = REAL_CLOCK,
        disk: Disk | None = None,
        disk_usage: Callable[[], float] | None = None,
    ) -> None:
        self.config = config.derive()
        self.clock = clock
        self.disk: Disk = disk if disk is not None else MmapDisk()
        root = self.config.store_path_root_dir
        self.root_dir = root
        cl_dir = self.config.commitlog_dir  # retention watches the CommitLog's own file system
        self._disk_usage = disk_usage or (lambda: self.disk.usage_ratio(cl_dir))
        self.commitlog = CommitLog(root, self.config, self.disk, clock)
        self.checkpoint = CheckpointFile(root, self.disk)
        self.checkpoint_writer = CheckpointWriter(self.checkpoint)  # snapshots land in the order taken
        self.epochs = EpochFile(root, self.disk)
        self.cq_table = ConsumeQueueTable(
            os.path.join(root, CONSUMEQUEUE_DIR), self.config.mapped_file_size_consume_queue, self.disk
        )
        self.index: IndexService | None = None
        if self.config.message_index_enable:
            self.index = IndexService(
                os.path.join(root, INDEX_DIR), self.config.max_hash_slot_num, self.config.max_index_num, self.disk
            )
        self.dispatcher = Dispatcher()
        self.flusher: FlushService | None = None
        self.retention: RetentionService | None = None
        self._listeners = DispatchListeners()
        self._confirm_offset = 0
        self._visible_on_flush = self.config.confirm_offset_mode == "flushed"
        self._pending: deque[DispatchRequest] = deque()  # appended, not yet visible ("flushed" mode)
        self.replica = ReplicaState(self)  # replication: raw appends (slave), replica gate (SYNC_MASTER)
        self._lock: FileLock | None = None
        self._cl_lock: FileLock | None = None  # storePathCommitLog outside the root: its own lock
        self._loaded = False
        self._shutdown = False
        self._tasks: list[asyncio.Task[None]] = []
        self.background_error: BaseException | None = None
        self.read_only_reason = ""  # why the store refuses writes for good (a failed fsync); "" while writable
        self.recovery_decision: Decision | None = None
        # where load() is (runtime info reads it from the loop while load() runs in a worker thread)
        self.recovery_progress = RecoveryProgress(time.monotonic, lambda line: log.info("store recovery: %s", line))
        # a clean restart CRC-checks only this much of the CommitLog's tail (from a record boundary found through
        # the ConsumeQueues), not the last three segments (up to 3 GiB); 0 = the last three segments, as RocketMQ
        self.clean_check_tail_bytes = CLEAN_CHECK_TAIL_BYTES
        self._lfp_candidates: list[int] = []  # derived-flushed phys ends not yet below the CommitLog flushed offset
        self._memory_window = (self.config.physical_memory_bytes or _physical_memory()) * (
            self.config.access_message_in_memory_max_ratio
        ) // 100

    # ---- load / recovery --------------------------------------------------------------------------------
    def load(self) -> None:
        """Lock, recover (see recovery.py's table), create the abort marker. Raises StoreError/CorruptionError."""
        self.disk.makedirs(self.root_dir)
        self._lock = self.disk.lock(os.path.join(self.root_dir, LOCK_FILE))
        try:
            if self.config.commitlog_dir_is_separate:
                self._cl_lock = self.disk.lock(os.path.join(self.config.commitlog_dir, LOCK_FILE))
            self._load_locked()
        except BaseException:
            self._close_files()
            raise
        self._loaded = True

    def _load_locked(self) -> None:
        progress = self.recovery_progress
        progress.begin()
        abort_path = os.path.join(self.root_dir, ABORT_FILE)
        abort_present = self.disk.exists(abort_path)
        cp_state = CheckpointState(self.checkpoint.load())
        self.epochs.load()
        self.commitlog.load()
        self.cq_table.load()
        progress.set_phase("consumequeue")
        cq_end = self.cq_table.recover()
        if self.index is not None:
            progress.set_phase("index")
            index_ts = self.checkpoint.state.index_msg_timestamp if cp_state is CheckpointState.VALID else 0
            self.index.load(not abort_present, index_ts)
        self._recover(abort_present, cp_state, cq_end)
        self.disk.touch(abort_path)
        self.flusher = FlushService(self.commitlog, self.disk, self.clock, self._on_flushed, self._on_flush_failed)
        self.retention = RetentionService(
            self.config, self.commitlog.segments, self.disk, self.clock, self._disk_usage, self._on_segments_deleted
        )
        self.dispatcher.register(self.cq_table)
        if self.index is not None:
            self.dispatcher.register(self.index)  # IndexService.dispatch skips ROLLBACK records itself
        self.dispatcher.register(self._listeners)
        self._save_checkpoint()
        progress.done()
        log.info("store recovery: done in %.2f s (%s)", progress.elapsed_ms() / 1000, progress.timings())

    def _recover(self, abort_present: bool, cp_state: CheckpointState, cq_end: int) -> None:
        cl = self.commitlog
        segs = cl.segments.segments
        start = scan_start(abort_present, cp_state)
        pos = 0
        if start is ScanStart.THIRD_LAST_FILE:
            first = max(0, len(segs) - 3)
            tail = self._clean_tail_start(segs[first].start_offset) if segs else None
            if tail is not None:
                first, pos = tail
        elif start is ScanStart.CHECKPOINT_FILE:
            min_ts = self.checkpoint.state.min_timestamp(self.index is not None)
            first = choose_checkpoint_file([cl.first_record_time(s) for s in segs], min_ts)
        else:
            first = 0
        # logics_flushed_phys is a record boundary below the CommitLog's flushed offset: validate from there, not
        # from the checkpoint segment's start (up to 1 GiB; what lies before it was durable and validated then)
        lfp = self.checkpoint.state.logics_flushed_phys if start is ScanStart.CHECKPOINT_FILE else 0
        lfp_seg = cl.segments.find(lfp) if lfp else None
        if lfp_seg is not None and segs and lfp > segs[first].start_offset:
            first, pos = segs.index(lfp_seg), lfp - lfp_seg.start_offset
        flushed = self.checkpoint.state.master_flushed_offset if cp_state is CheckpointState.VALID else 0
        scan_begin = segs[first].start_offset + pos if segs else 0
        progress = self.recovery_progress
        seg_end = segs[-1].start_offset + segs[-1].size if segs else 0
        progress.set_phase("validate", (flushed if flushed > scan_begin else seg_end) - scan_begin)
        kind, stop = validate_forward([(sg.start_offset, sg.buf) for sg in segs], first, pos,
                                      self.config.check_crc_on_recover,
                                      lambda phys: progress.advance(phys - scan_begin))
        progress.advance(stop - scan_begin)
        progress.validated = stop - scan_begin
        later_valid = stop < flushed and cl.has_valid_record_between(stop, flushed)
        tail = classify_tail(kind, stop, flushed, later_valid)
        decision = decide(abort_present, cp_state, tail)
        self.recovery_decision = decision
        marks.hit(decision.mark)
        log.info("store recovery: %s, checkpoint %s, CommitLog tail %s -> %s (scanned from segment %d to offset %d: "
                 "%s)", "previous run crashed" if abort_present else "new store" if cp_state is CheckpointState.MISSING
                 else "previous run stopped cleanly", cp_state.value, tail.value, decision.tail_action.value, first,
                 stop, kind.value)
        if pos and start is ScanStart.CHECKPOINT_FILE:
            log.info("store recovery: validated from phys %d (the derived checkpoint), %d bytes", lfp, stop - lfp)
        elif pos:
            log.info("store recovery: clean exit, validated the tail from phys %d, %d bytes", scan_begin,
                     stop - scan_begin)
        if decision.tail_action is TailAction.REFUSE:
            seg = cl.segments.find(stop)
            raise CorruptionError(
                seg.path if seg else "commitlog", stop - (seg.start_offset if seg else 0),
                f"invalid record at phys offset {stop} inside flushed data (flushed up to {flushed}) with valid "
                "records after it; refusing to truncate acknowledged messages — restore from a replica or move "
                "the damaged segment away",
            )
        if decision.tail_action is TailAction.TRUNCATE:
            marks.hit("truncated torn tail")
        cl.segments.truncate(stop)
        self._flush_recovered(first)
        self.cq_table.truncate_dirty(stop)
        if self.index is not None:
            self.index.truncate_dirty(stop)
        self.epochs.truncate(stop)
        scan_from = segs[first].start_offset if segs and first < len(segs) else stop
        # a crash: the ConsumeQueues may lag the checkpoint; they were all durable up to logics_flushed_phys (when
        # the checkpoint has it), so only that tail is re-dispatched, not the whole checkpoint segment
        lfp = self.checkpoint.state.logics_flushed_phys if cp_state is CheckpointState.VALID else 0
        begin = cq_end if decision.redispatch_from is RedispatchFrom.CQ_END else min(cq_end, max(scan_from, lfp))
        self.checkpoint.state.logics_flushed_phys = min(lfp, stop)
        if self.index is not None and self.index.redispatch_from is not None:
            # the index loader dropped damaged entries: rebuild them (CQ dispatch skips what it already has)
            begin = min(begin, self.index.redispatch_from)
        self._redispatch(max(min(begin, stop), cl.min_offset), stop, scan_begin)
        self._rebuild_queue_table()
        self._confirm_offset = stop

    def _flush_recovered(self, first: int) -> None:
        """What recovery read may sit only in the page cache (process crash): make it durable before use."""
        for seg in self.commitlog.segments.segments[first:]:
            if seg.wrote_position:
                seg.backing.flush(0, seg.wrote_position)

    def _clean_tail_start(self, floor: int) -> tuple[int, int] | None:
        """(segment index, position) of a record boundary about `clean_check_tail_bytes` before the checkpoint's
        flushed offset, to CRC-check only that tail after a clean exit; None to check from `floor` (the third-last
        segment's start) as before: the tail reaches below it, or no ConsumeQueue entry gives a boundary there,
        or the entry found does not point at a valid record.

        A boundary: the lowest phys offset >= the target among the ConsumeQueues' entries (a binary search in each
        queue). A clean exit flushed and dispatched everything, so the records of the tail are in the queues.
        """
        budget = self.clean_check_tail_bytes
        flushed = self.checkpoint.state.master_flushed_offset
        target = flushed - budget
        if budget <= 0 or target <= floor:
            return None
        best = -1
        for topic, queue_id in self.cq_table.queue_max_offsets():
            cq = self.cq_table.find(topic, queue_id)
            if cq is None:
                continue
            lo, hi = cq.min_offset, cq.max_offset  # entries' phys offsets grow with the queue offset
            while lo < hi:
                mid = (lo + hi) // 2
                e = cq.entry(mid)
                if e is None:
                    break
                if e[1] == _FILLER_SIZE or e[0] < target:
                    lo = mid + 1
                else:
                    hi = mid
            e = cq.entry(lo) if lo < cq.max_offset else None
            if e is not None and e[1] != _FILLER_SIZE and e[0] >= target and (best < 0 or e[0] < best):
                best = e[0]
        if best < 0 or best >= flushed:
            return None
        seg = self.commitlog.segments.find(best)
        if seg is None:
            return None
        kind, _ = check_record(seg.buf, best - seg.start_offset, best, self.config.check_crc_on_recover)
        if kind is not RecordKind.RECORD:
            marks.hit("clean recovery tail boundary rejected")
            return None
        return self.commitlog.segments.segments.index(seg), best - seg.start_offset

    def _redispatch(self, begin: int, end: int, known_boundary: int = 0) -> None:
        """Dispatch the records in [begin, end) again; `known_boundary` is a record boundary (the validation's
        start) from where the last record's store time can be found when nothing is re-dispatched."""
        n = 0
        last_ts = self.commitlog.last_store_timestamp
        skips = SkipLog("store recovery")
        progress = self.recovery_progress
        progress.set_phase("redispatch", end - begin)
        for phys, rec in self.commitlog.iter_records(begin, end):
            try:  # a record that cannot be decoded is logged and skipped; recovery goes on (a bad name: cq_table)
                req = request_of(decode_record(rec), self.config.message_delay_level)
            except (CorruptionError, ValueError) as e:
                skips.skip(type(e).__name__, f"cannot decode: {e}", phys)
                continue
            self.cq_table.dispatch(req)
            if self.index is not None:
                self.index.dispatch(req)
            last_ts = max(last_ts, req.store_timestamp)
            n += 1
            if not n & 1023:
                progress.advance(phys - begin)
        progress.advance(end - begin)
        progress.redispatched = end - begin
        if n:
            marks.hit("recovery redispatched records")
        if end > 0 and n == 0:
            seg = self.commitlog.segments.find(end - 1)
            if seg is not None:
                last_ts = max(last_ts, self._last_record_ts(seg, known_boundary))
        self.commitlog.last_store_timestamp = last_ts
        log.info("store recovery: re-dispatched %d records from %d to %d", n, begin, end)

    def _last_record_ts(self, seg: Segment, known_boundary: int = 0) -> int:
        """Store time of the last record of `seg`, walking from `known_boundary` when it lies in the segment (a
        walk from the segment's start would read every record of up to 1 GiB)."""
        ts = 0
        begin = known_boundary if seg.start_offset < known_boundary < seg.end_offset else seg.start_offset
        for phys, rec in self.commitlog.iter_records(begin, seg.end_offset):
            ts = self.commitlog.store_timestamp_at(phys, len(rec))
        return ts

    def _rebuild_queue_table(self) -> None:
        self.commitlog.topic_queue_table = {
            f"{t}-{q}": off for (t, q), off in self.cq_table.queue_max_offsets().items()
        }
        self._hold_pending_offsets(None)

    def _hold_pending_offsets(self, topics: set[str] | None) -> None:
        """Records written but not visible yet (pending) hold their queue offsets: the next offset of their queue
        (of `topics`, or every queue) stays past them (a Raft group's uncommitted puts)."""
        table = self.commitlog.topic_queue_table
        for req in self._pending:
            if (topics is None or req.topic in topics) and takes_queue_offset(req.sys_flag):
                key = f"{req.topic}-{req.queue_id}"
                if table.get(key, 0) <= req.queue_offset:
                    table[key] = req.queue_offset + 1

    def raise_queue_offsets(self) -> int:
        """Controller mode, before a promoted replica accepts writes: lift every queue's next offset to at least
        its ConsumeQueue's max, never lowering one (#6344 / #7689: a new master must not reuse queue offsets).
        Returns how many queues were raised."""
        table = self.commitlog.topic_queue_table
        raised = 0
        for (topic, queue_id), off in self.cq_table.queue_max_offsets().items():
            key = f"{topic}-{queue_id}"
            if table.get(key, 0) < off:
                table[key] = off
                raised += 1
        return raised

    # ---- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        if not self._loaded:
            raise StoreError("MessageStore.start() before load()")
        c = self.config
        assert self.flusher is not None and self.retention is not None
        least = 0 if c.sync_flush else c.flush_commitlog_least_pages
        self._spawn("commitlog flush", self.flusher.run_flush_loop(
            c.flush_interval_commitlog_ms, least, c.flush_commitlog_thorough_interval_ms))
        self._spawn("derived flush", self._run_derived_flush_loop())
        self._spawn("retention", self._run_retention_loop())

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"store {name}")
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # No silent restart: the store stops taking writes; the broker reports it and an operator restarts.
            log.error("store background task %s crashed: %r", task.get_name(), exc, exc_info=exc)
            self.background_error = exc

    async def _run_derived_flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_consume_queue_ms / 1000)
            if self.disk.flush_in_thread:
                await self._flush_derived_off_loop()
            else:
                self._flush_derived_and_checkpoint()

    async def _flush_derived_off_loop(self) -> None:
        """_flush_derived_and_checkpoint with the fdatasyncs in a worker thread: one per ConsumeQueue file and
        index file, each ms-long under a SYNC_FLUSH load, blocked the event loop for tens of ms every second.
        The ranges and the timestamps they cover are taken on the loop; the flushed marks and the checkpoint
        state are set on the loop after the sync (a file closed meanwhile is skipped by its backing), and the
        checkpoint snapshot taken then is written by a worker thread too (CheckpointWriter drops it if a newer
        one, from truncate_dirty or shutdown, is written first)."""
        ranges, commit = self._plan_derived_flush()
        loop = asyncio.get_running_loop()
        if ranges:
            await loop.run_in_executor(None, flush_ranges, ranges)
        if self._shutdown:
            return  # shutdown() runs the synchronous flush and writes the final checkpoint itself
        commit()  # marks and checkpoint state on the loop, after the sync: the snapshot claims only synced data
        seq, data = self._checkpoint_snapshot()
        await loop.run_in_executor(None, self.checkpoint_writer.write, seq, data)  # 3 fsyncs, off the loop

    async def _run_retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.clean_interval_ms / 1000)
            assert self.retention is not None
            self.retention.run_once()

    def _flush_derived_and_checkpoint(self) -> None:
        ranges, commit = self._plan_derived_flush()
        flush_ranges(ranges)
        commit()
        self._save_checkpoint()

    def _plan_derived_flush(self) -> tuple[list[Any], Callable[[], None]]:
        """The ConsumeQueue and index ranges to sync, and what to do once they are synced: mark them flushed and
        set the checkpoint's timestamps to the ones taken now (they claim only what the ranges cover); the caller
        then saves the checkpoint."""
        logics_ts = self.cq_table.last_dispatch_timestamp
        logics_phys = self.cq_table.last_dispatch_phys_end  # dispatch is synchronous: the ranges cover it (index too)
        cq_ranges, cq_done = self.cq_table.flush_plan()
        idx_ranges: list[Any] = []
        idx_done: list[Any] = []
        index_ts = 0
        if self.index is not None:
            idx_ranges, idx_done, index_ts = self.index.flush_plan()

        def commit() -> None:
            for cq, hi in cq_done:
                cq.flushed_to(hi)
            for f, hi in idx_done:
                f.flushed_to(hi)
            self._set_derived_checkpoint(logics_ts, index_ts)
            self._advance_logics_flushed(logics_phys)

        return cq_ranges + idx_ranges, commit

    def _advance_logics_flushed(self, phys_end: int) -> None:
        """Record `phys_end` (every CQ/index entry below it now durable) as the checkpoint's logics_flushed_phys once
        the CommitLog is flushed past it too: recovery then both validates and re-dispatches from there."""
        cands = self._lfp_candidates
        if phys_end and (not cands or phys_end > cands[-1]):
            cands.append(phys_end)
        flushed = self.flusher.flushed_offset if self.flusher is not None else 0
        done = [c for c in cands if c <= flushed]
        if done:
            st = self.checkpoint.state
            st.logics_flushed_phys = max(st.logics_flushed_phys, done[-1])
            del cands[: len(done)]
        del cands[:-8]  # a bounded backlog (the CommitLog flush catches up within a tick or two)

    def _set_derived_checkpoint(self, logics_ts: int, index_ts: int) -> None:
        if not index_ts:
            index_ts = logics_ts  # no index file yet: nothing indexed can be lost before the logics time
        st = self.checkpoint.state
        if logics_ts:
            st.logics_msg_timestamp = logics_ts
        if index_ts:
            st.index_msg_timestamp = index_ts

    def _checkpoint_snapshot(self) -> tuple[int, bytes]:
        """Fill the checkpoint with the CommitLog's flushed (durable) position and confirm offset -> snapshot."""
        st = self.checkpoint.state
        if self.flusher is not None:
            st.master_flushed_offset = self.flusher.flushed_offset
            if self.flusher.flushed_store_timestamp:
                st.physic_msg_timestamp = self.flusher.flushed_store_timestamp
        st.confirm_phy_offset = self._confirm_offset
        return self.checkpoint_writer.snapshot()

    def _save_checkpoint(self) -> None:
        """Write the checkpoint now, on the calling thread (load, shutdown, truncate_dirty, SimDisk flushes)."""
        self.checkpoint_writer.write(*self._checkpoint_snapshot())

    async def shutdown(self) -> None:
        """Flush everything, write the checkpoint, delete the abort file, release the lock."""
        if self._shutdown or not self._loaded:
            return
        self._shutdown = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        assert self.flusher is not None
        try:
            await self.flusher.flush()
            await self.flusher.close()
            self._flush_derived_and_checkpoint()
        except Exception as e:  # a failed fsync: keep the abort file (the next start recovers), close the files
            self.set_read_only(f"flush at shutdown failed: {e!r}")
            await self.flusher.close()
        if self.background_error is None and not self.read_only_reason:
            self.disk.delete(os.path.join(self.root_dir, ABORT_FILE))
        self._close_files()

    def _close_files(self) -> None:
        self.commitlog.close()
        self.cq_table.close()
        if self.index is not None:
            self.index.close()
        for lock in (self._cl_lock, self._lock):
            if lock is not None:
                lock.release()
        self._lock = self._cl_lock = None

    # ---- writes ------------------------------------------------------------------------------------------
    def _refuse_reason(self) -> str | None:
        if not self._loaded or self._shutdown:
            return "store not running"
        if self.read_only_reason:
            return self.read_only_reason
        if self.background_error is not None:
            return "store background task failed"
        if self.retention is not None and self.retention.disk_full:
            return "disk full"
        return None

    async def put_message(self, msg: MessageInner) -> PutResult:
        return await self.put_messages([msg])

    async def put_messages(self, msgs: list[MessageInner]) -> PutResult:
        """Append one message or one batch; in SYNC_FLUSH await the group commit unless WAIT=false."""
        result, wait_end = self.put_messages_nowait(msgs)
        if wait_end >= 0:
            return await self.wait_put_flushed(result, wait_end)
        return result

    async def durable_barrier(self) -> None:
        """Under SYNC_FLUSH: return once everything written so far is flushed, so a service (timer, delay) may
        persist progress that claims its re-puts are stored. Raises FlushFailedError when the store cannot flush
        (the progress must then not move). ASYNC_FLUSH promises no durability: returns at once."""
        if not self.config.sync_flush or self.flusher is None or self._shutdown:
            return
        await self.flusher.flush()

    def admission_remark(self) -> str | None:
        """Admission control before a send (RocketMQ's BrokerFastFailure): the SYSTEM_BUSY remark when the disk
        is too slow to take more (clients then send to another broker), else None. Cheap when the disk keeps up."""
        f = self.flusher
        if f is None or (not f.inflight_since and not f.has_waiters) or not self.config.broker_fast_failure_enable:
            return None
        inflight_ms, waiters, oldest_ms = f.busy()
        if inflight_ms > self.config.os_page_cache_busy_timeout_ms:
            marks.hit("send refused: page cache busy")
            return (f"[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{int(inflight_ms)}ms, size of queue: {waiters}")
        if oldest_ms > self.config.wait_time_ms_in_send_queue:
            marks.hit("send refused: group commit queue too old")
            return (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{int(oldest_ms)}ms, size of queue: {waiters}")
        return None

    def put_messages_nowait(self, msgs: list[MessageInner]) -> tuple[PutResult, int]:
        """The synchronous part of put_messages: append (and dispatch, unless visibility waits for the flush).

        Returns (result, end offset). The end offset is -1 when the put is complete as it stands (ASYNC_FLUSH,
        WAIT=false, or a refused put); otherwise the caller must `await wait_put_flushed(result, end)` before
        answering (SYNC_FLUSH group commit). put_messages == this + that wait.
        """
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL), -1
        if self._refuse_reason() is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE), -1
        appended = self.commitlog.append(msgs)
        result = appended.result
        if result.status is not PutStatus.PUT_OK:
            return result, -1
        if self._visible_on_flush or self.replica.gate:
            self._pending.extend(appended.requests)
        else:
            self._confirm_offset = appended.end_offset
            try:
                self.dispatcher.dispatch_many(appended.requests)
            except OSError as e:  # a ConsumeQueue/index file could not be created (ENOSPC, EMFILE)
                return self._undo_append(result, e), -1
        if self.replica.on_written is not None:  # after the records are pending: a replica policy that confirms
            self.replica.on_written()  # them at once (a SyncStateSet of one) must find them to release
        if (self.config.sync_flush or self.replica.wait_ms) and msgs[0].properties.get(Prop.WAIT) != "false":
            return result, appended.end_offset
        return result, -1

    @property
    def puts_complete_at_once(self) -> bool:
        """True when a put is answered as soon as it is appended (ASYNC_FLUSH, no replica to wait for, visible at
        once): what put_singles_nowait needs."""
        return not (self.config.sync_flush or self.replica.wait_ms or self._visible_on_flush or self.replica.gate)

    def put_singles_nowait(self, msgs: list[MessageInner]) -> list[PutResult] | None:
        """Several single-message puts (the sends of one read) in one append and one dispatch. results[i] is the
        answer to msgs[i] as put_messages_nowait([msgs[i]]) gives it (see CommitLog.append_singles for where the
        records go); every put is complete (no flush or replica wait). None, with nothing written, when the store
        answers puts only after a wait (not puts_complete_at_once) or the CommitLog declines the run: the caller
        then puts them one by one, which gives every refusal its own answer."""
        if not self.puts_complete_at_once or self._refuse_reason() is not None:
            return None
        try:
            done = self.commitlog.append_singles(msgs)
        except OSError as e:  # only the roll to a new segment does I/O here: refused like append() refuses
            marks.hit("commitlog segment creation failed")
            log.error("cannot create a CommitLog segment (%s): put refused", e)
            return [PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED) for _ in msgs]
        if done is None:
            return None
        results, end, requests = done
        self._confirm_offset = end
        try:
            self.dispatcher.dispatch_many(requests)
        except OSError as e:  # as put_messages_nowait: the whole run is cut back and refused
            status = self._undo_append(results[0], e).status
            return [PutResult(status) for _ in msgs]  # one object each: an after_put hook may rewrite a status
        if self.replica.on_written is not None:
            self.replica.on_written()
        return results

    def _undo_append(self, result: PutResult, error: OSError) -> PutResult:
        """Dispatch failed right after the append (no await in between: nothing was replicated or flushed-and-
        answered for it): cut the CommitLog back to before the put so no record lacks its queue entry, and refuse
        the put (CREATE_MAPPED_FILE_FAILED, retried by clients); the store stays writable (a full descriptor table
        or disk is transient). If even that fails, the store turns read-only (recovery re-dispatches at restart)."""
        marks.hit("put undone after a failed dispatch")
        log.error("dispatch of the put at %d failed (%r): the put is undone and refused", result.phys_offset, error)
        try:
            self.truncate_dirty(result.phys_offset)
        except Exception as e:
            self.set_read_only(f"dispatch to the ConsumeQueue/index failed ({error!r}) and the put could not be "
                               f"undone ({e!r})")
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED)

    async def wait_put_flushed(self, result: PutResult, end_offset: int) -> PutResult:
        """Second half of a SYNC_FLUSH put: wait for the group commit covering `end_offset`."""
        assert self.flusher is not None
        if self.config.sync_flush and not await self.flusher.wait_flushed(end_offset, self.config.sync_flush_timeout_ms):
            _flush_timed_out(result, self.flusher)
        if self.replica.wait_ms and result.status is PutStatus.PUT_OK:
            result = await self.replica.wait(result, end_offset)  # SYNC_MASTER: wait for a slave
        return result

    def when_put_flushed(self, result: PutResult, end_offset: int, callback: Callable[[PutResult], None]) -> bool:
        """Callback form of wait_put_flushed for the SYNC_FLUSH hot path: `callback(result)` runs on the loop once
        the group commit covers `end_offset` (status FLUSH_DISK_TIMEOUT if it timed out). Returns False, having
        registered nothing, when the put also waits for a replica (SYNC_MASTER): await wait_put_flushed then."""
        if self.replica.wait_ms or not self.config.sync_flush:
            return False
        assert self.flusher is not None
        self.flusher.add_waiter(end_offset, self.config.sync_flush_timeout_ms,
                                partial(_flushed_result, result, callback, self.flusher))
        return True

    def _on_flush_failed(self, error: BaseException) -> None:
        self.set_read_only(f"CommitLog flush failed: {error!r}")

    def set_read_only(self, reason: str) -> None:
        """Refuse every later write (SERVICE_NOT_AVAILABLE) for good; reads keep working. The first reason stays."""
        if not self.read_only_reason:
            self.read_only_reason = reason
            marks.hit("store read-only")
            log.critical("store is read-only from now on: %s", reason)

    def _on_flushed(self, offset: int, _store_ts: int) -> None:
        if not self._visible_on_flush:
            return
        self.replica.flushed_seen = offset
        self.replica.release_visible()  # visible up to the flush (and the replicas, when gated)

    def add_dispatch_listener(self, fn: Callable[[DispatchRequest], None], *, topics: Iterable[str] | None = None,
                              while_nonempty: Collection[object] | None = None) -> None:
        """fn(req) for each record made visible, in registration order; `topics`: only records of these topics;
        `while_nonempty`: only while this container of the listener's is non-empty (DispatchListeners)."""
        self._listeners.add(fn, topics=topics, while_nonempty=while_nonempty)

    # ---- reads -------------------------------------------------------------------------------------------
    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetResult:
        """tag_filter(tags code) is the first stage; record_filter(record bytes) -> keep? the optional second
        (SQL92 property filters), run only on records that passed the first."""
        cq = self.cq_table.find(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            nxt = min_off if min_off == 0 else max_off
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, min_off, max_off)
        # maxFilterMessageSize: a tag / SQL92 filtered pull scans at most this many ConsumeQueue entries (and never
        # past the end of one ConsumeQueue file); next_begin_offset is the first entry not scanned
        scan_entries = max(self.config.max_filter_message_size, max_msg_nums * CQ_ENTRY_SIZE) // CQ_ENTRY_SIZE
        entries = cq.read_iter(offset, scan_entries)
        if entries is None:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.segment_end_offset(offset), min_off, max_off)
        return self._collect(entries, offset, max_msg_nums, tag_filter, min_off, max_off, record_filter)

    def _collect(
        self, entries: Iterable[tuple[int, int, int]], offset: int, max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None, min_off: int, max_off: int,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetResult:
        cl = self.commitlog
        max_phys = cl.max_offset
        min_phys = cl.min_offset
        window = self._memory_window
        status = GetStatus.NO_MATCHED_MESSAGE
        buffers: list[bytes | memoryview] = []
        total = 0
        max_pulled_phys = 0
        skip_below = -1
        scanned = 0
        for phys, size, tags in entries:
            if size == _FILLER_SIZE or phys < skip_below:
                scanned += 1
                continue
            in_disk = max_phys - phys > window
            if buffers:
                if len(buffers) >= max_msg_nums:
                    break
                if in_disk:
                    if total + size > MAX_BYTES_ON_DISK or len(buffers) >= MAX_COUNT_ON_DISK:
                        break
                elif total + size > MAX_BYTES_IN_MEMORY or len(buffers) >= MAX_COUNT_IN_MEMORY:
                    break
            scanned += 1
            if tag_filter is not None and not tag_filter(tags):
                continue
            view = cl.read(phys, size) if phys >= min_phys else None
            if view is None:
                if not buffers:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                seg_size = cl.segments.segment_size
                skip_below = phys - phys % seg_size + seg_size
                continue
            if record_filter is not None and not record_filter(view):
                continue
            buffers.append(view)
            total += size
            max_pulled_phys = phys
        if buffers:
            status = GetStatus.FOUND
        suggest = buffers != [] and (max_phys - max_pulled_phys) > window
        return GetResult(status, offset + scanned, min_off, max_off, buffers, len(buffers), total, suggest)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def _store_time(self, phys: int, size: int) -> int:
        if phys < self.commitlog.min_offset:
            return -1
        return self.commitlog.store_timestamp_at(phys, size)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.offset_by_time(timestamp_ms, self._store_time) if cq is not None else 0

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        if cq is None or cq.max_offset <= cq.min_offset:
            return -1
        for phys, size, _tags in cq.read(cq.min_offset, 64):
            if size != _FILLER_SIZE:
                return self._store_time(phys, size)
        return -1

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        entries = cq.read(queue_offset, 1) if cq is not None else []
        return self._store_time(entries[0][0], entries[0][1]) if entries else -1

    def _visible_record(self, phys_offset: int) -> memoryview | None:
        if phys_offset < self.commitlog.min_offset or phys_offset >= self._confirm_offset:
            return None
        rec = self.commitlog.read_record(phys_offset)
        if rec is None or phys_offset + len(rec) > self._confirm_offset:
            return None
        return rec

    def look_message_by_offset(self, phys_offset: int) -> MessageExt | None:
        rec = self._visible_record(phys_offset)
        if rec is None:
            return None
        try:
            return decode_record(rec)
        except CorruptionError:
            return None

    def select_one_message_by_offset(self, phys_offset: int) -> bytes | None:
        rec = self._visible_record(phys_offset)
        return bytes(rec) if rec is not None else None

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryResult:
        if self.index is None:
            return QueryResult()
        phys_list, last_ts, last_phy = self.index.query(topic, key, max_num, begin_ts, end_ts)
        out = QueryResult([], last_ts, last_phy)
        for phys in phys_list:
            msg = self.look_message_by_offset(phys)
            if msg is None or msg.topic != topic or not begin_ts <= msg.store_timestamp <= end_ts:
                continue
            if key in msg.keys or msg.properties.get(Prop.UNIQ_KEY) == key:
                rec = self._visible_record(phys)
                if rec is not None:
                    out.buffers.append(bytes(rec))
        return out

    # ---- admin / replication -----------------------------------------------------------------------------
    def delete_topics(self, topics: set[str]) -> None:
        for t in topics:
            self.cq_table.delete_topic(t)
        prefixes = tuple(f"{t}-" for t in topics)
        table = self.commitlog.topic_queue_table
        for key in [k for k in table if k.startswith(prefixes) and k.rpartition("-")[0] in topics]:
            del table[key]
        self._hold_pending_offsets(topics)

    def truncate_dirty(self, phys_offset: int) -> None:
        """Drop everything at/after phys_offset (a record boundary): CommitLog, CQ, index, epochs."""
        if phys_offset >= self.commitlog.max_offset:
            return
        marks.hit("store truncate dirty")
        self.commitlog.segments.truncate(phys_offset)
        self._drop_visible_from(phys_offset)
        if self.flusher is not None:
            self.flusher.reset(phys_offset)
        self.epochs.truncate(phys_offset)
        self.replica.reset_cursor()
        self._rebuild_queue_table()
        if self.flusher is not None:
            # the checkpoint must not claim flushed data past the new end: recovery would see a later valid
            # (re-appended) region as corruption inside flushed data
            self._save_checkpoint()

    def _drop_visible_from(self, phys_offset: int) -> None:
        """ConsumeQueue/index entries, pending records and visibility at/after phys_offset go (truncate_dirty,
        hide_from)."""
        self.cq_table.truncate_dirty(phys_offset)
        st = self.checkpoint.state
        st.logics_flushed_phys = min(st.logics_flushed_phys, phys_offset)
        self._lfp_candidates.clear()
        if self.index is not None:
            self.index.truncate_dirty(phys_offset)
        while self._pending and self._pending[-1].phys_offset >= phys_offset:
            self._pending.pop()
        self._confirm_offset = min(self._confirm_offset, phys_offset)
        self.replica.replicated_offset = min(self.replica.replicated_offset, phys_offset)  # no stale SYNC acks

    def pending_requests(self) -> list[DispatchRequest]:
        """Records appended but not visible yet (gated by flush or replicas), oldest first (a copy)."""
        return list(self._pending)

    def hide_from(self, phys_offset: int) -> None:
        """Make the records at/after phys_offset (a record boundary) invisible again without touching the CommitLog:
        their ConsumeQueue/index entries go and they wait, pending, until the replica gate releases them
        (`replica.on_replicated`). For a Raft group at start: records of entries not known to be committed.
        The replica gate must be on (else they would be dispatched again at once)."""
        if phys_offset >= self.commitlog.max_offset:
            return
        if not self.replica.gate:
            raise StoreError("hide_from needs the replica visibility gate")
        self._drop_visible_from(phys_offset)
        self.replica._cursor = phys_offset
        self.replica.dispatch_complete()  # gated: decoded into pending, in order
        self.replica.reset_cursor()

    def read_commitlog(self, phys_offset: int, max_size: int) -> bytes:
        """Replication (master): written bytes from phys_offset, ≤ max_size, within one segment."""
        return self.replica.read(phys_offset, max_size)

    def append_raw(self, phys_offset: int, data: bytes) -> int:
        """Replication (slave): master bytes verbatim at the same offsets; returns the new max phys offset."""
        return self.replica.append_raw(phys_offset, data)

    def truncate_invalid(self) -> int:
        """AutoSwitch HA (slave READY, changeToMaster): cut replicated bytes past the last complete record (a
        record whose tail never arrived); every complete record is kept and dispatched. Returns the new max."""
        replica = self.replica
        if replica._cursor is not None and replica._cursor < self.commitlog.max_offset:
            replica.dispatch_complete()
            cursor = replica._cursor
            if cursor is not None and cursor < self.commitlog.max_offset:
                marks.hit("store truncate invalid tail")
                self.truncate_dirty(cursor)
        replica.reset_cursor()  # everything complete is dispatched; the next raw append restarts at the end
        return self.commitlog.max_offset

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        """The (epoch, startOffset) history, oldest first (a copy)."""
        return list(self.epochs.entries)

    def replace_epochs(self, entries: list[tuple[int, int]]) -> None:
        """AutoSwitch HA: persist an epoch history computed by replication.EpochCache."""
        self.epochs.replace(entries)

    @property
    def last_file_start(self) -> int:
        """Start offset of the last CommitLog segment (the max offset when there is none)."""
        last = self.commitlog.segments.last
        return last.start_offset if last is not None else self.commitlog.max_offset

    @property
    def master_epoch(self) -> int:
        return self.epochs.current

    def set_master_epoch(self, epoch: int, start_offset: int) -> None:
        self.epochs.set(epoch, start_offset)

    def _on_segments_deleted(self, min_phys: int) -> None:
        self.cq_table.delete_expired(min_phys)
        if self.index is not None:
            self.index.delete_expired(min_phys)

    @property
    def max_phys_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def min_phys_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.flusher.flushed_offset if self.flusher is not None else 0

    @property
    def confirm_offset(self) -> int:
        return self._confirm_offset

    def is_in_memory(self, phys_offset: int) -> bool:
        return self.commitlog.max_offset - phys_offset <= self._memory_window

    def runtime_info(self) -> dict[str, str]:
        d = self.recovery_decision
        return {
            "commitLogMinOffset": str(self.min_phys_offset),
            "commitLogMaxOffset": str(self.max_phys_offset),
            "commitLogFlushedOffset": str(self.flushed_offset),
            "confirmOffset": str(self.confirm_offset),
            "flushDiskType": self.config.flush_disk_type,
            "confirmOffsetMode": str(self.config.confirm_offset_mode),
            "commitLogSegments": str(len(self.commitlog.segments)),
            "flushCount": str(self.flusher.flush_count if self.flusher else 0),
            "diskFull": str(bool(self.retention and self.retention.disk_full)).lower(),
            "masterEpoch": str(self.master_epoch),
            "recovery": d.mark if d is not None else "",
            **self.recovery_progress.fields(),
            "backgroundError": repr(self.background_error) if self.background_error else "",
            "readOnly": self.read_only_reason,
        }
