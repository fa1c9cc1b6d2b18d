"""ProcessQueue: the push consumer's per-queue cache of pulled, not yet committed messages.

Tracks what is in flight so the committed offset is always the smallest offset not yet consumed (concurrent mode)
or the end of the last consumed batch (orderly mode). Pure bookkeeping; no I/O, no asyncio.
"""

from __future__ import annotations

from collections import OrderedDict

from orbitmq.model import MessageExt


class ProcessQueue:
    """Messages of one MessageQueue, keyed by queue offset in ascending order of arrival (pulls are sequential)."""

    __slots__ = ("_msgs", "_consuming", "max_offset_seen", "dropped", "locked", "last_lock_ms",
                 "last_pull_ms", "last_consume_ms", "consuming_orderly", "cached_bytes")

    def __init__(self) -> None:
        self._msgs: OrderedDict[int, MessageExt] = OrderedDict()
        self._consuming: OrderedDict[int, MessageExt] = OrderedDict()  # orderly: taken, not yet committed
        self.max_offset_seen = -1
        self.dropped = False
        self.locked = False
        self.last_lock_ms = 0
        self.last_pull_ms = 0
        self.last_consume_ms = 0
        self.consuming_orderly = False
        self.cached_bytes = 0

    # ---- both modes -------------------------------------------------------------------------------------------
    def put(self, msgs: list[MessageExt]) -> int:
        """Add pulled messages (ascending queue offsets); returns how many were new."""
        added = 0
        d = self._msgs
        for m in msgs:
            off = m.queue_offset
            if off in d or off in self._consuming:
                continue
            if off < self.max_offset_seen:
                # Re-delivery below what we have seen (offset reset): keep ordering by rebuilding the dict.
                d[off] = m
                self._msgs = OrderedDict(sorted(d.items()))
                d = self._msgs
            else:
                d[off] = m
                self.max_offset_seen = off
            self.cached_bytes += len(m.body)
            added += 1
        return added

    @property
    def cached_count(self) -> int:
        return len(self._msgs) + len(self._consuming)

    def offset_span(self) -> int:
        if not self._msgs:
            return 0
        return next(reversed(self._msgs)) - next(iter(self._msgs))

    def clear(self) -> None:
        self._msgs.clear()
        self._consuming.clear()
        self.cached_bytes = 0

    # ---- concurrent mode --------------------------------------------------------------------------------------
    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit (smallest still in flight, or max seen + 1)."""
        d = self._msgs
        for m in msgs:
            if d.pop(m.queue_offset, None) is not None:
                self.cached_bytes -= len(m.body)
        return self.commit_offset()

    def commit_offset(self) -> int:
        """Smallest offset still in flight, else one past the largest offset seen (-1 when nothing seen)."""
        if self._msgs:
            return next(iter(self._msgs))
        return self.max_offset_seen + 1 if self.max_offset_seen >= 0 else -1

    # ---- orderly mode -----------------------------------------------------------------------------------------
    def take(self, batch_size: int) -> list[MessageExt]:
        """Move up to `batch_size` lowest-offset messages into the consuming set and return them."""
        out: list[MessageExt] = []
        while self._msgs and len(out) < batch_size:
            off, m = self._msgs.popitem(last=False)
            self._consuming[off] = m
            out.append(m)
        return out

    def commit_taken(self) -> int:
        """The taken batch succeeded: drop it; returns the next offset to commit (-1 if nothing was taken)."""
        if not self._consuming:
            return -1
        last = next(reversed(self._consuming))
        for m in self._consuming.values():
            self.cached_bytes -= len(m.body)
        self._consuming.clear()
        return last + 1

    def rollback_taken(self) -> None:
        """The taken batch must be consumed again: put it back in front, in order."""
        if not self._consuming:
            return
        merged = OrderedDict(sorted({**self._msgs, **self._consuming}.items()))
        self._consuming.clear()
        self._msgs = merged

    @property
    def has_taken(self) -> bool:
        return bool(self._consuming)
