"""Queue allocation strategies for clustering consumers (pure, sans-IO).

Each strategy takes the sorted queue list and the sorted consumer-id list of a group and returns the queues owned
by one consumer. Every consumer computes the same answer independently, so the strategies must be deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from orbitmq.model import MessageQueue


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def sort_queues(mqs: Sequence[MessageQueue]) -> list[MessageQueue]:
    """Topic, then broker name, then queue id (the order every client agrees on)."""
    return sorted(mqs, key=lambda mq: (mq.topic, mq.broker_name, mq.queue_id))


class AllocateAveragely:
    """AllocateMessageQueueAveragely: consecutive blocks, the first `len(mq) % len(cid)` consumers get one more."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not mq_all or current_cid not in cid_all:
            return []
        n_mq, n_cid = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = n_mq % n_cid
        if n_mq <= n_cid:
            avg = 1
        else:
            avg = n_mq // n_cid + (1 if mod > 0 and index < mod else 0)
        start = index * avg if mod > 0 and index < mod else index * avg + mod
        count = min(avg, n_mq - start)
        return [mq_all[(start + i) % n_mq] for i in range(max(count, 0))]


class AllocateByCircle:
    """AllocateMessageQueueAveragelyByCircle: queue i goes to consumer i % len(cid)."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not mq_all or current_cid not in cid_all:
            return []
        index = list(cid_all).index(current_cid)
        step = len(cid_all)
        return [mq_all[i] for i in range(index, len(mq_all), step)]


def allocate(strategy: AllocateStrategy, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
             cid_all: Sequence[str]) -> list[MessageQueue]:
    """Sort both inputs (deduplicated) and run the strategy."""
    return strategy.allocate(group, current_cid, sort_queues(set(mq_all)), sorted(set(cid_all)))
