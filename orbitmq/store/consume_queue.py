"""ConsumeQueue: per (topic, queue_id) array of 20-byte entries (phys_offset, size, tags code) over the CommitLog,
and ConsumeQueueTable, the DispatchTarget that owns every queue under `consumequeue/<topic>/<queueId>/`.

Derived data only: built by dispatch, rebuilt by re-dispatch. Never reads the CommitLog (a timestamp lookup is
handed a callable). All file I/O goes through the injected Disk. Why the rules: docs/design/store-derived.md.
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from operator import add, lt

from orbitmq.base import marks
from orbitmq.base.errors import ConfigError, CorruptionError
from orbitmq.base.invariant import check
from orbitmq.store.allocate import AheadAllocator
from orbitmq.store.disk import Backing, Disk, tracks_writes
from orbitmq.store.dispatch import DispatchRequest, SkipLog, queue_name_error
from orbitmq.store.layout import CQ_ENTRY, CQ_ENTRY_SIZE, CQ_FILLER, parse_segment_name, segment_name

FILLER_SIZE = CQ_FILLER[1]  # an entry with this size is a gap filler, not a message
_FILLER_BYTES = CQ_ENTRY.pack(*CQ_FILLER)
_pack_into = CQ_ENTRY.pack_into
_unpack_from = CQ_ENTRY.unpack_from
_iter_unpack = CQ_ENTRY.iter_unpack
_E = CQ_ENTRY_SIZE
_LOW_HALF = bytes(range(0x80))
_FILLER_SIZE_BYTES = FILLER_SIZE.to_bytes(4, "big")
_RECOVER_SEGMENTS = 3  # recovery re-validates the last three segments; older ones are taken as full and valid

Entry = tuple[int, int, int]  # (phys_offset, size, tags_code)


class _Seg:
    """One segment file; `start` is its byte offset in the queue's logical file."""

    __slots__ = ("start", "path", "backing", "buf", "tracked")

    def __init__(self, start: int, path: str, backing: Backing) -> None:
        self.start = start
        self.path = path
        self.backing = backing
        self.buf = backing.buf
        self.tracked = tracks_writes(backing)  # put() skips a no-op mark_written


def _segment_looks_valid(buf: memoryview, size_bytes: int) -> bool:
    """C-speed check that every entry in buf[:size_bytes] has phys >= 0 and size > 0 (byte columns, no loop)."""
    data = buf[:size_bytes].tobytes()
    count = size_bytes // _E
    if data[0::_E].translate(None, _LOW_HALF) or data[8::_E].translate(None, _LOW_HALF):
        return False  # a byte >= 0x80 in a sign position: a negative phys_offset or size
    ored = 0
    for j in range(8, 12):
        ored |= int.from_bytes(data[j::_E], "big")
    return b"\x00" not in ored.to_bytes(count, "big")  # an entry whose 4 size bytes are all zero


def _columns(data: bytes, count: int) -> tuple[array[int], array[int]]:
    """The phys offset (8 bytes) and size (4 bytes) columns of `count` big-endian entries, as arrays: bytes
    gathered with strided slices (C speed), not unpacked entry by entry."""
    phys_b = bytearray(8 * count)
    for j in range(8):
        phys_b[j::8] = data[j::_E]
    size_b = bytearray(4 * count)
    for j in range(4):
        size_b[j::4] = data[8 + j::_E]
    phys, sizes = array("q"), array("i")
    phys.frombytes(phys_b)
    sizes.frombytes(size_b)
    if sys.byteorder == "little":
        phys.byteswap()
        sizes.byteswap()
    return phys, sizes


