"""RaftLog: the core's in-memory view of the log (the entries after the latest snapshot, plus that snapshot's
index and term): term lookup, slicing, conflict search, truncate/append, compaction and snapshot restore.

Pure data structure: it knows nothing about persistence (the node tracks what is stable) and does no I/O.
"""

from __future__ import annotations

from orbitmq.base.invariant import check
from orbitmq.raft.messages import Entry, Snapshot


class RaftLog:
    __slots__ = ("snap_index", "snap_term", "_entries")

    def __init__(self, snapshot: Snapshot | None = None, entries: list[Entry] | None = None) -> None:
        self.snap_index = snapshot.index if snapshot is not None else 0
        self.snap_term = snapshot.term if snapshot is not None else 0
        self._entries: list[Entry] = []
        for e in entries or []:
            self.append(e)

    # --- lookups ---------------------------------------------------------------------------------------
    @property
    def first_index(self) -> int:
        return self.snap_index + 1

    @property
    def last_index(self) -> int:
        return self.snap_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snap_term

    def term_at(self, index: int) -> int | None:
        """Term of the entry at `index`; the snapshot's term at its index; None when compacted or absent."""
        if index == self.snap_index:
            return self.snap_term
        if index < self.snap_index or index > self.last_index:
            return None
        return self._entries[index - self.snap_index - 1].term

    def matches(self, index: int, term: int) -> bool:
        return self.term_at(index) == term

    def entry(self, index: int) -> Entry:
        check(self.snap_index < index <= self.last_index, f"entry {index} outside ({self.snap_index}, "
                                                          f"{self.last_index}]")
        return self._entries[index - self.snap_index - 1]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi (clamped to what the log holds after the snapshot)."""
        lo = max(lo, self.first_index)
        hi = min(hi, self.last_index + 1)
        if lo >= hi:
            return []
        base = self.snap_index + 1
        return self._entries[lo - base:hi - base]

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's election restriction: a log ending at (last_index, last_term) is at least as recent as ours."""
        mine = self.last_term
        return last_term > mine or (last_term == mine and last_index >= self.last_index)

    def find_conflict(self, entries: tuple[Entry, ...] | list[Entry]) -> int:
        """Index of the first of `entries` that is absent or differs in term from our log; 0 if all match."""
        for e in entries:
            if not self.matches(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """The largest i <= index whose term is <= `term` (etcd's fast back-off); below the snapshot the
        answer is `index` itself (clamped), which makes the leader fall back to sending a snapshot."""
        i = min(index, self.last_index)
        while i > self.snap_index:
            t = self.term_at(i)
            if t is not None and t <= term:
                return i
            i -= 1
        return i

    # --- mutation --------------------------------------------------------------------------------------
    def append(self, entry: Entry) -> None:
        check(entry.index == self.last_index + 1, f"append of index {entry.index} after {self.last_index}")
        check(entry.term >= self.last_term, f"append of term {entry.term} after term {self.last_term}")
        self._entries.append(entry)

    def truncate_and_append(self, entries: list[Entry]) -> None:
        """Drop our entries from entries[0].index on and append `entries` (the caller checked the cut is above
        the commit index)."""
        if not entries:
            return
        start = entries[0].index
        check(self.snap_index < start <= self.last_index + 1, f"truncate at {start} outside "
                                                               f"({self.snap_index}, {self.last_index + 1}]")
        del self._entries[start - self.snap_index - 1:]
        for e in entries:
            self.append(e)

    def compact(self, index: int) -> int:
        """Drop entries <= index (which must be in the log); returns the term of `index`."""
        term = self.term_at(index)
        check(term is not None and index >= self.snap_index, f"compact to {index} outside the log")
        assert term is not None
        del self._entries[:index - self.snap_index]
        self.snap_index, self.snap_term = index, term
        return term

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot` (a follower installing the leader's snapshot)."""
        self._entries = []
        self.snap_index, self.snap_term = snapshot.index, snapshot.term
