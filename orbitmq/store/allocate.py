"""Segment files created ahead of need, off the event loop (RocketMQ's AllocateMappedFileService).

Creating a segment is `Disk.create`: open, fallocate the whole size, fsync the file, fsync the directory. For a
1 GiB CommitLog segment on a busy disk that is tens to hundreds of milliseconds, and it used to happen on the event
loop in the send that crossed the segment boundary. A writer now asks for its *next* file early (`prepare`, when its
current file is half full); one worker thread per process creates it under its final name; when the writer rolls,
`take` hands over the ready Backing (or waits for a creation still running, or creates inline if none was asked
for or the early creation failed).

What does not change: a file is fully allocated and its name durable (directory fsync) before anything is written
into it, and a creation that fails (ENOSPC, EMFILE) is an OSError raised by `take` on the write path, which refuses
the write exactly as an inline creation did (an early failure is retried once inline, so the error reported is the
current one). A prepared file nobody took is closed and deleted (`discard`) when its writer truncates, closes or is
destroyed; one left by a crash is an empty segment past the end, which recovery already drops or writes into.

The allocation thread also makes the start of the new mapping writable (MmapBacking.prefault, MADV_POPULATE_WRITE
through ctypes, without the interpreter lock): the first store into a fresh mapping costs 3-50 ms of kernel work
here, which the rolling send paid even with the file made ahead.

A disk whose `flush_in_thread` is false (SimDisk, single-threaded) creates the prepared file at once, on the calling
thread: the same file appears at the same moment of the write sequence, so crash tests see it.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from orbitmq.base import marks
from orbitmq.store.disk import Backing, Disk

log = logging.getLogger(__name__)

# smaller files are created inline when needed: they cost little to create, and a spare one ahead is not worth a
# file (unit tests with segments of a few entries keep their exact directory listings)
AHEAD_MIN_SIZE = 64 * 1024

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


PREFAULT_BYTES = 1 << 20  # of a file created ahead, made writable in the mapping by the allocation thread


def _create_ahead(disk: Disk, path: str, size: int) -> Backing:
    """On the allocation thread: create the file, then pay the mapping's first-write cost here (see prefault)."""
    backing = disk.create(path, size)
    prefault = getattr(backing, "prefault", None)
    if prefault is not None:
        try:
            prefault(PREFAULT_BYTES)
        except (OSError, ValueError, TypeError, BufferError):
            log.debug("prefault of %s failed", path, exc_info=True)
    return backing


def _pool() -> ThreadPoolExecutor:
    """The process-wide allocation thread (one: creations are sequential disk work, and bounded by the writers —
    each asks for at most one file ahead)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orbitmq-segment-alloc")
        return _executor


class AheadAllocator:
    """The files one writer (a SegmentList, a ConsumeQueue) asked for ahead: path -> creation."""

    __slots__ = ("_disk", "_pending")

    def __init__(self, disk: Disk) -> None:
        self._disk = disk
        self._pending: dict[str, Future[Backing]] = {}

    def prepare(self, path: str, size: int) -> None:
        """Start creating `path` (size bytes) unless it is already asked for or small. Never raises."""
        if size < AHEAD_MIN_SIZE or path in self._pending:
            return
        disk = self._disk
        if not getattr(disk, "flush_in_thread", False):
            fut: Future[Backing] = Future()
            try:
                fut.set_result(disk.create(path, size))
            except OSError as e:
                fut.set_exception(e)
        else:
            try:
                fut = _pool().submit(_create_ahead, disk, path, size)
            except RuntimeError:  # interpreter shutting down: the writer creates inline when it rolls
                return
        marks.hit("segment prepared ahead")
        self._pending[path] = fut

    def is_prepared(self, path: str) -> bool:
        return path in self._pending

    def take(self, path: str, size: int) -> Backing:
        """The Backing of a new file at `path`: the one prepared ahead (waiting for it if it is still being created),
        else one created now. Raises OSError when the file cannot be created."""
        fut = self._pending.pop(path, None)
        if fut is not None:
            try:
                backing = fut.result()
            except OSError as e:
                marks.hit("segment prepared ahead failed")
                log.warning("creating %s ahead failed (%s); trying again on the write path", path, e)
            else:
                if backing.size == size:
                    marks.hit("segment taken from the ahead allocator")
                    return backing
                backing.close()  # asked for another size (a config change between prepare and roll)
                self._disk.delete(path)
        return self._disk.create(path, size)

    def discard(self) -> None:
        """Close and delete every prepared file not taken (waits for a creation still running)."""
        pending, self._pending = self._pending, {}
        for path, fut in pending.items():
            try:
                backing = fut.result()
            except OSError:
                continue  # nothing was left behind (a failed creation removes its file)
            backing.close()
            self._disk.delete(path)
            marks.hit("segment prepared ahead discarded")

    def __len__(self) -> int:
        return len(self._pending)
