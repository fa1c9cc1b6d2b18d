"""RaftStorage: the durable state of one Raft node in one directory (hard state, snapshot, append-only log).

The log goes through the store's disk layer (orbitmq.store SegmentList over a Disk), so MmapDisk and SimDisk
both work. save() is blocking file I/O that returns only after everything it wrote is fsynced; the driver runs
it in a worker thread. Formats and recovery rules: docs/design/raft-storage.md. Knows nothing of Raft rules
beyond "entries follow the snapshot contiguously"; never reads or writes the network.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from orbitmq.base import marks
from orbitmq.base.errors import CorruptionError, StoreError
from orbitmq.base.invariant import check
from orbitmq.raft.messages import Entry, HardState, Ready, Snapshot
from orbitmq.store import Disk, MmapDisk, SegmentList

if TYPE_CHECKING:
    from orbitmq.store.disk import FileLock
    from orbitmq.store.segment import Segment

T = TypeVar("T")
log = logging.getLogger("orbitmq.raft")

# Log record: len u32 (of data), crc u32 (crc32 of the 16 bytes term+index, then of data), term u64, index u64, data
RECORD_HEAD = struct.Struct(">IIQQ")
HEAD_SIZE = RECORD_HEAD.size
_TERM_INDEX = struct.Struct(">QQ")
_ZERO_HEAD = bytes(HEAD_SIZE)
_NONZERO = re.compile(rb"[^\x00]")

# Small files (written with Disk.write_small_atomic, a crc32 ">I" of everything before it appended)
_HS = struct.Struct(">4sBQQH")    # magic, version, term, commit, vote length; then the vote (UTF-8)
_SNAP = struct.Struct(">4sBBQQQ")  # magic, version, kind, index, term, data length; then the data
_META = struct.Struct(">4sBQ")    # magic, version, segment size
_CRC = struct.Struct(">I")
HS_MAGIC, SNAP_MAGIC, META_MAGIC = b"ORHS", b"ORSN", b"ORLM"
FORMAT_VERSION = 1
SNAP_COMPACTED, SNAP_INSTALLED = 0, 1  # snapshot file kind: taken by this node / installed from the leader

HARD_STATE_FILE = "hardstate"
SNAPSHOT_FILE = "snapshot"
LOG_DIR = "log"
LOG_META_FILE = "meta"
LOCK_FILE = "lock"
DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024


def record_crc(term: int, index: int, data: bytes | memoryview) -> int:
    return zlib.crc32(data, zlib.crc32(_TERM_INDEX.pack(term, index)))


def encode_record(e: Entry) -> bytes:
    return RECORD_HEAD.pack(len(e.data), record_crc(e.term, e.index, e.data), e.term, e.index) + e.data


def _with_crc(body: bytes) -> bytes:
    return body + _CRC.pack(zlib.crc32(body))


def _crc_ok(raw: bytes) -> bytes | None:
    """The body of a small file whose trailing crc matches, else None."""
    if len(raw) < _CRC.size:
        return None
    body = raw[: -_CRC.size]
    return body if _CRC.unpack_from(raw, len(body))[0] == zlib.crc32(body) else None


def encode_hard_state(hs: HardState) -> bytes:
    vote = hs.vote.encode("utf-8")
    return _with_crc(_HS.pack(HS_MAGIC, FORMAT_VERSION, hs.term, hs.commit, len(vote)) + vote)


def decode_hard_state(raw: bytes) -> HardState | None:
    body = _crc_ok(raw)
    if body is None or len(body) < _HS.size:
        return None
    magic, version, term, commit, n = _HS.unpack_from(body)
    if magic != HS_MAGIC or version != FORMAT_VERSION or len(body) != _HS.size + n:
        return None
    return HardState(term, body[_HS.size :].decode("utf-8", "replace"), commit)


def encode_snapshot(s: Snapshot, kind: int = SNAP_COMPACTED) -> bytes:
    return _with_crc(_SNAP.pack(SNAP_MAGIC, FORMAT_VERSION, kind, s.index, s.term, len(s.data)) + s.data)


def decode_snapshot(raw: bytes) -> tuple[Snapshot, int] | None:
    """(snapshot, kind) of a snapshot file, None when torn or not one."""
    body = _crc_ok(raw)
    if body is None or len(body) < _SNAP.size:
        return None
    magic, version, kind, index, term, n = _SNAP.unpack_from(body)
    if (magic != SNAP_MAGIC or version != FORMAT_VERSION or kind not in (SNAP_COMPACTED, SNAP_INSTALLED)
            or len(body) != _SNAP.size + n):
        return None
    return Snapshot(index, term, bytes(body[_SNAP.size :])), kind


@dataclass(slots=True)
class _Scanned:
    """What the log scan found: records in file order, the end of valid data, each segment's highest index."""
    records: list[Entry]
    end_offset: int
    torn: bool
    seg_max: dict[int, int]


