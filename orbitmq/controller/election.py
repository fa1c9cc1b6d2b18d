"""DefaultElectPolicy: which broker of a group becomes master (RocketMQ's rules, without its comparator bugs).

Pure function of its inputs: the candidate sets, the old master, a designated id, and two callbacks for liveness
and the last heartbeat report. Never reads the controller state or the clock itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CandidateInfo:
    """What a broker last reported in its heartbeat (the ordering keys of an election)."""
    epoch: int = 0
    max_offset: int = 0
    election_priority: int = 2**31 - 1  # Integer.MAX_VALUE: lower is preferred


IsAlive = Callable[[int], bool]
LiveInfo = Callable[[int], CandidateInfo | None]


class DefaultElectPolicy:
    """`elect` tries the SyncStateSet first, then (unclean election, only when `all_replicas` is given) every
    registered replica. Within one candidate set:
      1. only alive brokers count;
      2. the old master is kept when alive, unless another id is designated;
      3. a designated id wins if it is an alive candidate, else nobody (never a fallback to someone else);
      4. otherwise the highest (epoch, maxOffset) wins, then the lowest electionPriority, then the lowest id.
    Python ints compare exactly (no overflow) and equal-ranked candidates are not dropped (no TreeSet dedup).
    """

    def __init__(self, is_alive: IsAlive, live_info: LiveInfo | None = None) -> None:
        self.is_alive = is_alive
        self.live_info = live_info

    def elect(self, sync_state_set: Iterable[int], all_replicas: Iterable[int] | None, old_master: int | None,
              prefer: int | None = None) -> int | None:
        chosen = self._elect_among(sync_state_set, old_master, prefer)
        if chosen is None and all_replicas is not None:
            chosen = self._elect_among(all_replicas, old_master, prefer)
        return chosen

    def _elect_among(self, candidates: Iterable[int], old_master: int | None, prefer: int | None) -> int | None:
        alive = sorted(b for b in set(candidates) if self.is_alive(b))
        if not alive:
            return None
        if old_master is not None and old_master in alive and (prefer is None or prefer == old_master):
            return old_master
        if prefer is not None:
            return prefer if prefer in alive else None
        if self.live_info is None:
            return alive[0]
        return min(alive, key=self._rank)

    def _rank(self, broker_id: int) -> tuple[int, int, int, int]:
        info = self.live_info(broker_id) if self.live_info is not None else None
        if info is None:
            info = CandidateInfo(epoch=-1, max_offset=-1)
        return (-info.epoch, -info.max_offset, info.election_priority, broker_id)
