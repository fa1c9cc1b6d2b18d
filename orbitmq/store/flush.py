"""CommitLog flushing: one flush in flight at a time, group commit for SYNC_FLUSH, periodic loop for ASYNC_FLUSH.

A flush makes [flushed_offset, max_offset-at-start) durable through Backing.flush, off the event loop when the
Disk says so (fdatasync/msync block). Waiters whose end offset is covered are released together (group commit).
Appends keep running during a flush: the single writer is never blocked by the disk.

A failed flush (fsync/fdatasync error) is final: after it Linux may report a later fsync of the same file as fine
although the dirty pages were dropped ("fsyncgate"), so the service never flushes again. Every waiter of the failed
round and every later one is released with False, flush() raises FlushFailedError, and `on_failed` tells the store,
which turns read-only (docs/design/durability.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from functools import partial

from orbitmq.base.clock import Clock
from orbitmq.base.errors import StoreError
from orbitmq.store.commitlog import CommitLog
from orbitmq.store.disk import Backing, Disk

log = logging.getLogger(__name__)
PAGE = 4096
# Test-only (the FUSE power-loss harness proves it catches a missing fsync): when set to 1, CommitLog flush rounds
# skip the fsync and report success. Read once per process; never documented for users.
UNSAFE_NO_FSYNC_ENV = "ORBITMQ_TEST_UNSAFE_NO_FSYNC"
_unsafe_no_fsync: bool | None = None


def unsafe_no_fsync() -> bool:
    """True when the test-only switch disables the CommitLog fsync (read once, logged loudly)."""
    global _unsafe_no_fsync
    if _unsafe_no_fsync is None:
        _unsafe_no_fsync = os.environ.get(UNSAFE_NO_FSYNC_ENV) == "1"
        if _unsafe_no_fsync:
            log.critical("%s=1: CommitLog flushes do NOT fsync; acknowledged messages are lost on power loss "
                         "(test harness only, never in production)", UNSAFE_NO_FSYNC_ENV)
    return _unsafe_no_fsync


class FlushFailedError(StoreError):
    """The CommitLog could not be made durable (an earlier fsync failed): nothing written after it is flushed."""


def _resolve(fut: asyncio.Future[bool], ok: bool) -> None:
    if not fut.done():
        fut.set_result(ok)


def _call(callback: Callable[[bool], None], ok: bool) -> None:
    try:
        callback(ok)
    except Exception:  # one waiter's callback must not stop the others' release
        log.exception("group-commit waiter callback failed")


def flush_ranges(ranges: list[tuple[Backing, int, int]]) -> None:
    """Make each (backing, start, end) range durable (blocking: callers run it in a worker thread when they can)."""
    for backing, start, end in ranges:
        backing.flush(start, end)


class FlushService:
    def __init__(
        self, commitlog: CommitLog, disk: Disk, clock: Clock, on_flushed: Callable[[int, int], None],
        on_failed: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.commitlog = commitlog
        self.disk = disk
        self.clock = clock
        self.on_flushed = on_flushed  # (flushed phys offset, store timestamp of the last flushed record)
        self.on_failed = on_failed  # called once, with the error, when a flush fails (the store turns read-only)
        self.failed: BaseException | None = None
        self.inflight_since = 0.0  # time.monotonic() when the flush in flight started (0: none in flight)
        self.flushed_offset = commitlog.max_offset
        self.flushed_store_timestamp = commitlog.last_store_timestamp
        self.flush_count = 0  # completed flush rounds that wrote something (group commit tests read it)
        self._inflight: asyncio.Future[None] | None = None
        # (end offset, loop-time deadline, callback, loop-time arrival), in arrival order (so mostly by offset and
        # by deadline)
        self._waiters: list[tuple[int, float, Callable[[bool], None], float]] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._group_task: asyncio.Task[None] | None = None
        self._generation = 0
        self._last_thorough_ms = clock.monotonic_ms()
        self._skip_fsync = unsafe_no_fsync()

    def reset(self, offset: int) -> None:
        """After truncation: nothing beyond `offset` exists, so nothing beyond it is flushed."""
        self._generation += 1
        self.flushed_offset = min(self.flushed_offset, offset)

    def dirty_bytes(self) -> int:
        return self.commitlog.max_offset - self.flushed_offset

    async def flush(self) -> int:
        """Flush everything written so far; returns the flushed offset. Concurrent callers share rounds."""
        while self._inflight is not None:
            await asyncio.shield(self._inflight)
        if self.failed is not None:
            raise FlushFailedError(f"CommitLog flush failed earlier ({self.failed!r}); the store is read-only")
        if self.commitlog.max_offset <= self.flushed_offset:
            return self.flushed_offset
        loop = asyncio.get_running_loop()
        self._inflight = loop.create_future()
        self.inflight_since = time.monotonic()
        try:
            await self._flush_once(loop)
        except Exception as e:
            self._fail(e)
            raise
        finally:
            self.inflight_since = 0.0
            fut, self._inflight = self._inflight, None
            fut.set_result(None)
        return self.flushed_offset

    def _fail(self, error: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = error
        log.critical("CommitLog flush failed at offset %d (%r): the store refuses every later write; restart the "
                     "broker once the disk is repaired (recovery re-reads the CommitLog)", self.flushed_offset, error)
        if self.on_failed is not None:
            try:
                self.on_failed(error)
            except Exception:
                log.exception("flush failure callback failed")

    @property
    def has_waiters(self) -> bool:
        return bool(self._waiters)

    def busy(self) -> tuple[float, int, float]:
        """(ms the flush in flight has been running, group-commit waiters, ms the oldest waiter has waited)."""
        now = time.monotonic()
        inflight = (now - self.inflight_since) * 1000 if self.inflight_since else 0.0
        waiters = self._waiters
        oldest = (asyncio.get_running_loop().time() - waiters[0][3]) * 1000 if waiters else 0.0
        return inflight, len(waiters), oldest

    async def _flush_once(self, loop: asyncio.AbstractEventLoop) -> None:
        target = self.commitlog.max_offset
        ts = self.commitlog.last_store_timestamp
        gen = self._generation
        ranges: list[tuple[Backing, int, int]] = []
        segs = []
        for seg in self.commitlog.segments:
            seg_end = seg.start_offset + seg.size
            if seg_end <= self.flushed_offset or seg.start_offset >= target:
                continue
            start = max(self.flushed_offset, seg.start_offset) - seg.start_offset
            end = min(target, seg_end) - seg.start_offset
            if end > start:
                ranges.append((seg.backing, start, end))
                segs.append((seg, end))
        if self._skip_fsync:
            pass  # ORBITMQ_TEST_UNSAFE_NO_FSYNC: the harness checks that a power loss then loses acked data
        elif self.disk.flush_in_thread:
            await loop.run_in_executor(None, flush_ranges, ranges)
        else:
            flush_ranges(ranges)
        if gen != self._generation:
            return  # truncated meanwhile: the range flushed no longer exists
        for seg, end in segs:
            seg.flushed_position = max(seg.flushed_position, end)
        self.flush_count += 1
        self.flushed_offset = target
        self.flushed_store_timestamp = ts
        self.on_flushed(target, ts)

    # ---- group commit --------------------------------------------------------------------------------
    def add_waiter(self, end_offset: int, timeout_ms: int, callback: Callable[[bool], None]) -> None:
        """Call `callback(True)` from the loop once a flush covers `end_offset`; `callback(False)` on timeout or
        flush failure (data stays written). The SYNC_FLUSH hot path: no future, task or timer per waiter."""
        if self.flushed_offset >= end_offset:
            callback(True)
            return
        if self.failed is not None:  # never a success after a failed fsync
            callback(False)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + timeout_ms / 1000
        self._waiters.append((end_offset, deadline, callback, now))
        if self._group_task is None or self._group_task.done():
            self._group_task = loop.create_task(self._run_group_commit_loop())
        expiry = self._expiry
        if expiry is None or deadline < expiry.when():  # usually armed already, for an earlier deadline
            if expiry is not None:
                expiry.cancel()
            self._expiry = loop.call_at(deadline, self._expire_waiters)

    async def wait_flushed(self, end_offset: int, timeout_ms: int) -> bool:
        """Wait until a flush covers `end_offset`; False on timeout or flush failure (data stays written)."""
        if self.flushed_offset >= end_offset:
            return True
        if self.failed is not None:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.add_waiter(end_offset, timeout_ms, partial(_resolve, fut))
        return await fut

    def _release(self, ok: bool) -> None:
        """After a flush round: call back every waiter it covers (all of them, with False, if it failed)."""
        waiters = self._waiters
        flushed = self.flushed_offset
        if not ok or waiters[-1][0] <= flushed:  # the common case: appends are ordered, the round covers all
            done, self._waiters = waiters, []
        else:
            done = [w for w in waiters if w[0] <= flushed]
            self._waiters = [w for w in waiters if w[0] > flushed]
        for _end, _deadline, callback, _at in done:
            _call(callback, ok)

    def _expire_waiters(self) -> None:
        """The one timeout timer: fail waiters past their deadline and re-arm for the earliest one left."""
        self._expiry = None
        if not self._waiters:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired = [w for w in self._waiters if w[1] <= now]
        if expired:
            self._waiters = [w for w in self._waiters if w[1] > now]
            for _end, _deadline, callback, _at in expired:
                _call(callback, False)
        if self._waiters:
            self._expiry = loop.call_at(min(w[1] for w in self._waiters), self._expire_waiters)

    async def _run_group_commit_loop(self) -> None:
        while self._waiters:
            try:
                await self.flush()
                ok = True
            except Exception:  # a failed fsync (logged by _fail): every waiter is released with False, now and later
                ok = False
            if self._waiters:
                self._release(ok)
            if not ok:
                return

    # ---- periodic flush (ASYNC_FLUSH, and the WAIT=false writes of SYNC_FLUSH) ------------------------
    async def run_flush_loop(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await self.flush_if_due(least_pages, thorough_interval_ms)
            except Exception:  # _fail logged it and told the store (read-only): no flush is ever retried
                return

    async def flush_if_due(self, least_pages: int, thorough_interval_ms: int) -> bool:
        dirty = self.dirty_bytes()
        if dirty <= 0:
            return False
        now = self.clock.monotonic_ms()
        thorough = now - self._last_thorough_ms >= thorough_interval_ms
        if dirty < least_pages * PAGE and not thorough:
            return False
        if thorough:
            self._last_thorough_ms = now
        await self.flush()
        return True

    async def close(self) -> None:
        if self._group_task is not None and not self._group_task.done():
            await self._group_task
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        waiters, self._waiters = self._waiters, []
        for _end, _deadline, callback, _at in waiters:
            _call(callback, False)