class RaftStorage:
    """Durable state of one node under `directory`: hardstate, snapshot, log/ (segments + meta), lock."""

    def __init__(self, directory: str, *, disk: Disk | None = None,
                 segment_size: int = DEFAULT_SEGMENT_SIZE) -> None:
        if segment_size < 4096:
            raise ValueError(f"raft log segment size {segment_size} < 4096")
        self.directory = directory
        self.disk: Disk = disk if disk is not None else MmapDisk()
        self.segment_size = segment_size
        self._log: SegmentList | None = None
        self._lock = threading.Lock()  # save() runs in a worker thread; load/close must not overlap it
        self._file_lock: FileLock | None = None
        self._hs = HardState()
        self._snap: Snapshot | None = None
        self._snap_kind = SNAP_COMPACTED
        self._first = 1                  # index of self._terms[0]
        self._terms: list[int] = []      # term of every logical entry from _first (may start below the snapshot)
        self._seg_max: dict[int, int] = {}  # segment start offset -> highest index written into it
        self._next_roll: int | None = None  # where the first segment after a reset starts
        self.fsyncs = 0                  # log flushes + small-file writes (figures for tests and status)

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    # ---- public API ---------------------------------------------------------------------------------
    @property
    def last_index(self) -> int:
        """Last durable log index (the snapshot index when the log is empty)."""
        snap_index = self._snap.index if self._snap else 0
        return max(self._first + len(self._terms) - 1, snap_index)

    @property
    def snapshot_index(self) -> int:
        return self._snap.index if self._snap else 0

    def load(self) -> tuple[HardState, Snapshot | None, list[Entry]]:
        """Open (creating if needed) and recover: torn log tail truncated, mid-log corruption refused
        (CorruptionError), log entries not following the snapshot dropped. Returns RaftNode's constructor input."""
        with self._lock:
            if self._file_lock is None:
                self.disk.makedirs(self.directory)
                self._file_lock = self.disk.lock(self._path(LOCK_FILE))
            try:
                return self._load()
            except BaseException:
                self._close()  # a refused directory is not left locked
                raise

    def _load(self) -> tuple[HardState, Snapshot | None, list[Entry]]:
        hs = self._read_small(HARD_STATE_FILE, decode_hard_state) or HardState()
        snap_kind = self._read_small(SNAPSHOT_FILE, decode_snapshot)
        self._snap, self._snap_kind = snap_kind if snap_kind else (None, SNAP_COMPACTED)
        entries = self._load_log()
        last_term = entries[-1].term if entries else (self._snap.term if self._snap else 0)
        if last_term > hs.term:
            # entries of term T were fsynced but the hard state of term T was not: no vote of term T was sent
            # (messages leave only after save() returns), so term T with no vote is what the node knew
            marks.hit("raft: hard state term raised to the log's last term")
            hs = HardState(last_term, "", hs.commit)
        last = entries[-1].index if entries else self.snapshot_index
        if hs.commit > last:
            raise CorruptionError(self._path(HARD_STATE_FILE), 0,
                                  f"commit index {hs.commit} is beyond the last stored entry {last}")
        self._hs = hs
        return hs, self._snap, entries

    async def prepare(self, ready: Ready) -> None:
        """On the driver's loop, before save(ready) runs in a worker thread: a subclass that keeps part of an entry
        outside the log (a broker group's CommitLog) writes it here. Nothing by default."""

    def loaded(self) -> None:
        """On the driver's loop, right after load() returned (before the node exists). Nothing by default."""

    def save(self, ready: Ready) -> None:
        """Persist `ready` (snapshot, entries, hard state, compact_snapshot), each fsynced before returning.
        Any exception means nothing of `ready` may be acknowledged (the driver stops the node)."""
        with self._lock:
            check(self._log is not None, "RaftStorage.save before load")
            if ready.snapshot is not None:
                self._install_snapshot(ready.snapshot)
            if ready.entries:
                self._append(ready.entries)
            if ready.hard_state is not None and ready.hard_state != self._hs:
                self.disk.write_small_atomic(self._path(HARD_STATE_FILE), encode_hard_state(ready.hard_state))
                self.fsyncs += 1
                self._hs = ready.hard_state
            if ready.compact_snapshot is not None and ready.compact_snapshot.index > self.snapshot_index:
                self._write_snapshot(ready.compact_snapshot, SNAP_COMPACTED)
                self._drop_prefix(ready.compact_snapshot.index)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._file_lock is not None:
            self._file_lock.release()
            self._file_lock = None

    def status(self) -> dict[str, object]:
        log_ = self._log
        return {"dir": self.directory, "first_index": self._first, "last_index": self.last_index,
                "snapshot_index": self.snapshot_index, "segments": len(log_) if log_ else 0,
                "fsyncs": self.fsyncs}

    # ---- small files --------------------------------------------------------------------------------
    def _read_small(self, name: str, decode: Callable[[bytes], T | None]) -> T | None:
        path = self._path(name)
        candidates = self.disk.read_small_with_backup(path)
        for i, raw in enumerate(candidates):
            value = decode(raw)
            if value is not None:
                if i:
                    marks.hit("raft: small file read from .bak")
                    log.warning("%s is torn or corrupt; using %s.bak", path, path)
                return value
        if candidates:
            raise CorruptionError(path, 0, "file and its .bak both fail their crc")
        return None

    def _write_snapshot(self, snap: Snapshot, kind: int) -> None:
        self.disk.write_small_atomic(self._path(SNAPSHOT_FILE), encode_snapshot(snap, kind))
        self.fsyncs += 1
        self._snap, self._snap_kind = snap, kind

    def _write_meta(self) -> None:
        """Rewritten whenever segment files come or go: its atomic write fsyncs the log directory, which makes
        those creations and deletions durable (the Disk protocol has no directory fsync of its own)."""
        body = _META.pack(META_MAGIC, FORMAT_VERSION, self.segment_size)
        self.disk.write_small_atomic(os.path.join(self._path(LOG_DIR), LOG_META_FILE), _with_crc(body))
        self.fsyncs += 1

    # ---- load ---------------------------------------------------------------------------------------
    def _load_log(self) -> list[Entry]:
        meta = self._read_small(os.path.join(LOG_DIR, LOG_META_FILE), _decode_meta)
        if meta is not None and meta != self.segment_size:
            log.info("raft log %s keeps its segment size %d (configured %d)", self.directory, meta,
                     self.segment_size)
            self.segment_size = meta
        self._log = SegmentList(self._path(LOG_DIR), self.segment_size, self.disk)
        self._log.load()
        if meta is None:
            self._write_meta()
        scan = self._scan()
        if scan.torn:
            marks.hit("raft: torn log tail truncated")
            log.warning("raft log %s: torn tail after offset %d truncated (never acknowledged)",
                        self.directory, scan.end_offset)
            self._log.truncate(scan.end_offset)
            self._write_meta()  # truncate may have deleted (empty) later segments
        else:
            self._log.set_end(scan.end_offset)
        self._seg_max = {s: m for s, m in scan.seg_max.items() if any(g.start_offset == s for g in self._log)}
        logical = _replay(scan.records, self._path(LOG_DIR))
        self._terms = [e.term for e in logical]
        self._first = logical[0].index if logical else (self.snapshot_index + 1)
        snap = self._snap
        if snap is None:
            return logical
        if not self._follows_snapshot(snap):
            marks.hit("raft: stale log dropped at load")
            self._reset_log(snap)
            return []
        return [e for e in logical if e.index > snap.index]

    def _scan(self) -> _Scanned:
        assert self._log is not None
        segs = list(self._log)
        records: list[Entry] = []
        seg_max: dict[int, int] = {}
        end_offset = segs[0].start_offset if segs else 0
        for si, seg in enumerate(segs):
            pos = 0
            while pos + HEAD_SIZE <= seg.size:
                head = bytes(seg.buf[pos : pos + HEAD_SIZE])
                if head == _ZERO_HEAD:
                    break  # end of this segment's data (the rest is padding or never written)
                rec, reason = _parse_record(seg.buf, pos, seg.size, head)
                if rec is None:
                    if self._valid_after(segs, si, pos):
                        raise CorruptionError(seg.path, pos, f"bad log record ({reason}) followed by valid ones")
                    return _Scanned(records, seg.start_offset + pos, True, seg_max)
                records.append(rec)
                seg_max[seg.start_offset] = max(seg_max.get(seg.start_offset, 0), rec.index)
                pos += HEAD_SIZE + len(rec.data)
                end_offset = seg.start_offset + pos
        return _Scanned(records, end_offset, False, seg_max)

    def _valid_after(self, segs: list[Segment], si: int, pos: int) -> bool:
        """Is there any valid record after the bad one at (segs[si], pos)? Later segments: any data at all
        counts (a segment only gets writes after the previous one was fsynced whole)."""
        seg = segs[si]
        buf = seg.buf
        end = min(seg.size, seg.backing.data_end(0)) - HEAD_SIZE
        p = pos + 1
        while p <= end:
            m = _NONZERO.search(buf, p, end + HEAD_SIZE)
            if m is None:
                break
            p = max(p, m.start() - HEAD_SIZE + 1)  # a record header may start up to 23 bytes before a non-zero
            while p <= min(end, m.start()):
                if _parse_record(buf, p, seg.size, bytes(buf[p : p + HEAD_SIZE]))[0] is not None:
                    return True
                p += 1
        return any(bytes(later.buf[:HEAD_SIZE]) != _ZERO_HEAD for later in segs[si + 1 :])

    def _follows_snapshot(self, snap: Snapshot) -> bool:
        """The logical log continues the snapshot: empty, or starts right after it (a log reset by an installed
        snapshot, or a prefix compacted exactly at a segment boundary), or -- for a snapshot this node took
        itself -- holds the snapshot's entry with its term. Anything else is a log the crash left behind
        between writing an installed snapshot and resetting the log."""
        if not self._terms:
            return True
        if self._snap_kind == SNAP_COMPACTED and self._first <= snap.index < self._first + len(self._terms):
            return self._terms[snap.index - self._first] == snap.term
        return self._first == snap.index + 1

    # ---- save ---------------------------------------------------------------------------------------
    def _install_snapshot(self, snap: Snapshot) -> None:
        """A snapshot from the leader replaces the whole log. Written first, so that a crash leaves the
        snapshot plus the old log (load() drops that log), never an empty log without the snapshot."""
        self._write_snapshot(snap, SNAP_INSTALLED)
        self._reset_log(snap)

    def _reset_log(self, snap: Snapshot) -> None:
        assert self._log is not None
        next_start = self._log.max_offset
        while len(self._log):
            self._log.delete_first()
        self._next_roll = next_start - next_start % self.segment_size + (self.segment_size if next_start else 0)
        self._seg_max.clear()
        self._terms = []
        self._first = snap.index + 1
        self._write_meta()

    def _drop_prefix(self, index: int) -> None:
        """Delete whole leading segments whose entries are all <= index (never the active last one)."""
        assert self._log is not None
        deleted = 0
        while len(self._log) > 1:
            first = self._log.segments[0]
            if self._seg_max.get(first.start_offset, 0) > index:
                break
            self._seg_max.pop(first.start_offset, None)
            self._log.delete_first()
            deleted += 1
        if deleted:
            self._write_meta()
        keep_from = min(index, self._first + len(self._terms) - 1)
        if keep_from > self._first:  # keep the term at the snapshot index for _follows_snapshot
            del self._terms[: keep_from - self._first]
            self._first = keep_from

    def _append(self, entries: list[Entry]) -> None:
        f = entries[0].index
        for a, b in zip(entries, entries[1:], strict=False):
            check(b.index == a.index + 1, f"raft save: entries not contiguous ({a.index} then {b.index})")
        last = self._first + len(self._terms) - 1
        if not self._terms or not (self._first <= f <= last + 1):
            check(f == self.snapshot_index + 1 or (not self._terms and f == self._first),
                  f"raft save: entries start at {f}, the log holds {self._first}..{last} "
                  f"(snapshot {self.snapshot_index})")
            if self._terms:
                self._reset_log(self._snap or Snapshot(f - 1, 0))
            self._first = f
        else:
            del self._terms[f - self._first :]  # an overwrite: later records win at load (append-only log)
        self._write_records(entries)
        self._terms.extend(e.term for e in entries)

    def _write_records(self, entries: list[Entry]) -> None:
        """Each segment gets one write for the batch; a segment is fsynced whole before the next one gets any
        byte, so a crash can only tear the tail of the last segment."""
        assert self._log is not None
        limit = self.segment_size
        pending = bytearray()
        seg = self._log.last
        top = 0
        for e in entries:
            rec = encode_record(e)
            if len(rec) > limit:
                raise StoreError(f"raft entry {e.index} is {len(e.data)} bytes, over the log segment size {limit}")
            free = seg.free_bytes - len(pending) if seg is not None else 0
            if len(rec) > free:
                if seg is not None and pending:
                    self._flush_into(seg, pending, top)
                pending = bytearray()
                seg = self._roll()
            pending += rec
            top = e.index
        if seg is not None and pending:
            self._flush_into(seg, pending, top)

    def _flush_into(self, seg: Segment, data: bytearray, top: int) -> None:
        start = seg.append(data)
        seg.backing.flush(start, start + len(data))
        seg.flushed_position = seg.wrote_position
        self.fsyncs += 1
        self._seg_max[seg.start_offset] = max(self._seg_max.get(seg.start_offset, 0), top)

    def _roll(self) -> Segment:
        assert self._log is not None
        seg = self._log.roll(None if len(self._log) else self._next_roll)
        self._next_roll = None
        self._write_meta()
        return seg


