"""IndexFile (one hash index file: header, slot table, chained entries) and IndexService (the DispatchTarget
that keeps the list of files under `index/`, puts "topic#key" for UNIQ_KEY and each KEYS word, and answers
QUERY_MESSAGE lookups newest file first).

Derived data only: rebuilt by re-dispatch. Never reads the CommitLog; all I/O goes through the injected Disk.
Formats: store/layout.py; why: docs/design/store-derived.md.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from datetime import datetime

from orbitmq.base import marks
from orbitmq.base.errors import ConfigError, CorruptionError
from orbitmq.base.native import speedups
from orbitmq.model.tags import index_key_hash
from orbitmq.store.disk import Backing, Disk, tracks_writes
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.layout import (
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SLOT,
    INDEX_SLOT_SIZE,
)

MAX_QUERY_NUM = 64  # maxMsgsNumBatch: a query never returns more offsets than this
_INT_MAX = 0x7FFFFFFF
_NAME_LEN = 17  # yyyyMMddHHmmssSSS
_pack_entry = INDEX_ENTRY.pack_into
_unpack_entry = INDEX_ENTRY.unpack_from
_pack_slot = INDEX_SLOT.pack_into
_unpack_slot = INDEX_SLOT.unpack_from
_pack_header = INDEX_HEADER.pack_into
_unpack_phys = struct.Struct(">q").unpack_from  # an entry's phyOffset, at +4
_ENTRY_HASH = struct.Struct(">i16x")  # an entry's keyHash only
_REPAIR_CHUNK = 4096  # entries per step of the backward pass in repair_slots


def index_file_name(timestamp_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as RocketMQ names index files."""
    dt = datetime.fromtimestamp(timestamp_ms / 1000)
    return dt.strftime("%Y%m%d%H%M%S") + f"{timestamp_ms % 1000:03d}"


def index_file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    return INDEX_HEADER_SIZE + max_hash_slot_num * INDEX_SLOT_SIZE + max_index_num * INDEX_ENTRY_SIZE


def index_put_py(buf: bytearray | memoryview, entries_at: int, slot_num: int, n: int, key_hash: int, phys_offset: int,
                 store_timestamp: int, begin_ts: int, begin_phys: int, slot_count: int) -> int:
    """Write entry `n` at the head of its slot's chain, the slot, and the header (end = this entry, counts + 1);
    returns the entry it chains to (0: none). Pure-Python twin of the native index_put (same arguments)."""
    slot_pos = INDEX_HEADER_SIZE + (key_hash % slot_num) * INDEX_SLOT_SIZE
    prev = _unpack_slot(buf, slot_pos)[0]
    if prev <= 0 or prev >= n:
        prev = 0
    diff = (store_timestamp - begin_ts) // 1000
    if diff < 0:
        diff = 0
    elif diff > _INT_MAX:
        diff = _INT_MAX
    _pack_entry(buf, entries_at + n * INDEX_ENTRY_SIZE, key_hash, phys_offset, diff, prev)
    _pack_slot(buf, slot_pos, n)
    _pack_header(buf, 0, begin_ts, store_timestamp, begin_phys, phys_offset, slot_count + (prev == 0), n + 1)
    return prev


def index_put_key_py(buf: bytearray | memoryview, entries_at: int, slot_num: int, n: int, topic: str, key: str,
                     phys_offset: int, store_timestamp: int, begin_ts: int, begin_phys: int, slot_count: int) -> int:
    """index_put_py of the index key "topic#key" (its hash taken here). Pure-Python twin of the native
    index_put_key (same arguments), which hashes without building the key string."""
    return index_put_py(buf, entries_at, slot_num, n, index_key_hash(f"{topic}#{key}"), phys_offset,
                        store_timestamp, begin_ts, begin_phys, slot_count)


_native = speedups()
index_put = index_put_py if _native is None else _native.index_put
index_put_key = index_put_key_py if _native is None else _native.index_put_key


def _min_cut(a: int, b: int) -> int:
    return b if a < 0 else min(a, b)


