"""Allocation strategies: Java AllocateMessageQueueAveragely / ByCircle results, coverage and disjointness."""

from __future__ import annotations

import pytest

from orbitmq.client.rebalance import AllocateAveragely, AllocateByCircle, allocate, sort_queues
from orbitmq.model import MessageQueue


def queues(n: int, brokers=("broker-a",)) -> list[MessageQueue]:
    return [MessageQueue("T", b, i) for b in brokers for i in range(n)]


def test_averagely_8_queues_3_consumers_gives_3_3_2_consecutive():
    mqs = queues(8)
    cids = ["c0", "c1", "c2"]
    got = [AllocateAveragely().allocate("g", c, mqs, cids) for c in cids]
    assert [[q.queue_id for q in g] for g in got] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_averagely_more_consumers_than_queues_leaves_extra_consumers_empty():
    mqs = queues(2)
    cids = ["a", "b", "c", "d"]
    got = [AllocateAveragely().allocate("g", c, mqs, cids) for c in cids]
    assert [[q.queue_id for q in g] for g in got] == [[0], [1], [], []]


def test_unknown_consumer_gets_nothing():
    assert AllocateAveragely().allocate("g", "zz", queues(4), ["a"]) == []
    assert AllocateByCircle().allocate("g", "zz", queues(4), ["a"]) == []


def test_by_circle_deals_queues_round_robin():
    mqs = queues(5)
    got = [[q.queue_id for q in AllocateByCircle().allocate("g", c, mqs, ["a", "b"])] for c in ("a", "b")]
    assert got == [[0, 2, 4], [1, 3]]


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateByCircle()])
@pytest.mark.parametrize("n_mq,n_cid", [(1, 1), (4, 3), (16, 5), (3, 7), (24, 24), (10, 1)])
def test_every_queue_is_owned_by_exactly_one_consumer(strategy, n_mq, n_cid):
    mqs = queues(n_mq // 2 or 1, ("b1", "b0")) if n_mq > 1 else queues(1)
    cids = [f"10.0.0.1@{i}" for i in range(n_cid)]
    owned = [q for c in cids for q in allocate(strategy, "g", c, list(reversed(mqs)), list(reversed(cids)))]
    assert sorted(owned) == sorted(mqs)
    assert len(owned) == len(set(owned))


def test_sort_queues_orders_by_topic_broker_then_id():
    mqs = [MessageQueue("T", "b", 1), MessageQueue("A", "z", 0), MessageQueue("T", "a", 3), MessageQueue("T", "b", 0)]
    assert sort_queues(mqs) == [MessageQueue("A", "z", 0), MessageQueue("T", "a", 3), MessageQueue("T", "b", 0),
                                MessageQueue("T", "b", 1)]
