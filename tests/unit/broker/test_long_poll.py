"""LongPollService: wake-up on arrival (tag-aware), timeout via the checker, stop, and many held requests."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from orbitmq.broker.long_poll import LongPollService


class Conn:
    def __init__(self) -> None:
        self.closed = False
        self.sent: list = []

    def send(self, cmd) -> None:
        self.sent.append(cmd)


class World:
    """A fake clock, a fake queue table and a rerun that records what it answered."""

    def __init__(self) -> None:
        self.now = 1_000
        self.max_offsets: dict[tuple[str, int], int] = {}
        self.reruns: list[tuple[Conn, str]] = []
        self.service = LongPollService(self.rerun, self.max_offset, clock_ms=lambda: self.now)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.max_offsets.get((topic, queue_id), 0)

    def rerun(self, conn: Conn, request: str) -> str:
        self.reruns.append((conn, request))
        return f"answer:{request}"


def test_arrival_wakes_only_matching_requests_of_that_queue():
    w = World()
    a, b, c = Conn(), Conn(), Conn()
    w.service.hold(a, "ra", "T", 0, 5, 15_000, frozenset({65}))  # tag "A"
    w.service.hold(b, "rb", "T", 0, 5, 15_000, None)  # "*"
    w.service.hold(c, "rc", "T", 1, 5, 15_000, None)  # other queue
    w.service.notify_arriving("T", 0, 6, 66)  # a tag "B" message
    assert b.sent == ["answer:rb"] and a.sent == [] and c.sent == []
    w.service.notify_arriving("T", 0, 7, 65)
    assert a.sent == ["answer:ra"]
    assert len(w.service) == 1


def test_arrival_below_the_requested_offset_does_not_wake():
    w = World()
    a = Conn()
    w.service.hold(a, "ra", "T", 0, 5, 15_000, None)
    w.service.notify_arriving("T", 0, 5, None)  # max offset 5 = requested offset: nothing new yet
    assert a.sent == [] and len(w.service) == 1


def test_checker_answers_after_deadline_or_when_the_queue_grew():
    w = World()
    a, b = Conn(), Conn()
    w.service.hold(a, "ra", "T", 0, 3, 1_000, frozenset({1}))
    w.service.hold(b, "rb", "U", 0, 0, 60_000, None)
    assert w.service.check() == 0
    w.now += 1_000
    assert w.service.check() == 1 and a.sent == ["answer:ra"] and w.service.timeout_count == 1
    w.max_offsets[("U", 0)] = 1  # the queue grew while nobody was notified (e.g. message from recovery)
    assert w.service.check() == 1 and b.sent == ["answer:rb"]
    assert len(w.service) == 0


def test_closed_connections_are_dropped_and_stop_answers_everyone():
    w = World()
    gone, alive = Conn(), Conn()
    w.service.hold(gone, "r1", "T", 0, 0, 15_000, None)
    w.service.hold(alive, "r2", "T", 0, 0, 15_000, None)
    gone.closed = True
    assert w.service.answer_all() == 2
    assert alive.sent == ["answer:r2"] and gone.sent == []
    assert len(w.service) == 0


def test_hold_rechecks_the_queue_to_close_the_race_with_a_concurrent_append():
    w = World()
    w.max_offsets[("T", 0)] = 4
    a = Conn()
    w.service.hold(a, "ra", "T", 0, 3, 15_000, None)
    assert a.sent == ["answer:ra"] and len(w.service) == 0


def test_thousands_of_held_requests_are_indexed_by_queue():
    w = World()
    conns = [Conn() for _ in range(5_000)]
    for i, conn in enumerate(conns):
        w.service.hold(conn, f"r{i}", "T", i % 100, 10, 15_000, None)
    assert len(w.service) == 5_000
    w.service.notify_arriving("T", 7, 11, None)
    assert len(w.reruns) == 50 and all(conns[i].sent for i in range(7, 5_000, 100))
    w.now += 15_000
    assert w.service.check() == 4_950 and len(w.service) == 0


def test_run_check_loop_answers_a_short_hold_promptly_and_dispatch_from_another_thread():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        answered = asyncio.Event()
        conn = Conn()
        conn.send = lambda cmd: answered.set()  # type: ignore[method-assign]
        max_offsets = {("T", 0): 0}
        svc = LongPollService(lambda c, r: "ok", lambda t, q: max_offsets[(t, q)])
        svc.bind_loop()
        task = loop.create_task(svc.run_check_loop(5_000, granularity_ms=20))
        await asyncio.sleep(0)
        t0 = loop.time()
        svc.hold(conn, "r", "T", 0, 0, 100, None)
        await asyncio.wait_for(answered.wait(), 2)
        assert 0.09 <= loop.time() - t0 < 1.0  # the 5 s checker period did not delay the 100 ms hold
        # a dispatch notification from a store thread is marshalled onto the loop
        answered.clear()
        svc.hold(conn, "r2", "T", 0, 0, 60_000, None)
        max_offsets[("T", 0)] = 1
        req = SimpleNamespace(topic="T", queue_id=0, queue_offset=0, tags_code=0)
        threading.Thread(target=svc.on_dispatch, args=(req,)).start()
        await asyncio.wait_for(answered.wait(), 2)
        task.cancel()

    asyncio.run(main())