class IndexFile:
    """One index file. Header fields are mirrored in attributes and rewritten after every put."""

    __slots__ = ("path", "name", "backing", "buf", "slot_num", "index_num", "begin_ts", "end_ts", "begin_phys",
                 "end_phys", "slot_count", "index_count", "_entries_at", "_dirty_hi", "_tracked")

    def __init__(self, path: str, backing: Backing, slot_num: int, index_num: int) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.backing = backing
        self.buf = backing.buf
        self.slot_num = slot_num
        self.index_num = index_num
        self._entries_at = INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE
        self.begin_ts = self.end_ts = self.begin_phys = self.end_phys = 0
        self.slot_count = 0
        self.index_count = 1  # entry 0 is never used: 0 means "no entry" in slots and chains
        self._dirty_hi = 0  # end of the byte range [0, _dirty_hi) holding unflushed writes
        self._tracked = tracks_writes(backing)  # put() skips no-op mark_written calls

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def entry_count(self) -> int:
        return self.index_count - 1

    def read_header(self) -> None:
        bt, et, bp, ep, sc, ic = INDEX_HEADER.unpack_from(self.buf, 0)
        if ic == 0:
            ic = 1  # created, header never reached the disk: an empty file
        if not (1 <= ic <= self.index_num) or sc < 0 or bp < 0 or ep < bp:  # slot count is informational
            raise CorruptionError(self.path, 0, f"bad index header: count={ic} slots={sc} phys={bp}..{ep}")
        self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slot_count, self.index_count = (
            bt, et, bp, ep, sc, ic)

    def repair_slots(self) -> int:
        """After a crash: point slots that reference entries at or past index_count (puts whose header update
        never reached the disk) back at the newest entry below index_count in their chain. Returns slots fixed.

        Entries below index_count were flushed with the header, and a slot value only grows, so a value below
        index_count is the flushed one. A value at or above it comes from a lost put and would cut the chain.
        """
        raw = self.buf[INDEX_HEADER_SIZE:self._entries_at].tobytes()
        count = self.index_count
        unsigned = array("I")  # read unsigned, a negative slot is >= 2**31: one max() checks both bounds (a
        unsigned.frombytes(raw)  # max() and a min() over the 5 M slots of a default file took ~0.9 s per crash)
        if sys.byteorder == "little":
            unsigned.byteswap()
        if max(unsigned) < count:
            return 0
        slots = array("i")
        slots.frombytes(raw)
        if sys.byteorder == "little":
            slots.byteswap()
        bad = {i: 0 for i, v in enumerate(slots) if v >= count or v < 0}
        left = set(bad)
        hi = count
        while hi > 1 and left:  # newest first: the first entry met for a slot is its chain head
            lo = max(1, hi - _REPAIR_CHUNK)
            chunk = self.buf[self._entries_at + lo * INDEX_ENTRY_SIZE : self._entries_at + hi * INDEX_ENTRY_SIZE]
            hashes = [h for (h,) in _ENTRY_HASH.iter_unpack(chunk)]
            for i in range(len(hashes) - 1, -1, -1):
                slot = hashes[i] % self.slot_num
                if slot in left:
                    bad[slot] = lo + i
                    left.discard(slot)
            hi = lo
        for slot, n in bad.items():
            pos = INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE
            _pack_slot(self.buf, pos, n)
            self.backing.mark_written(pos, pos + INDEX_SLOT_SIZE)
            slots[slot] = n
        self.slot_count = len(slots) - slots.count(0)
        self.write_header()
        self.flush()
        return len(bad)

    def drop_torn_tail(self, since_ts: int) -> int:
        """After a crash: entries stored in the checkpoint's second or later may come from puts made after the
        last flush: their header may have reached the disk while an entry or a slot write did not. Drop
        everything from the first such entry that is all zero or out of phys order, and point the slots of the
        kept suspects at their newest entry (repair_slots then fixes slots past the end). Returns entries dropped.
        """
        count = self.index_count
        base = self._entries_at
        n = count - 1
        while n >= 1:  # walk back over the suspects: zero entries and entries of the last second
            h, phys, diff, prev = _unpack_entry(self.buf, base + n * INDEX_ENTRY_SIZE)
            if (h or phys or diff or prev) and self.begin_ts + diff * 1000 < since_ts - 1000:
                break
            n -= 1
        prev_phys = _unpack_entry(self.buf, base + n * INDEX_ENTRY_SIZE)[1] if n >= 1 else self.begin_phys
        heads: dict[int, int] = {}
        keep = count
        for k in range(n + 1, count):
            h, phys, diff, prev = _unpack_entry(self.buf, base + k * INDEX_ENTRY_SIZE)
            if not (h or phys or diff or prev) or phys < prev_phys or not 0 <= prev < k:
                keep = k
                break
            heads[h % self.slot_num] = k
            prev_phys = phys
        for slot, k in heads.items():
            pos = INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE
            _pack_slot(self.buf, pos, k)
            self.backing.mark_written(pos, pos + INDEX_SLOT_SIZE)
        if heads:  # the slots are flushed with the next flush, as a put's (the slot table precedes the entries)
            self._dirty_hi = max(self._dirty_hi, self._entries_at)
        if keep == count:
            return 0
        self.buf[base + keep * INDEX_ENTRY_SIZE : base + count * INDEX_ENTRY_SIZE] = bytes(
            (count - keep) * INDEX_ENTRY_SIZE)
        self.backing.mark_written(base + keep * INDEX_ENTRY_SIZE, base + count * INDEX_ENTRY_SIZE)
        self._dirty_hi = max(self._dirty_hi, base + count * INDEX_ENTRY_SIZE)
        self.index_count = keep
        if keep > 1:
            _h, self.end_phys, diff, _p = _unpack_entry(self.buf, base + (keep - 1) * INDEX_ENTRY_SIZE)
            self.end_ts = self.begin_ts + diff * 1000
        self.write_header()
        return count - keep

    def write_header(self) -> None:
        _pack_header(self.buf, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slot_count,
                     self.index_count)
        self.backing.mark_written(0, INDEX_HEADER_SIZE)
        end = self._entries_at + self.index_count * INDEX_ENTRY_SIZE
        if end > self._dirty_hi:
            self._dirty_hi = end

    def put(self, key_hash: int, phys_offset: int, store_timestamp: int) -> None:
        """Add one entry at the head of its slot's chain (caller checks is_full first)."""
        n = self.index_count
        if n == 1:
            self.begin_ts = store_timestamp
            self.begin_phys = phys_offset
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * INDEX_SLOT_SIZE
        pos = self._entries_at + n * INDEX_ENTRY_SIZE
        prev = index_put(self.buf, self._entries_at, self.slot_num, n, key_hash, phys_offset, store_timestamp,
                         self.begin_ts, self.begin_phys, self.slot_count)
        if self._tracked:
            mark = self.backing.mark_written
            mark(pos, pos + INDEX_ENTRY_SIZE)
            mark(slot_pos, slot_pos + INDEX_SLOT_SIZE)
            mark(0, INDEX_HEADER_SIZE)
        self._entry_written(n, prev, phys_offset, store_timestamp)

    def put_key(self, topic: str, key: str, phys_offset: int, store_timestamp: int) -> None:
        """put(index_key_hash(f"{topic}#{key}"), ...): the hash taken with the write (one native call)."""
        if self._tracked:  # a backing that logs writes needs the slot position: the general put
            self.put(index_key_hash(f"{topic}#{key}"), phys_offset, store_timestamp)
            return
        n = self.index_count
        if n == 1:
            self.begin_ts = store_timestamp
            self.begin_phys = phys_offset
        prev = index_put_key(self.buf, self._entries_at, self.slot_num, n, topic, key, phys_offset,
                             store_timestamp, self.begin_ts, self.begin_phys, self.slot_count)
        self._entry_written(n, prev, phys_offset, store_timestamp)

    def _entry_written(self, n: int, prev: int, phys_offset: int, store_timestamp: int) -> None:
        """Header mirror and dirty range after entry `n` was written (`prev`: the slot's previous head)."""
        if prev == 0:
            self.slot_count += 1
        self.index_count = n + 1
        self.end_ts = store_timestamp
        self.end_phys = phys_offset
        end = self._entries_at + (n + 1) * INDEX_ENTRY_SIZE
        if end > self._dirty_hi:
            self._dirty_hi = end

    def select(self, key_hash: int, max_num: int, begin_ts: int, end_ts: int, out: list[int]) -> None:
        """Append to `out` the phys offsets of entries with this hash stored in [begin_ts, end_ts], newest first."""
        count = self.index_count
        if count <= 1 or len(out) >= max_num:
            return
        n = _unpack_slot(self.buf, INDEX_HEADER_SIZE + (key_hash % self.slot_num) * INDEX_SLOT_SIZE)[0]
        if n <= 0 or n >= count:
            return
        base = self._entries_at
        begin = self.begin_ts
        while True:
            h, phys, diff, prev = _unpack_entry(self.buf, base + n * INDEX_ENTRY_SIZE)
            if diff < 0:
                break
            t = begin + diff * 1000
            if h == key_hash and begin_ts <= t <= end_ts:
                out.append(phys)
                if len(out) >= max_num:
                    break
            if t < begin_ts or prev <= 0 or prev >= n:  # chain ended, left the window, or points forward (junk)
                break
            n = prev

    def first_entry_at_or_above(self, phys_offset: int) -> int:
        """Smallest entry number whose phys >= phys_offset (index_count if none); entries are in phys order."""
        lo, hi = 1, self.index_count
        base = self._entries_at + 4
        while lo < hi:
            mid = (lo + hi) // 2
            if _unpack_phys(self.buf, base + mid * INDEX_ENTRY_SIZE)[0] >= phys_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def truncate_entries(self, keep: int) -> None:
        """Drop entries keep.. (newest first, undoing each put on its slot), then fix the header."""
        base = self._entries_at
        self._dirty_hi = max(self._dirty_hi, base + self.index_count * INDEX_ENTRY_SIZE)
        for n in range(self.index_count - 1, keep - 1, -1):
            pos = base + n * INDEX_ENTRY_SIZE
            h, _phys, _diff, prev = _unpack_entry(self.buf, pos)
            slot_pos = INDEX_HEADER_SIZE + (h % self.slot_num) * INDEX_SLOT_SIZE
            if _unpack_slot(self.buf, slot_pos)[0] == n:
                _pack_slot(self.buf, slot_pos, prev)
                self.backing.mark_written(slot_pos, slot_pos + INDEX_SLOT_SIZE)
                if prev == 0:
                    self.slot_count -= 1
            self.buf[pos : pos + INDEX_ENTRY_SIZE] = bytes(INDEX_ENTRY_SIZE)
            self.backing.mark_written(pos, pos + INDEX_ENTRY_SIZE)
        self.index_count = keep
        if keep > 1:
            _h, phys, diff, _prev = _unpack_entry(self.buf, base + (keep - 1) * INDEX_ENTRY_SIZE)
            self.end_phys = phys
            self.end_ts = self.begin_ts + diff * 1000  # second precision is all the file keeps
        self.write_header()

    def flush(self) -> None:
        hi = self._dirty_hi
        if hi:
            self.backing.flush(0, hi)
            self.flushed_to(hi)

    def flushed_to(self, hi: int) -> None:
        """After a flush of [0, hi) made when _dirty_hi was hi: clean unless more was written meanwhile."""
        if self._dirty_hi == hi:
            self._dirty_hi = 0

    def close(self) -> None:
        self.backing.close()


