"""Orderly-consumer queue locks (Java's RebalanceLockManager) and the RIP-32 lockInStrictMode quorum rule.

Pure bookkeeping: no I/O, no asyncio. Forwarding a lock to the other members of the replica group is the
strict_lock service's job (services/strict_lock.py); this module only says who holds what and what a quorum is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from orbitmq.base.clock import now_ms
from orbitmq.model.topic import MessageQueue

LOCK_MAX_LIVE_MS = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime


class QueueLockTable:
    """group -> MessageQueue -> (client id, last refresh ms). A lock is free once it has not been refreshed
    for max_live_ms; the owner re-locks every 20 s."""

    def __init__(self, clock_ms: Callable[[], int] = now_ms, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self._table: dict[str, dict[MessageQueue, tuple[str, int]]] = {}
        self._clock = clock_ms
        self._max_live_ms = max_live_ms

    def try_lock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Grant every queue that is free, expired or already ours; returns the granted ones."""
        now = self._clock()
        locks = self._table.setdefault(group, {})
        granted: list[MessageQueue] = []
        for mq in mqs:
            owner = locks.get(mq)
            if owner is None or owner[0] == client_id or now - owner[1] > self._max_live_ms:
                locks[mq] = (client_id, now)
                granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        locks = self._table.get(group)
        if not locks:
            return
        for mq in mqs:
            owner = locks.get(mq)
            if owner is not None and owner[0] == client_id:
                del locks[mq]
        if not locks:
            del self._table[group]

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        entry = self._table.get(group, {}).get(mq)
        if entry is None or self._clock() - entry[1] > self._max_live_ms:
            return None
        return entry[0]


# ---- lockInStrictMode ---------------------------------------------------------------------------------------
def lock_quorum(replicas: int) -> int:
    """Members that must grant a lock: more than half of the group's replicas, live or not (Java:
    totalReplicas / 2 + 1). Two replicas need both, so a two-replica group cannot lock with one member down."""
    return max(1, replicas) // 2 + 1


def replica_count(configured: int, largest_group_seen: int) -> int:
    """totalReplicas when configured (> 0), else the largest member group seen since start (at least 1: us).

    The configured value is the safe one: a broker that starts while a member is already down under-counts."""
    return configured if configured > 0 else max(1, largest_group_seen)


def quorum_granted(grants: Iterable[Iterable[MessageQueue]], quorum: int) -> list[MessageQueue]:
    """Queues granted by at least `quorum` members; `grants` holds one granted set per member that answered
    (a member that failed or timed out contributes nothing)."""
    counts: Counter[MessageQueue] = Counter()
    for granted in grants:
        counts.update(set(granted))
    return sorted(mq for mq, n in counts.items() if n >= quorum)


def forward_targets(members: dict[int, str], self_id: int, self_addr: str) -> list[str]:
    """Addresses to forward a strict lock to: every member but this broker (by id and by address)."""
    return sorted({addr for bid, addr in members.items() if bid != self_id and addr != self_addr})
