"""EpochCache (sans-IO): the master epochs a node has seen, as (epoch, start phys offset) pairs, oldest first.

Mirrors the store's persisted epoch file (MessageStore.epochs); drivers write through. Owns the epoch rules of
classic HA (stale-epoch refusal) and of AutoSwitch HA (append / truncate / consistent point, RocketMQ's
EpochFileCache). An entry's end offset is the next entry's start; the last one ends at `max_offset` when the
cache was built for a comparison, else it is unbounded. No I/O.
"""

from __future__ import annotations

UNBOUNDED = (1 << 63) - 1  # Long.MAX_VALUE: the end of the last epoch when no log end is given
HANDSHAKE_MAX_ENTRIES = 1000  # the master's handshake carries at most this many (the newest) entries


class EpochCache:
    __slots__ = ("entries", "max_offset")

    def __init__(self, entries: list[tuple[int, int]] | None = None, max_offset: int | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])
        self.max_offset = max_offset  # end of the last entry (None = unbounded)

    # ---- classic HA ------------------------------------------------------------------------------------
    @property
    def newest(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def is_stale(self, epoch: int) -> bool:
        return epoch < self.newest

    def observe(self, epoch: int, start_offset: int) -> bool:
        """Record that data of `epoch` starts at `start_offset`; True if this is a new (newer) epoch."""
        if self.is_stale(epoch):
            raise ValueError(f"epoch {epoch} is older than {self.newest}")
        if epoch == self.newest and self.entries:
            return False
        self.entries.append((epoch, start_offset))
        return True

    def epoch_at(self, phys_offset: int) -> int:
        """Epoch whose data covers `phys_offset` (0 before the first entry)."""
        found = 0
        for epoch, start in self.entries:
            if start <= phys_offset:
                found = epoch
        return found

    # ---- ranges ------------------------------------------------------------------------------------------
    def end_of(self, index: int) -> int:
        """End offset (exclusive) of entry `index`: the next start, or the log end / UNBOUNDED for the last."""
        if index + 1 < len(self.entries):
            return self.entries[index + 1][1]
        return UNBOUNDED if self.max_offset is None else self.max_offset

    def find(self, epoch: int) -> int:
        """Index of `epoch`, -1 when absent."""
        for i, (e, _s) in enumerate(self.entries):
            if e == epoch:
                return i
        return -1

    def ranges(self) -> list[tuple[int, int, int]]:
        """(epoch, start, end) per entry."""
        return [(e, s, self.end_of(i)) for i, (e, s) in enumerate(self.entries)]

    def index_at(self, phys_offset: int) -> int:
        """Index of the entry whose [start, end) holds `phys_offset` (the last entry for its end), -1 if none."""
        found = -1
        for i, (_e, start) in enumerate(self.entries):
            if start <= phys_offset:
                found = i
            else:
                break
        return found

    # ---- AutoSwitch HA rules -----------------------------------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> bool:
        """Append a new master epoch; False (nothing changed) when it is not newer or starts before the last one.

        Unlike RocketMQ (which refuses a start equal to the last start, #9689), an epoch starting at the SAME
        offset as the last entry REPLACES it: the last epoch then holds no data, and refusing the new one left the
        node unable to find its own current epoch."""
        if self.entries:
            last_epoch, last_start = self.entries[-1]
            if epoch <= last_epoch or start_offset < last_start:
                return False
            if start_offset == last_start:
                self.entries[-1] = (epoch, start_offset)
                return True
        self.entries.append((epoch, start_offset))
        return True

    def truncate_suffix_by_epoch(self, epoch: int) -> bool:
        """Remove entries with epoch >= `epoch`; True if any was removed."""
        kept = [(e, s) for e, s in self.entries if e < epoch]
        changed = len(kept) != len(self.entries)
        self.entries = kept
        return changed

    def truncate_suffix_by_offset(self, offset: int) -> bool:
        """Remove entries starting at or after `offset` (the log was cut there); True if any was removed."""
        kept = [(e, s) for e, s in self.entries if s < offset]
        changed = len(kept) != len(self.entries)
        self.entries = kept
        return changed

    def truncate_prefix_by_offset(self, offset: int) -> bool:
        """Remove entries whose data ends at or before `offset` (old CommitLog files deleted). The last entry is
        never removed (its end is the log end)."""
        n = len(self.entries)
        drop = 0
        while drop < n - 1 and self.end_of(drop) <= offset:
            drop += 1
        self.entries = self.entries[drop:]
        return drop > 0

    def find_consistent_point(self, other: EpochCache) -> int:
        """The offset up to which this log and `other` hold the same bytes, -1 when they share no epoch.

        Walk local epochs newest first; at the first one `other` also has with the same start offset, the logs agree
        up to the smaller of the two ends (one master per epoch writes one byte sequence). Both caches should carry
        their log end as `max_offset`."""
        for i in range(len(self.entries) - 1, -1, -1):
            epoch, start = self.entries[i]
            j = other.find(epoch)
            if j >= 0 and other.entries[j][1] == start:
                return min(self.end_of(i), other.end_of(j))
        return -1

    def entries_for_handshake(self, limit: int = HANDSHAKE_MAX_ENTRIES) -> list[tuple[int, int]]:
        """What a master sends in its handshake: the newest `limit` entries (the consistent point is found from
        the newest end, so older ones matter only to a replica that is that far behind)."""
        return list(self.entries[-limit:]) if limit > 0 else []

    def copy(self, max_offset: int | None = None) -> EpochCache:
        return EpochCache(self.entries, self.max_offset if max_offset is None else max_offset)
