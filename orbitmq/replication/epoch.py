"""EpochCache (sans-IO): the master epochs a node has seen, as (epoch, start phys offset) pairs, oldest first.

Mirrors the store's persisted epoch file (MessageStore.master_epoch / set_master_epoch); the driver writes
through. A frame from an epoch older than the newest one seen comes from a deposed master and is refused.
"""

from __future__ import annotations


class EpochCache:
    __slots__ = ("entries",)

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])

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
