"""Orderly-consumer queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ table): exclusive per group and queue, refreshed
by the owner, free after the configured max live time."""

from __future__ import annotations

from orbitmq.broker.handlers.consumer import LOCK_MAX_LIVE_MS, QueueLockTable
from orbitmq.model.topic import MessageQueue

Q = [MessageQueue("T", "b", i) for i in range(4)]


class _Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def test_two_clients_never_hold_the_same_queue() -> None:
    clock = _Clock()
    t = QueueLockTable(clock)
    assert t.try_lock_batch("G", Q[:3], "c1") == Q[:3]
    assert t.try_lock_batch("G", Q, "c2") == [Q[3]]
    assert t.try_lock_batch("OtherGroup", Q, "c2") == Q  # locks are per group
    assert [t.owner("G", q) for q in Q] == ["c1", "c1", "c1", "c2"]
    t.unlock_batch("G", [Q[0]], "c2")  # not the owner: no effect
    assert t.owner("G", Q[0]) == "c1"
    t.unlock_batch("G", [Q[0]], "c1")
    assert t.try_lock_batch("G", [Q[0]], "c2") == [Q[0]]


def test_lock_expires_after_max_live_unless_refreshed() -> None:
    clock = _Clock()
    t = QueueLockTable(clock)
    assert LOCK_MAX_LIVE_MS == 60_000
    t.try_lock_batch("G", Q[:2], "c1")
    clock.ms = 40_000
    assert t.try_lock_batch("G", [Q[0]], "c1") == [Q[0]]  # the owner's refresh
    clock.ms = 60_000
    assert t.try_lock_batch("G", Q[:2], "c2") == []  # both still live (Q1 exactly at 60 s)
    clock.ms = 60_001
    assert t.try_lock_batch("G", Q[:2], "c2") == [Q[1]]  # Q1 lapsed, Q0 was refreshed at 40 s
    assert t.owner("G", Q[0]) == "c1"
    clock.ms = 100_001
    assert t.owner("G", Q[0]) is None
    assert t.try_lock_batch("G", [Q[0]], "c2") == [Q[0]]


def test_max_live_time_is_configurable() -> None:
    from orbitmq.broker.config_file import BROKER_KEYS
    assert BROKER_KEYS["rebalanceLockMaxLiveTime"] == "rebalance_lock_max_live_time"
    clock = _Clock()
    t = QueueLockTable(clock, max_live_ms=5000)
    t.try_lock_batch("G", [Q[0]], "c1")
    clock.ms = 5001
    assert t.try_lock_batch("G", [Q[0]], "c2") == [Q[0]]