class IndexService:
    """Index files under `root_dir` (the `index` directory), oldest first. A DispatchTarget."""

    def __init__(self, root_dir: str, max_hash_slot_num: int, max_index_num: int, disk: Disk) -> None:
        if max_hash_slot_num <= 0 or max_index_num <= 1:
            raise ConfigError("maxHashSlotNum must be positive and maxIndexNum at least 2")
        self.root_dir = root_dir
        self.slot_num = max_hash_slot_num
        self.index_num = max_index_num
        self.file_size = index_file_size(max_hash_slot_num, max_index_num)
        self._disk = disk
        self._files: list[IndexFile] = []
        # records with phys < _dispatched_end were dispatched; _skip_at is the newest indexed record's phys
        # after a load (its end is unknown: the header keeps the start), so its re-dispatch is recognised
        self._dispatched_end = 0
        self._skip_at = -1
        self.redispatch_from: int | None = None  # set by an abnormal load that dropped entries (see load)

    @property
    def files(self) -> list[IndexFile]:
        return list(self._files)

    @property
    def max_phys_offset(self) -> int:
        """A record boundary below which every record was dispatched; re-dispatching from it is idempotent."""
        return self._dispatched_end

    def load(self, last_exit_ok: bool, checkpoint_index_ts: int) -> None:
        """Open the index files. After an abnormal exit, destroy files newer than the checkpoint and repair or
        drop what the crash may have torn. Then `redispatch_from` is the phys offset from which recovery must
        re-dispatch so that every record is completely indexed again (None: nothing was dropped)."""
        self.redispatch_from = None
        destroying = False
        torn_cut = -1
        for name in self._disk.list_files(self.root_dir):
            if len(name) != _NAME_LEN or not name.isdigit():
                continue
            path = os.path.join(self.root_dir, name)
            if destroying:  # everything after a destroyed file is newer still
                self._disk.delete(path)
                continue
            actual = self._disk.file_size(path)
            if actual != self.file_size:
                raise CorruptionError(path, 0, f"index file size {actual} != {self.file_size} expected from "
                                               f"max_hash_slot_num/max_index_num (were they changed?)")
            f = IndexFile(path, self._disk.open(path, self.file_size), self.slot_num, self.index_num)
            try:
                f.read_header()
            except CorruptionError:
                if last_exit_ok:
                    f.close()
                    raise
                marks.hit("index file with torn header destroyed")  # derived data: re-dispatch rebuilds it
                destroying = True
            # a file begun after the checkpoint's index time holds nothing the checkpoint vouched for: destroyed;
            # the file being written at the crash is kept and its torn tail dropped below (destroying it forced a
            # re-dispatch of everything it indexed: up to its 20 M entries, minutes at 10 GiB)
            if not destroying and not last_exit_ok and f.begin_ts > checkpoint_index_ts:
                marks.hit("index file newer than checkpoint destroyed")
                destroying = True
            if destroying:
                f.close()
                self._disk.delete(path)
                continue
            if not last_exit_ok:
                lost = f.end_ts >= checkpoint_index_ts - 1000 and f.drop_torn_tail(checkpoint_index_ts) > 0
                if lost:
                    marks.hit("index torn tail dropped")
                if f.repair_slots():
                    marks.hit("index slots past the header repaired")
                    lost = True
                if lost:  # puts after this file's last kept record were lost: nothing from it on is complete
                    torn_cut = _min_cut(torn_cut, f.end_phys if f.entry_count else f.begin_phys)
            prev = self._files[-1] if self._files else None
            if prev is not None and f.entry_count == 0 and f.end_ts == 0 and f.end_phys == 0:
                # created but its header never reached the disk: it starts where the previous file ended
                f.begin_ts = f.end_ts = prev.end_ts
                f.begin_phys = f.end_phys = prev.end_phys
            self._files.append(f)
        self._reset_dispatched()
        if last_exit_ok:
            return
        for f in self._files[:-1]:
            if not f.is_full:  # files roll only when full: this one lost puts whose header never got written
                marks.hit("index file lost puts before a roll")
                torn_cut = _min_cut(torn_cut, f.end_phys if f.entry_count else f.begin_phys)
        # The newest record's keys may be only partly on disk: when it was indexed in the checkpoint's last
        # second (its puts may postdate the flush) or when a later file was destroyed (its other keys may have
        # been there). After a torn tail nothing from the cut on is known to be complete. Drop from there, so
        # that re-dispatching from redispatch_from indexes every key of every later record again.
        newest_suspect = self._skip_at >= 0 and (destroying or self._newest_indexed_ts() >= checkpoint_index_ts - 1000)
        cut = min(c for c in (torn_cut, self._skip_at if newest_suspect else -1, 1 << 62) if c >= 0)
        if cut != 1 << 62:
            marks.hit("index entries dropped for re-dispatch")
            self.truncate_dirty(cut)
            self.redispatch_from = cut

    def _newest_indexed_ts(self) -> int:
        for f in reversed(self._files):
            if f.entry_count:
                return f.end_ts
        return 0

    def _reset_dispatched(self) -> None:
        self._dispatched_end, self._skip_at = 0, -1
        for f in reversed(self._files):
            if f.entry_count:
                self._dispatched_end = self._skip_at = f.end_phys
                return

    def dispatch(self, req: DispatchRequest) -> None:
        if req.sys_flag & 0xC == 12:  # ROLLBACK records are never looked up
            return
        phys = req.phys_offset
        if phys < self._dispatched_end or phys == self._skip_at:
            marks.hit("index duplicate dispatch skipped")
            return
        uniq, keys = req.uniq_key, req.keys
        ts = req.store_timestamp
        if uniq:  # _put inlined (one per record on the send path)
            f = self._files[-1] if self._files else None
            if f is None or f.index_count >= f.index_num:
                f = self._new_file(f, ts)
            f.put_key(req.topic, uniq, phys, ts)
        if keys:
            for k in keys.split(" "):
                if k:
                    self._put(f"{req.topic}#{k}", phys, ts)
        self._dispatched_end = phys + req.size

    def dispatch_many(self, reqs: list[DispatchRequest]) -> None:
        """dispatch() of each request in turn; a record with a UNIQ_KEY and no KEYS (a plain send) inline."""
        files = self._files
        for req in reqs:
            phys = req.phys_offset
            f = files[-1] if files else None
            if (req.keys or not req.uniq_key or req.sys_flag & 0xC == 12 or phys < self._dispatched_end
                    or phys == self._skip_at or f is None or f.index_count >= f.index_num):
                self.dispatch(req)
                continue
            f.put_key(req.topic, req.uniq_key, phys, req.store_timestamp)
            self._dispatched_end = phys + req.size

    def _put(self, key: str, phys_offset: int, store_timestamp: int) -> None:
        f = self._files[-1] if self._files else None
        if f is None or f.is_full:
            f = self._new_file(f, store_timestamp)
        f.put(index_key_hash(key), phys_offset, store_timestamp)

    def _new_file(self, prev: IndexFile | None, store_timestamp: int) -> IndexFile:
        name = index_file_name(store_timestamp)
        if prev is not None and name <= prev.name:
            name = f"{int(prev.name) + 1:0{_NAME_LEN}d}"  # names must sort in creation order
        path = os.path.join(self.root_dir, name)
        f = IndexFile(path, self._disk.create(path, self.file_size), self.slot_num, self.index_num)
        if prev is not None:
            # a new file starts where the full one ended (its first put then sets begin to its own values)
            f.begin_ts = f.end_ts = prev.end_ts
            f.begin_phys = f.end_phys = prev.end_phys
        f.write_header()
        self._files.append(f)
        return f

    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> tuple[list[int], int, int]:
        """(phys offsets newest first, newest file's end timestamp, newest file's end phys offset).

        Matching is by key hash: the reader must compare the real keys of the records it loads.
        """
        out: list[int] = []
        files = self._files
        if not files:
            return out, 0, 0
        newest = files[-1]
        max_num = min(max_num, MAX_QUERY_NUM)
        if max_num <= 0:
            return out, newest.end_ts, newest.end_phys
        key_hash = index_key_hash(f"{topic}#{key}")
        for f in reversed(files):
            if f.index_count <= 1:
                continue  # empty (just rolled, or its header was lost): its times say nothing
            if f.begin_ts <= end_ts and f.end_ts >= begin_ts:
                f.select(key_hash, max_num, begin_ts, end_ts, out)
                if len(out) >= max_num:
                    break
            if f.begin_ts < begin_ts:
                break
        return out, newest.end_ts, newest.end_phys

    def flush(self) -> int:
        """Flush every file with unflushed puts; returns the newest file's end timestamp (0 without files)."""
        for f in list(self._files):
            f.flush()
        return self._files[-1].end_ts if self._files else 0

    def flush_plan(self) -> tuple[list[tuple[Backing, int, int]], list[tuple[IndexFile, int]], int]:
        """flush() in parts: ranges to sync (off the event loop), (file, dirty end) to mark clean after, and the
        newest file's end timestamp now (what the checkpoint may claim once the ranges are synced)."""
        ranges: list[tuple[Backing, int, int]] = []
        done: list[tuple[IndexFile, int]] = []
        for f in self._files:
            hi = f._dirty_hi
            if hi:
                ranges.append((f.backing, 0, hi))
                done.append((f, hi))
        return ranges, done, (self._files[-1].end_ts if self._files else 0)

    def truncate_dirty(self, phys_offset: int) -> None:
        """Remove entries whose phys >= phys_offset; files left empty go (the chains are undone, not rebuilt)."""
        while self._files:
            f = self._files[-1]
            keep = f.first_entry_at_or_above(phys_offset)
            if keep > 1 or (f.entry_count == 0 and f.begin_phys < phys_offset):
                if keep < f.index_count:
                    marks.hit("index truncated dirty entries")
                    f.truncate_entries(keep)
                    f.flush()
                break
            self._files.pop()
            f.close()
            self._disk.delete(f.path)
        self._dispatched_end = min(self._dispatched_end, phys_offset)
        if self._skip_at >= phys_offset:
            self._skip_at = -1

    def delete_expired(self, min_phys_offset: int) -> int:
        """Delete files (never the newest) whose newest entry is below the CommitLog min offset."""
        deleted = 0
        while len(self._files) > 1 and self._files[0].end_phys < min_phys_offset:
            f = self._files.pop(0)
            f.close()
            self._disk.delete(f.path)
            deleted += 1
        return deleted

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
