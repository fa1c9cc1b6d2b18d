"""CommitLogRaftStorage: a broker group's Raft log whose message entries live in the CommitLog, once.

A MESSAGES entry's payload is the exact CommitLog bytes of its records (the leader's, with its queue offsets, store
timestamps and physical offsets); every member writes them at the same physical offset, so the CommitLog is the
same byte sequence on every member. The Raft log keeps, for such an entry, only a reference (physical offset,
length, crc32 of the bytes): the records are stored once, in the CommitLog segments. Other entries (commands,
metadata, the no-op) are kept whole in the Raft log as before. docs/design/raft-group.md, "One copy".

Records become visible (ConsumeQueue, index, pulls) only once their entry is committed and applied: the store's
replica gate holds them (`replica.on_replicated(end)` at apply). An uncommitted suffix that Raft truncates is cut
from the CommitLog before the new entries are written (`truncate_dirty`), so no consumer ever saw it.

Order of durability per Ready: prepare() (on the loop) writes the records of new entries into the CommitLog and
fsyncs it; save() (worker thread) then writes the references, fsynced. A reference on disk therefore always points
at durable bytes; CommitLog bytes past the last reference (written, never logged) are cut at the next start.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from orbitmq.base.errors import CorruptionError, StoreError
from orbitmq.broker.raft_mode.codec import MESSAGES, decode_snapshot
from orbitmq.model.enums import takes_queue_offset
from orbitmq.model.record import decode_record
from orbitmq.raft.messages import Entry, HardState, Ready, Snapshot
from orbitmq.raft.storage import RaftStorage
from orbitmq.store.layout import BLANK_MAGIC, SIZE_MAGIC
from orbitmq.store.results import MessageInner, PutResult, PutStatus

log = logging.getLogger("orbitmq.broker.raft_mode")

RECORDS = 0x08  # entry payload: type u8, phys u64, then the CommitLog bytes [phys, phys + n)
REF = 0x09  # Raft log record of a RECORDS entry: type u8, phys u64, length u32, crc32 u32 of the bytes
RECORDS_HEAD = struct.Struct(">BQ")
REF_FORMAT = struct.Struct(">BQII")

Fetch = Callable[[int], Awaitable[None]]


def records_entry(phys: int, raw: bytes) -> bytes:
    return RECORDS_HEAD.pack(RECORDS, phys) + raw


def records_span(data: bytes) -> tuple[int, int]:
    """(phys, end) of a RECORDS or REF entry payload."""
    if data[0] == REF:
        _, phys, n, _ = REF_FORMAT.unpack_from(data)
        return phys, phys + n
    _, phys = RECORDS_HEAD.unpack_from(data)
    return phys, phys + len(data) - RECORDS_HEAD.size


def decode_records(raw: bytes | memoryview, phys: int) -> tuple[list[MessageInner], PutResult]:
    """The messages of a RECORDS payload and the put result they had on the leader (queue offset of the first,
    message ids, phys offset of the first record). BLANK fillers are skipped."""
    buf = memoryview(raw)
    pos, end = 0, len(buf)
    msgs: list[MessageInner] = []
    result = PutResult(PutStatus.PUT_OK)
    while pos + 8 <= end:
        total, magic = SIZE_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            pos += total
            continue
        m = decode_record(buf[pos:pos + total])
        if not msgs:
            result.phys_offset = phys + pos
            result.queue_offset = m.queue_offset if takes_queue_offset(m.sys_flag) else 0
            result.store_timestamp = m.store_timestamp
        msgs.append(MessageInner(m.topic, m.queue_id, m.body, m.properties, m.flag, m.sys_flag, m.born_timestamp,
                                 m.born_host, m.store_host, m.reconsume_times, m.prepared_transaction_offset))
        result.msg_ids.append(m.offset_msg_id)
        result.wrote_bytes += total
        pos += total
    result.msg_count = len(msgs)
    return msgs, result


class CommitLogRaftStorage(RaftStorage):
    """RaftStorage for a broker group over its MessageStore (the real one). `fetch(end)` copies committed CommitLog
    bytes from the leader up to `end` (a member whose CommitLog is behind an installed snapshot)."""

    def __init__(self, directory: str, store: Any, fetch: Fetch, **kw: Any) -> None:
        super().__init__(directory, **kw)
        self.store = store
        self.fetch = fetch
        self.ends: dict[int, int] = {}  # entry index (the snapshot's and every later one) -> CommitLog end after it
        self.base = (0, 0)  # (snapshot index, CommitLog end at it)
        self.last = 0  # index of the last entry in `ends`
        self.placed: dict[int, tuple[list[MessageInner], PutResult]] = {}  # own puts' entries, until applied
        self._own: dict[int, tuple[bytes, list[MessageInner], PutResult]] = {}  # id(data) -> own proposal
        self._own_term = -1
        self._own_tail = 0
        self.behind: tuple[int, int] | None = None  # (our CommitLog end, target) while fetching from the leader
        self.records_written = 0  # RECORDS entries written here from the leader's bytes
        self.truncated_bytes = 0  # uncommitted CommitLog bytes cut (Raft truncation, leftovers of a crash)

    # ---- leader: a send becomes records in the CommitLog and a RECORDS proposal ------------------------------
    def put_local(self, msgs: list[MessageInner], term: int) -> tuple[bytes | None, PutResult]:
        """Write `msgs` into the CommitLog (invisible until committed) and return the RECORDS entry payload to
        propose (None when the store refused the put: the result says why)."""
        st = self.store
        if term != self._own_term:  # first put of this leadership: what an earlier term left unlogged goes
            self._own_term, self._own_tail = term, self.last_end()
            self._own.clear()
        if st.max_phys_offset > self._own_tail:
            self._cut(self._own_tail, "proposals that never reached the log")
        start = st.max_phys_offset
        result, _ = st.put_messages_nowait(msgs)
        if not result.ok:
            return None, result
        end = st.max_phys_offset
        data = records_entry(start, self._read(start, end))
        self._own_tail = end
        self._own[id(data)] = (data, msgs, result)  # until its entry is prepared (or the next term's first put)
        return data, result

    def last_end(self) -> int:
        return self.ends.get(self.last, self.base[1])

    def _read(self, start: int, end: int) -> bytes:
        parts: list[bytes] = []
        pos = start
        while pos < end:
            chunk = self.store.read_commitlog(pos, end - pos)
            if not chunk:
                raise StoreError(f"CommitLog bytes {pos}..{end} are not readable")
            parts.append(chunk)
            pos += len(chunk)
        return b"".join(parts)

    def _cut(self, offset: int, why: str) -> None:
        st = self.store
        if offset < st.replica.replicated_offset:  # the applied (committed) end; confirm_offset may sit past a BLANK
            raise StoreError(f"raft group: refusing to cut committed CommitLog data at {offset} (applied up to "
                             f"{st.replica.replicated_offset}) for {why}")
        self.truncated_bytes += st.max_phys_offset - offset
        log.warning("raft group: CommitLog cut from %d back to %d (%s)", st.max_phys_offset, offset, why)
        st.truncate_dirty(offset)

    def _append_raw(self, phys: int, raw: bytes) -> None:
        """Leader bytes at `phys`, split at segment ends (a RECORDS payload can hold a BLANK filler and records
        of the next segment)."""
        size = self.store.commitlog.segments.segment_size
        pos = 0
        while pos < len(raw):
            off = phys + pos
            n = min(len(raw) - pos, size - off % size)
            self.store.append_raw(off, raw[pos:pos + n])
            pos += n

    # ---- RaftStorage hooks ------------------------------------------------------------------------------------
    async def prepare(self, ready: Ready) -> None:
        st = self.store
        if ready.snapshot is not None:  # installed from the leader: our log is replaced
            _, end, _ = decode_snapshot(ready.snapshot.data)
            self.base = (ready.snapshot.index, end)
            self.ends = {ready.snapshot.index: end}
            self.last = ready.snapshot.index
            self.placed.clear()
            if st.max_phys_offset > end:
                self._cut(max(end, st.replica.replicated_offset), "an installed snapshot")
            await self._catch_up(end)
        cs = ready.compact_snapshot
        if cs is not None and cs.index in self.ends:  # the log drops entries <= cs.index once it is saved
            self.base = (cs.index, self.ends[cs.index])
            for i in [i for i in self.ends if i < cs.index]:
                del self.ends[i]
        if not ready.entries:
            return
        first = ready.entries[0].index
        base = self.ends.get(first - 1)
        if base is None:
            raise StoreError(f"raft group: entries from {first} do not follow the log (known up to {self.last})")
        for i in range(first, self.last + 1):  # a conflict: our entries from `first` on are replaced
            self.ends.pop(i, None)
            self.placed.pop(i, None)
        await self._catch_up(base)
        wrote = False
        end = base
        for e in ready.entries:
            data = e.data
            kind = data[0] if data else None
            if kind == RECORDS:
                phys, rec_end = records_span(data)
                own = self._own.pop(id(data), None)
                if phys != end:
                    raise StoreError(f"raft group: entry {e.index} starts at CommitLog offset {phys}, the log ends "
                                     f"at {end} here")
                if own is not None and own[0] is data:
                    self.placed[e.index] = (own[1], own[2])
                else:
                    if st.max_phys_offset != end:
                        self._cut(end, f"entries replaced from index {e.index}")
                    self._append_raw(phys, data[RECORDS_HEAD.size:])
                    self.records_written += 1
                if st.max_phys_offset < rec_end:
                    raise StoreError(f"raft group: entry {e.index} needs CommitLog bytes up to {rec_end}, the "
                                     f"CommitLog ends at {st.max_phys_offset}")
                end = rec_end
                wrote = True
            elif kind == REF:
                raise StoreError(f"raft group: entry {e.index}'s records were deleted by retention on the leader; "
                                 "this member needs the leader's snapshot (restart it with an empty store)")
            elif kind == MESSAGES:
                raise StoreError(f"raft group: entry {e.index} is in the format of an earlier OrbitMQ version")
            self.ends[e.index] = end
            self.last = e.index
        if wrote:
            await st.flusher.flush()  # the records are durable before save() writes their references

    async def _catch_up(self, target: int) -> None:
        have = self.store.max_phys_offset
        if have >= target:
            return
        self.behind = (have, target)
        try:
            await self.fetch(target)
        finally:
            self.behind = None
        if self.store.max_phys_offset < target:
            raise StoreError(f"raft group: CommitLog at {self.store.max_phys_offset} after the transfer, "
                             f"{target} needed")
        self.store.replica.on_replicated(target)  # committed bytes (below a snapshot): visible at once

    def save(self, ready: Ready) -> None:
        if any(e.data and e.data[0] == RECORDS for e in ready.entries):
            ready = dataclasses.replace(ready, entries=[_as_ref(e) for e in ready.entries])
        super().save(ready)

    def load(self) -> tuple[HardState, Snapshot | None, list[Entry]]:
        """Recover the Raft log, then read every referenced entry's bytes back from the CommitLog (crc-checked).
        A reference the CommitLog cannot back: above the commit index, it and what follows are dropped (never
        acknowledged as committed; the leader sends them again); at or below it, CorruptionError."""
        hs, snap, entries = super().load()
        st = self.store
        self.base = (snap.index, decode_snapshot(snap.data)[1]) if snap is not None else (0, st.min_phys_offset)
        self.ends = {self.base[0]: self.base[1]}
        self.last = self.base[0]
        end = self.base[1]
        out: list[Entry] = []
        for e in entries:
            data = e.data
            kind = data[0] if data else None
            if kind == REF:
                _, phys, n, crc = REF_FORMAT.unpack_from(data)
                if phys + n <= st.min_phys_offset and phys == end:
                    pass  # deleted by retention (committed and visible long ago): the entry stays a reference
                else:
                    raw = self._read_ok(phys, n, crc) if phys == end else None
                    if raw is None:
                        if e.index <= hs.commit:
                            raise CorruptionError(self.directory, e.index,
                                                  f"committed Raft entry {e.index} references CommitLog bytes "
                                                  f"{phys}..{phys + n} that are missing or differ (the CommitLog "
                                                  f"ends at {st.max_phys_offset}); restart this member with an "
                                                  "empty store to copy the group's data again")
                        log.warning("raft group: entries from %d (uncommitted) dropped: their CommitLog bytes are "
                                    "gone", e.index)
                        break
                    data = records_entry(phys, raw)
                end = phys + n
            elif kind == MESSAGES:
                raise CorruptionError(self.directory, e.index, "the Raft log was written by an earlier OrbitMQ "
                                      "version that stored messages twice; restart this member with an empty "
                                      "store (it copies the group's data from the leader)")
            self.ends[e.index] = end
            self.last = e.index
            out.append(e if data is e.data else Entry(e.term, e.index, data))
        return hs, snap, out

    def _read_ok(self, phys: int, n: int, crc: int) -> bytes | None:
        try:
            raw = self._read(phys, phys + n)
        except StoreError:
            return None
        return raw if len(raw) == n and zlib.crc32(raw) == crc else None

    def loaded(self) -> None:
        """The CommitLog holds exactly the referenced entries: bytes past the last one (written, never logged) are
        cut; everything after the snapshot is hidden until its entry is applied (committed) again."""
        st = self.store
        st.replica.set_policy(wait_ms=0, gate_visibility=True, available=None)
        last = self.last_end()
        if st.max_phys_offset > last:
            self.truncated_bytes += st.max_phys_offset - last
            log.warning("raft group: CommitLog cut from %d back to %d (records never logged before the stop)",
                        st.max_phys_offset, last)
            st.truncate_dirty(last)
        st.hide_from(max(self.base[1], st.min_phys_offset))


def records_messages(data: bytes) -> tuple[list[MessageInner], PutResult]:
    """The messages of a RECORDS entry payload and the put result they had on the leader."""
    phys, _ = records_span(data)
    return decode_records(memoryview(data)[RECORDS_HEAD.size:], phys)


def _as_ref(e: Entry) -> Entry:
    data = e.data
    if not data or data[0] != RECORDS:
        return e
    raw = memoryview(data)[RECORDS_HEAD.size:]
    _, phys = RECORDS_HEAD.unpack_from(data)
    return Entry(e.term, e.index, REF_FORMAT.pack(REF, phys, len(raw), zlib.crc32(raw)))
