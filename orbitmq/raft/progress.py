"""The leader's per-follower bookkeeping: replication Progress (match/next, probe/replicate/snapshot state,
in-flight APPEND window) and the ReadIndex tracker (per-round heartbeat acknowledgements).

Pure bookkeeping for raft/node.py: no messages are built here and no I/O happens here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

from orbitmq.base.invariant import check
from orbitmq.raft.messages import ReadState


class ProgressState(IntEnum):
    PROBE = 0       # one APPEND at a time until the follower's log position is known
    REPLICATE = 1   # pipelined APPENDs, next advanced optimistically
    SNAPSHOT = 2    # a SNAPSHOT is on its way; nothing else is sent until it is acknowledged or times out


@dataclass(slots=True)
class Progress:
    match: int = 0
    next: int = 1
    max_inflight: int = 64
    state: ProgressState = ProgressState.PROBE
    probe_sent: bool = False          # PROBE: an APPEND is outstanding, wait for its answer (or a heartbeat's)
    pending_snapshot: int = 0         # SNAPSHOT: index of the snapshot sent
    stalled_ticks: int = 0            # SNAPSHOT / REPLICATE: ticks without progress while something is in flight
    recent_active: bool = False       # heard from since the last check-quorum round
    inflight: deque[int] = field(default_factory=deque)  # REPLICATE: last index of each unacked APPEND

    def paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.SNAPSHOT:
            return True
        return len(self.inflight) >= self.max_inflight

    def become_probe(self) -> None:
        if self.state == ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self._reset(ProgressState.PROBE)

    def become_replicate(self) -> None:
        self.next = self.match + 1
        self._reset(ProgressState.REPLICATE)

    def become_snapshot(self, index: int) -> None:
        self._reset(ProgressState.SNAPSHOT)
        self.pending_snapshot = index

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot = 0
        self.stalled_ticks = 0
        self.inflight.clear()

    def sent(self, last: int) -> None:
        """An APPEND ending at `last` (> 0 entries) went out."""
        if self.state == ProgressState.REPLICATE:
            check(last >= self.next, f"replicate send ending at {last} below next {self.next}")
            self.next = last + 1
            self.inflight.append(last)
        elif self.state == ProgressState.PROBE:
            self.probe_sent = True

    def maybe_update(self, index: int) -> bool:
        """The follower's log matches ours up to `index`; True if that is news."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
            self.stalled_ticks = 0
        self.next = max(self.next, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def maybe_decrease(self, rejected: int, hint: int) -> bool:
        """The APPEND whose previous index was `rejected` failed; `hint` is the leader-side index the follower's
        answer points at. False when the rejection is stale (already superseded)."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1)
        self.probe_sent = False
        return True


@dataclass(slots=True)
class _PendingRead:
    ctx: int
    request_id: int
    index: int
    acks: set[str]


class ReadTracker:
    """ReadIndex rounds: each round has a context id sent in HEARTBEAT.context; a response echoing ctx c
    confirms every round <= c (those were sent before it). Reads complete in order once a quorum confirmed."""

    __slots__ = ("_quorum", "_pending", "_next_ctx")

    def __init__(self, quorum: int) -> None:
        self._quorum = quorum
        self._pending: deque[_PendingRead] = deque()
        self._next_ctx = 0

    def new_round(self, request_ids: list[int], index: int, self_id: str) -> int:
        self._next_ctx += 1
        for rid in request_ids:
            self._pending.append(_PendingRead(self._next_ctx, rid, index, {self_id}))
        return self._next_ctx

    def latest_ctx(self) -> int:
        return self._pending[-1].ctx if self._pending else 0

    def ack(self, ctx: int, peer: str) -> list[ReadState]:
        for r in self._pending:
            if r.ctx > ctx:
                break
            r.acks.add(peer)
        done: list[ReadState] = []
        while self._pending and len(self._pending[0].acks) >= self._quorum:
            r = self._pending.popleft()
            done.append(ReadState(r.request_id, r.index))
        return done

    def clear(self) -> None:
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._pending)
