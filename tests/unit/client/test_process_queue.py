"""ProcessQueue bookkeeping: ordered commit offsets (concurrent) and take/commit/rollback (orderly)."""

from __future__ import annotations

from orbitmq.client.process_queue import ProcessQueue
from orbitmq.model import MessageExt


def msg(off: int, body: bytes = b"x") -> MessageExt:
    return MessageExt("T", body, {}, 0, 0, off, off * 100, 0, 0, "1.1.1.1:1", 0, "1.1.1.1:2", 0, 0, 0, 100)


def test_commit_offset_is_smallest_in_flight_then_max_plus_one():
    pq = ProcessQueue()
    assert pq.commit_offset() == -1
    ms = [msg(i) for i in range(10, 15)]
    assert pq.put(ms) == 5
    assert pq.put(ms[:2]) == 0  # duplicates ignored
    assert pq.remove([ms[2], ms[4]]) == 10
    assert pq.remove([ms[0]]) == 11
    assert pq.remove([ms[1], ms[3]]) == 15
    assert pq.cached_count == 0 and pq.cached_bytes == 0


def test_offset_span_and_bytes():
    pq = ProcessQueue()
    pq.put([msg(5, b"abc"), msg(9, b"de")])
    assert pq.offset_span() == 4 and pq.cached_bytes == 5


def test_orderly_take_commit_and_rollback_keep_order():
    pq = ProcessQueue()
    pq.put([msg(i) for i in range(4)])
    taken = pq.take(2)
    assert [m.queue_offset for m in taken] == [0, 1] and pq.has_taken
    pq.rollback_taken()
    assert not pq.has_taken
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit_taken() == 3
    assert [m.queue_offset for m in pq.take(5)] == [3]
    assert pq.commit_taken() == 4
    assert pq.commit_taken() == -1
    assert pq.cached_count == 0


def test_redelivery_below_seen_offsets_stays_sorted():
    pq = ProcessQueue()
    pq.put([msg(10), msg(11)])
    pq.put([msg(3)])
    assert pq.commit_offset() == 3
    assert [m.queue_offset for m in pq.take(3)] == [3, 10, 11]
