"""The publish rule for consumer offsets on a controller-mode master (pure: no I/O, no clock). Per queue it keeps the
local latest commit and what each other SyncStateSet member acknowledged; a value is published (answered to
consumers, persisted, synced) only once every other member holds it: min(latest, acked by each member). A set of one
publishes at once. Never sends anything itself: offset_sync.py carries the batches.
"""

from __future__ import annotations

from collections.abc import Iterable

Queue = tuple[str, int]  # ("topic@group", queueId)


class PublishTable:
    """Unpublished queues of one master term. `local()` records a commit, `batch_for()` what a member still needs,
    `acked()` its answer, `publishable()` the values every member now holds."""

    def __init__(self, members: Iterable[int] = ()) -> None:
        self.members: frozenset[int] = frozenset(members)
        self.latest: dict[Queue, int] = {}
        self._acked: dict[int, dict[Queue, int]] = {}

    def set_members(self, members: Iterable[int]) -> None:
        """The other members of the current SyncStateSet (a shrink may publish at once, a new member must ack)."""
        self.members = frozenset(members)
        self._acked = {m: a for m, a in self._acked.items() if m in self.members}

    def local(self, queue: Queue, offset: int) -> None:
        self.latest[queue] = offset

    def batch_for(self, member: int, limit: int = 10_000) -> dict[Queue, int]:
        """Latest values `member` has not acknowledged yet (at most `limit`)."""
        acked = self._acked.get(member, {})
        out: dict[Queue, int] = {}
        for q, v in self.latest.items():
            if acked.get(q) != v:
                out[q] = v
                if len(out) >= limit:
                    break
        return out

    def acked(self, member: int, batch: dict[Queue, int]) -> None:
        """`member` stored every value of `batch` (ignored if it left the set meanwhile)."""
        if member in self.members:
            self._acked.setdefault(member, {}).update(batch)

    def publishable(self) -> dict[Queue, int]:
        """Per queue the value every member holds: min(latest, each member's acknowledged value); queues some
        member has acknowledged nothing for are left out. Queues whose latest value is published stop being
        tracked."""
        out: dict[Queue, int] = {}
        done: list[Queue] = []
        for q, latest in self.latest.items():
            value = latest
            for m in self.members:
                got = self._acked.get(m, {}).get(q)
                if got is None:
                    break
                value = min(value, got)
            else:
                out[q] = value
                if value == latest:
                    done.append(q)
        for q in done:
            del self.latest[q]
            for acked in self._acked.values():
                acked.pop(q, None)
        return out

    def pending(self) -> int:
        return len(self.latest)