def _decode_meta(raw: bytes) -> int | None:
    body = _crc_ok(raw)
    if body is None or len(body) != _META.size:
        return None
    magic, version, size = _META.unpack(body)
    return size if magic == META_MAGIC and version == FORMAT_VERSION and size >= 4096 else None


def _parse_record(buf: memoryview, pos: int, size: int, head: bytes) -> tuple[Entry | None, str]:
    n, crc, term, index = RECORD_HEAD.unpack(head)
    if index == 0:
        return None, "index 0"
    if pos + HEAD_SIZE + n > size:
        return None, f"length {n} runs past the segment end"
    data = bytes(buf[pos + HEAD_SIZE : pos + HEAD_SIZE + n])
    if record_crc(term, index, data) != crc:
        return None, "crc mismatch"
    return Entry(term, index, data), ""


def _replay(records: list[Entry], where: str) -> list[Entry]:
    """The logical log from the append-only records: a record at an index <= the last one overwrites the log
    from there (a Raft conflict truncation); a gap is corruption."""
    logical: list[Entry] = []
    for r in records:
        if logical:
            first, last = logical[0].index, logical[-1].index
            if r.index > last + 1:
                raise CorruptionError(where, 0, f"log record index {r.index} follows {last} (gap)")
            if r.index <= last:
                del logical[max(0, r.index - first) :]
        logical.append(r)
    return logical


__all__ = ["DEFAULT_SEGMENT_SIZE", "RaftStorage", "decode_hard_state", "decode_snapshot", "encode_record"]