def _valid_prefix(buf: memoryview, size_bytes: int, prev_end: int) -> tuple[int, int]:
    """(bytes of valid entries at the start of buf, phys end of the last real one). Valid: phys >= 0, size > 0,
    and phys + size beyond the previous real entry's (a stale entry from before a crash fails that)."""
    limit = _nonzero_extent(buf, 0, size_bytes)
    limit = min(size_bytes, limit + (-limit) % _E)  # all-zero entries after it are invalid anyway
    count = limit // _E
    if count and _segment_looks_valid(buf, limit):  # the usual case (phys >= 0, size > 0, no filler, ends
        data = buf[:limit].tobytes()  # increasing), checked by columns with C-level maps
        phys, sizes = _columns(data, count)
        if _FILLER_SIZE_BYTES not in data:  # anywhere (even unaligned): rare, and then the loop below decides
            ends = list(map(add, phys, sizes))
            if ends[0] > prev_end and all(map(lt, ends, islice(ends, 1, None))):
                return limit, ends[-1]
    ok = 0
    for phys, size, _tags in _iter_unpack(buf[:limit]):
        if phys < 0 or size <= 0:
            break
        if size != FILLER_SIZE:
            if phys + size <= prev_end:
                break
            prev_end = phys + size
        ok += _E
    return ok, prev_end


_ZERO_CHUNK = bytes(1 << 16)


def _nonzero_extent(buf: memoryview, start: int, end: int) -> int:
    """End of the last non-zero byte in buf[start:end] (start if all zero). Compared backwards in 64 KiB chunks
    (memcmp) and stripped only in the last non-zero one: bytes.rstrip over a mostly-zero 6 MB segment took 60 ms,
    twice per queue at every start."""
    step = len(_ZERO_CHUNK)
    pos = end
    while pos > start:
        lo = max(start, pos - step)
        chunk = buf[lo:pos].tobytes()
        if chunk != (_ZERO_CHUNK if pos - lo == step else bytes(pos - lo)):
            return lo + len(chunk.rstrip(b"\x00"))
        pos = lo
    return start


class ConsumeQueue:
    """Entries of one queue. Byte positions (`*_bytes`) are logical: queue_offset * 20."""

    __slots__ = ("topic", "queue_id", "directory", "_disk", "_seg_size", "_segs", "_tail", "_end_bytes",
                 "_min_bytes", "_flushed_bytes", "_max_phys", "_min_phys_seen", "_ahead", "_prepare_rel")

    def __init__(self, topic: str, queue_id: int, directory: str, segment_size_bytes: int, disk: Disk) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self._disk = disk
        self._seg_size = segment_size_bytes
        self._segs: list[_Seg] = []
        self._tail: _Seg | None = None
        self._end_bytes = 0  # next write position == max_offset * 20
        self._min_bytes = 0
        self._flushed_bytes = 0
        self._max_phys = 0  # phys + size of the newest entry (duplicate-dispatch guard)
        self._min_phys_seen = -1  # last min_phys given to correct_min_offset (lets it resume where it stopped)
        # when an entry lands half-way into the tail segment, the next segment file is created ahead, off the event
        # loop (allocate.py); a tail reached some other way (fillers over the half) rolls with an inline creation
        self._ahead = AheadAllocator(disk)
        self._prepare_rel = segment_size_bytes // 2 // _E * _E

    # ---- queries -------------------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """Next queue offset to be written."""
        return self._end_bytes // _E

    @property
    def min_offset(self) -> int:
        return self._min_bytes // _E

    @property
    def max_phys_end(self) -> int:
        """phys_offset + size of the newest entry (0 when none)."""
        return self._max_phys

    def read(self, offset: int, max_entries: int) -> list[Entry]:
        """Up to max_entries entries from queue offset `offset`, never past the end of its segment.

        Filler entries (size == FILLER_SIZE) are returned as they are: they keep offsets aligned.
        """
        it = self.read_iter(offset, max_entries)
        return [] if it is None else list(it)

    def read_iter(self, offset: int, max_entries: int) -> Iterator[Entry] | None:
        """read() as a lazy iterator (entries unpacked as they are consumed: a pull scans a window of up to 800
        entries but usually stops after 32), or None when read() would return []. Consume it before the queue
        can be truncated or its segment closed (it holds a view of the segment)."""
        pos = offset * _E
        if pos < self._min_bytes or pos >= self._end_bytes or max_entries <= 0:
            return None
        segs = self._segs
        first = segs[0].start
        if pos < first:
            return None
        seg = segs[(pos - first) // self._seg_size]
        rel = pos - seg.start
        end = self._end_bytes - seg.start
        if end > self._seg_size:
            end = self._seg_size
        want = rel + max_entries * _E
        if want < end:
            end = want
        if end <= rel:
            return None
        return _iter_unpack(seg.buf[rel:end])

    def entry(self, offset: int) -> Entry | None:
        """The entry at one queue offset, None outside [min_offset, max_offset)."""
        pos = offset * _E
        if pos < self._min_bytes or pos >= self._end_bytes or not self._segs or pos < self._segs[0].start:
            return None
        seg = self._segs[(pos - self._segs[0].start) // self._seg_size]
        return _unpack_from(seg.buf, pos - seg.start)

    def last_entry(self) -> Entry | None:
        if self._end_bytes <= self._min_bytes:
            return None
        return self.entry(self.max_offset - 1)

    def segment_end_offset(self, offset: int) -> int:
        """First queue offset of the segment after the one holding `offset` (where a reader rolls to)."""
        per = self._seg_size // _E
        return offset + per - offset % per

    def offset_by_time(self, timestamp_ms: int, lookup_store_time: Callable[[int, int], int]) -> int:
        """Queue offset of the message stored nearest to timestamp_ms (0 when nothing is readable).

        lookup_store_time(phys_offset, size) returns the record's store timestamp, or a negative value when the
        record is gone (below the CommitLog min offset): such entries, like fillers, are skipped to the right.
        The segment searched is the first whose last entry was stored at or after the target (else the last);
        the reference uses file mtime for this, the last entry's store time is the same fact without depending
        on file-system timestamps.
        """
        lo_bytes, end_bytes = self._min_bytes, self._end_bytes
        if end_bytes <= lo_bytes or not self._segs:
            return 0
        chosen = self._segs[-1]
        for seg in self._segs:
            seg_end = min(seg.start + self._seg_size, end_bytes)
            if seg_end <= lo_bytes:
                continue
            phys, size, _ = _unpack_from(seg.buf, seg_end - _E - seg.start)
            if size != FILLER_SIZE and lookup_store_time(phys, size) >= timestamp_ms:
                chosen = seg
                break
        seg = chosen
        lo = max(lo_bytes, seg.start) // _E
        hi = (min(seg.start + self._seg_size, end_bytes) - _E) // _E
        left = right = -1
        left_t = right_t = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            phys, size, _ = _unpack_from(seg.buf, mid * _E - seg.start)
            t = lookup_store_time(phys, size) if size != FILLER_SIZE else -1
            if t < 0:
                lo = mid + 1
            elif t == timestamp_ms:
                return mid
            elif t > timestamp_ms:
                right, right_t, hi = mid, t, mid - 1
            else:
                left, left_t, lo = mid, t, mid + 1
        if left < 0:
            return right if right >= 0 else 0
        if right < 0:
            return left
        return right if timestamp_ms - left_t > right_t - timestamp_ms else left

    # ---- append (hot path) ---------------------------------------------------------------------------
    def put(self, phys_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Append one entry at queue_offset; False when it is a duplicate and was skipped."""
        end_phys = phys_offset + size
        if end_phys <= self._max_phys:
            marks.hit("cq duplicate dispatch skipped")
            return False
        pos = queue_offset * _E
        seg = self._tail
        if seg is None or pos != self._end_bytes or pos - seg.start >= self._seg_size:
            seg = self._prepare_append(pos)
            if seg is None:
                return False
        rel = pos - seg.start
        if rel == self._prepare_rel:
            self._ahead.prepare(os.path.join(self.directory, segment_name(seg.start + self._seg_size)), self._seg_size)
        _pack_into(seg.buf, rel, phys_offset, size, tags_code)
        if seg.tracked:
            seg.backing.mark_written(rel, rel + _E)
        self._end_bytes = pos + _E
        self._max_phys = end_phys
        return True

    def _prepare_append(self, pos: int) -> _Seg | None:
        """Slow path of put: first segment, gap, duplicate offset or segment roll. Returns the segment for pos."""
        if pos < self._end_bytes:
            marks.hit("cq queue offset already written")
            return None
        empty = self._end_bytes <= self._min_bytes  # nothing readable: a (re)started queue
        if empty and self._tail is not None and pos >= self._tail.start + self._seg_size:
            marks.hit("cq empty queue restarted further on")
            self.destroy()  # only expired entries or fillers: start over at the segment holding pos
        if self._tail is None:
            # the segment holding pos is created and pre-filled up to pos with fillers
            start = pos - pos % self._seg_size
            self._add_segment(start)
            self._end_bytes = start
        if pos > self._end_bytes:
            if not empty:
                marks.hit("cq gap filled")
            self._fill(pos)
        if empty:
            self._min_bytes = pos  # fillers before the first message are never readable
        tail = self._tail
        assert tail is not None
        if pos - tail.start >= self._seg_size:
            tail = self._add_segment(tail.start + self._seg_size)
        return tail

    def _fill(self, pos: int) -> None:
        """Write filler entries from the current end up to pos (rolling segments as needed)."""
        while self._end_bytes < pos:
            tail = self._tail
            assert tail is not None
            if self._end_bytes - tail.start >= self._seg_size:
                tail = self._add_segment(tail.start + self._seg_size)
            rel = self._end_bytes - tail.start
            stop = min(pos - tail.start, self._seg_size)
            tail.buf[rel:stop] = _FILLER_BYTES * ((stop - rel) // _E)
            tail.backing.mark_written(rel, stop)
            self._end_bytes = tail.start + stop

    def _add_segment(self, start: int) -> _Seg:
        check(start % self._seg_size == 0, f"cq segment start {start} not aligned to {self._seg_size}")
        check(not self._segs or start == self._segs[-1].start + self._seg_size, "cq segments must be contiguous")
        path = os.path.join(self.directory, segment_name(start))
        if not self._ahead.is_prepared(path):
            self._ahead.discard()  # prepared for another start (the queue was cut or restarted): not left behind
        seg = _Seg(start, path, self._ahead.take(path, self._seg_size))
        self._segs.append(seg)
        self._tail = seg
        return seg

    # ---- load / recover / truncate -------------------------------------------------------------------
    def load(self) -> None:
        """Open the segment files (recover() decides how much of them is valid)."""
        starts = sorted(s for s in (parse_segment_name(n) for n in self._disk.list_files(self.directory))
                        if s is not None)
        keep_from = 0
        for i in range(1, len(starts)):
            if starts[i] != starts[i - 1] + self._seg_size:
                keep_from = i  # a hole: only the newest contiguous run is usable
        for start in starts[:keep_from]:
            marks.hit("cq non-contiguous segment dropped")
            self._disk.delete(os.path.join(self.directory, segment_name(start)))
        for start in starts[keep_from:]:
            path = os.path.join(self.directory, segment_name(start))
            if start % self._seg_size:
                raise CorruptionError(path, 0, f"segment name not a multiple of the segment size {self._seg_size}")
            actual = self._disk.file_size(path)
            if actual != self._seg_size:
                raise CorruptionError(path, 0, f"file size {actual} != mapped_file_size_consume_queue "
                                               f"{self._seg_size} (was the setting changed?)")
            self._segs.append(_Seg(start, path, self._disk.open(path, self._seg_size)))
        self._tail = self._segs[-1] if self._segs else None
        if self._segs:
            self._min_bytes = self._segs[0].start
            self._end_bytes = self._segs[-1].start + self._seg_size
            self._flushed_bytes = self._end_bytes

    def recover(self) -> int:
        """Keep the valid prefix of the last segments (phys >= 0, size > 0, phys ends increasing); drop the rest.

        Returns phys + size of the newest entry (0 if none).
        """
        segs = self._segs
        if not segs:
            return 0
        first_idx = max(0, len(segs) - _RECOVER_SEGMENTS)
        for i in range(first_idx):  # older segments are not rescanned entry by entry, but must not hold holes
            if not _segment_looks_valid(segs[i].buf, self._seg_size):
                marks.hit("cq hole before the recovery window")
                first_idx = i
                break
        cut = segs[first_idx].start
        prev_end = -1
        last = len(segs) - 1
        for idx in range(first_idx, last + 1):
            seg = segs[idx]
            if idx < last and _segment_looks_valid(seg.buf, self._seg_size):
                ok = self._seg_size  # a full, hole-free segment: no need to walk it entry by entry
                phys, size, _ = _unpack_from(seg.buf, self._seg_size - _E)
                if size != FILLER_SIZE:
                    prev_end = phys + size
            else:
                ok, prev_end = _valid_prefix(seg.buf, self._seg_size, prev_end)
            cut = seg.start + ok
            if ok < self._seg_size:
                break
        self._end_bytes = cut
        self._cut_segments_after(cut, scan_stale=True)
        self._max_phys = self._scan_max_phys()
        self._min_phys_seen = -1
        self.correct_min_offset(0)
        return self._max_phys

    def _scan_max_phys(self) -> int:
        pos = self._end_bytes - _E
        while self._segs and pos >= max(self._min_bytes, self._segs[0].start):
            seg = self._segs[(pos - self._segs[0].start) // self._seg_size]
            phys, size, _ = _unpack_from(seg.buf, pos - seg.start)
            if size != FILLER_SIZE:
                return phys + size
            pos -= _E
        return 0

    def _cut_segments_after(self, cut: int, scan_stale: bool) -> None:
        """Make `cut` the end: delete segments starting after it, zero (and flush) stale bytes after it."""
        self._ahead.discard()
        while self._segs and (self._segs[-1].start > cut or (self._segs[-1].start == cut and len(self._segs) > 1)):
            seg = self._segs.pop()
            seg.backing.close()
            self._disk.delete(seg.path)
        if not self._segs:
            self._tail = None
            self._end_bytes = self._min_bytes = self._flushed_bytes = cut
            return
        self._tail = seg = self._segs[-1]
        rel = cut - seg.start
        if rel < self._seg_size:
            old_end = self._seg_size if scan_stale else max(rel, self._end_bytes - seg.start)
            stale_end = _nonzero_extent(seg.buf, rel, min(old_end, self._seg_size))
            if stale_end > rel:
                seg.buf[rel:stale_end] = bytes(stale_end - rel)
                seg.backing.mark_written(rel, stale_end)
                seg.backing.flush(rel, stale_end)
        self._end_bytes = cut
        self._min_bytes = min(self._min_bytes, cut)
        self._flushed_bytes = min(self._flushed_bytes, cut)

    def truncate_dirty(self, phys_offset: int) -> None:
        """Drop every entry whose phys_offset >= phys_offset (fillers at the new tail go with them)."""
        if not self._segs or self._end_bytes <= self._segs[0].start:
            return
        first = self._segs[0].start
        pos = self._end_bytes
        # whole segments first: a segment whose first real entry is >= the cut goes entirely
        while pos > first:
            seg = self._segs[(pos - _E - first) // self._seg_size]
            phys, size, _ = _unpack_from(seg.buf, pos - _E - seg.start)
            if size != FILLER_SIZE and phys < phys_offset:
                break
            pos -= _E
        if pos == self._end_bytes:
            return
        marks.hit("cq truncated dirty entries")
        self._cut_segments_after(pos, scan_stale=False)
        self._max_phys = self._scan_max_phys()

    def correct_min_offset(self, min_phys: int) -> None:
        """min_offset = first non-filler entry whose phys_offset >= min_phys (max_offset when there is none)."""
        if not self._segs:
            return
        start = self._segs[0].start
        if min_phys >= self._min_phys_seen >= 0 and self._min_bytes >= start:
            start = self._min_bytes  # the CommitLog min only grows: resume where the last correction stopped
        self._min_phys_seen = min_phys
        first = self._segs[0].start
        pos = start
        end = self._end_bytes
        while pos < end:
            seg = self._segs[(pos - first) // self._seg_size]
            stop = min(end - seg.start, self._seg_size)
            for phys, size, _ in _iter_unpack(seg.buf[pos - seg.start:stop]):
                if phys >= min_phys and size != FILLER_SIZE:
                    self._min_bytes = pos
                    return
                pos += _E
        self._min_bytes = end

    def delete_expired(self, min_phys: int) -> int:
        """Delete leading segments (never the last) whose last entry is below min_phys; returns files deleted."""
        deleted = 0
        while len(self._segs) > 1:
            seg = self._segs[0]
            phys, size, _ = _unpack_from(seg.buf, self._seg_size - _E)
            if size != FILLER_SIZE and phys >= min_phys:
                break  # a filler counts as phys 0, as in the reference
            self._segs.pop(0)
            seg.backing.close()
            self._disk.delete(seg.path)
            deleted += 1
        if self._segs and self._min_bytes < self._segs[0].start:
            self._min_bytes = self._segs[0].start
        self.correct_min_offset(min_phys)
        return deleted

    # ---- durability / lifetime -----------------------------------------------------------------------
    def flush(self) -> None:
        ranges, hi = self.flush_plan()
        for backing, start, end in ranges:
            backing.flush(start, end)
        self.flushed_to(hi)

    def flush_plan(self) -> tuple[list[tuple[Backing, int, int]], int]:
        """What flush() would sync: (backing, start, end) ranges, and the end they cover (for flushed_to)."""
        hi = self._end_bytes
        lo = self._flushed_bytes
        ranges: list[tuple[Backing, int, int]] = []
        if hi <= lo:
            return ranges, -1
        segs = self._segs
        if segs:
            first = segs[0].start
            i = max(0, (lo - first) // self._seg_size)
            while i < len(segs) and segs[i].start < hi:
                seg = segs[i]
                ranges.append((seg.backing, max(lo, seg.start) - seg.start, min(hi - seg.start, self._seg_size)))
                i += 1
        return ranges, hi

    def flushed_to(self, hi: int) -> None:
        """After the ranges of flush_plan() were synced (a truncation meanwhile keeps the lower end)."""
        if hi > self._flushed_bytes:
            self._flushed_bytes = min(hi, self._end_bytes)

    def close(self) -> None:
        self._ahead.discard()  # a file prepared ahead and never written is not left for the next start
        for seg in self._segs:
            seg.backing.close()

    def destroy(self) -> None:
        self.close()
        for seg in self._segs:
            self._disk.delete(seg.path)
        self._segs = []
        self._tail = None


class ConsumeQueueTable:
    """All ConsumeQueues under `root_dir` (the `consumequeue` directory). A DispatchTarget."""

    def __init__(self, root_dir: str, segment_size_bytes: int, disk: Disk) -> None:
        if segment_size_bytes <= 0 or segment_size_bytes % _E:
            raise ConfigError(f"ConsumeQueue segment size must be a positive multiple of 20, got {segment_size_bytes}")
        self.root_dir = root_dir
        self._seg_size = segment_size_bytes
        self._disk = disk
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}
        self._all: list[ConsumeQueue] = []
        self._last: ConsumeQueue | None = None  # the queue of the last dispatch (dropped with its topic)
        self.last_dispatch_timestamp = 0  # store time of the newest dispatched record (checkpoint logics time)
        self.last_dispatch_phys_end = 0  # phys end of the newest dispatched record (checkpoint logics_flushed_phys)
        self.skips = SkipLog("consume queue dispatch")  # records whose topic/queue cannot name a queue

    def load(self) -> None:
        for topic in self._disk.list_dirs(self.root_dir):
            if queue_name_error(topic, 0) is not None:
                self.skips.skip(topic, f"directory {topic!r} is not a legal topic name: not loaded", -1)
                continue
            for qname in self._disk.list_dirs(os.path.join(self.root_dir, topic)):
                if not qname.isdigit() or queue_name_error(topic, int(qname)) is not None:
                    continue
                cq = self._new_queue(topic, int(qname))
                cq.load()

    def recover(self) -> int:
        """Recover every queue; returns the max phys + size referenced by any queue (0 if none)."""
        best = 0
        for cq in self._all:
            best = max(best, cq.recover())
        return best

    def truncate_dirty(self, phys_offset: int) -> None:
        self.last_dispatch_phys_end = min(self.last_dispatch_phys_end, phys_offset)
        for cq in self._all:
            cq.truncate_dirty(phys_offset)

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        qs = self._queues.get(topic)
        return qs.get(queue_id) if qs is not None else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        qs = self._queues.get(topic)
        if qs is not None:
            cq = qs.get(queue_id)
            if cq is not None:
                return cq
        return self._new_queue(topic, queue_id)

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        err = queue_name_error(topic, queue_id)
        check(err is None, f"consume queue for an illegal name: {err}")
        directory = os.path.join(self.root_dir, topic, str(queue_id))
        cq = ConsumeQueue(topic, queue_id, directory, self._seg_size, self._disk)
        self._queues.setdefault(topic, {})[queue_id] = cq
        self._all.append(cq)
        return cq

    def queue_max_offsets(self) -> dict[tuple[str, int], int]:
        return {(cq.topic, cq.queue_id): cq.max_offset for cq in self._all}

    def topics(self) -> Iterable[str]:
        return list(self._queues)

    def flush(self) -> None:
        for cq in tuple(self._all):
            cq.flush()

    def flush_plan(self) -> tuple[list[tuple[Backing, int, int]], list[tuple[ConsumeQueue, int]]]:
        """Every queue's flush_plan(): the ranges to sync (off the event loop) and what to mark flushed after."""
        ranges: list[tuple[Backing, int, int]] = []
        done: list[tuple[ConsumeQueue, int]] = []
        for cq in tuple(self._all):
            r, hi = cq.flush_plan()
            if hi >= 0:
                ranges.extend(r)
                done.append((cq, hi))
        return ranges, done

    def delete_expired(self, min_phys_offset: int) -> int:
        """Delete segments wholly below the CommitLog min offset and correct min offsets; returns files deleted."""
        return sum(cq.delete_expired(min_phys_offset) for cq in tuple(self._all))

    def delete_topic(self, topic: str) -> None:
        if queue_name_error(topic, 0) is not None:
            return  # never a queue of ours, and never a path to remove
        qs = self._queues.pop(topic, None)
        self._last = None
        if qs:
            for cq in qs.values():
                cq.destroy()
            self._all = [cq for cq in self._all if cq.topic != topic]
        self._disk.remove_tree(os.path.join(self.root_dir, topic))

    def close(self) -> None:
        for cq in self._all:
            cq.close()

    def dispatch_many(self, reqs: list[DispatchRequest]) -> None:
        """dispatch() of each request in turn; the queue lookup inline while the queue exists."""
        queues = self._queues
        for req in reqs:
            tx = req.sys_flag & 0xC
            cq = self._last
            if tx == 4 or tx == 12 or cq is None or cq.queue_id != req.queue_id or cq.topic != req.topic:
                qs = queues.get(req.topic)
                cq = qs.get(req.queue_id) if qs is not None and tx != 4 and tx != 12 else None
                if cq is None:  # a half, or a queue to create (or skip): the one-record path
                    self.dispatch(req)
                    continue
                self._last = cq
            self.last_dispatch_phys_end = req.phys_offset + req.size
            cq.put(req.phys_offset, req.size, req.tags_code, req.queue_offset)
            self.last_dispatch_timestamp = req.store_timestamp

    def dispatch(self, req: DispatchRequest) -> None:
        self.last_dispatch_phys_end = req.phys_offset + req.size
        tx = req.sys_flag & 0xC
        if tx == 4 or tx == 12:  # PREPARED / ROLLBACK halves never reach a consumer queue
            return
        cq = self._last  # a batch dispatches a run of requests of one queue
        if cq is None or cq.queue_id != req.queue_id or cq.topic != req.topic:
            qs = self._queues.get(req.topic)
            cq = qs.get(req.queue_id) if qs is not None else None
            if cq is None:
                err = queue_name_error(req.topic, req.queue_id)
                if err is not None:  # logged and skipped: recovery and the write path go on
                    self.skips.skip(f"{req.topic!r}/{req.queue_id}", err, req.phys_offset)
                    return
                cq = self._new_queue(req.topic, req.queue_id)
            self._last = cq
        cq.put(req.phys_offset, req.size, req.tags_code, req.queue_offset)
        self.last_dispatch_timestamp = req.store_timestamp
