"""Consume services with a fake owner (no network): commit order, send-back and local retry, orderly suspend."""

from __future__ import annotations

import asyncio

from orbitmq.client import consume
from orbitmq.client.consume import (
    ConcurrentConsumeService,
    ConsumeOrderlyResult,
    ConsumeResult,
    OrderlyConsumeService,
    restore_retry_topic,
)
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.model import MessageExt, MessageQueue

MQ = MessageQueue("T", "b", 0)


def msg(off: int, topic: str = "T", props: dict[str, str] | None = None) -> MessageExt:
    return MessageExt(topic, b"%d" % off, props or {}, 0, 0, off, off, 0, 0, "1.1.1.1:1", 0, "1.1.1.1:2", 0, 0, 0,
                      1)


class Owner:
    group = "G"
    retry_topic = "%RETRY%G"
    clustering = True

    def __init__(self, listener, send_back_ok=True) -> None:
        self.listener = listener
        self.send_back_ok = send_back_ok
        self.commits: list[tuple[int, bool]] = []
        self.sent_back: list[int] = []

    def listener_for(self, topic):
        return self.listener

    def on_consumed(self, mq, offset, increase_only):
        self.commits.append((offset, increase_only))

    async def send_back(self, mq, m):
        self.sent_back.append(m.queue_offset)
        return self.send_back_ok


def test_restore_retry_topic_uses_the_original_topic():
    ms = [msg(1, "%RETRY%G", {"RETRY_TOPIC": "T"}), msg(2, "%RETRY%G"), msg(3, "U")]
    restore_retry_topic(ms, "%RETRY%G")
    assert [m.topic for m in ms] == ["T", "%RETRY%G", "U"]


def test_concurrent_commit_is_the_smallest_offset_in_flight():
    async def main():
        owner = Owner(lambda msgs: ConsumeResult.SUCCESS)
        svc = ConcurrentConsumeService(owner, 1, in_thread=False)
        pq = ProcessQueue()
        ms = [msg(i) for i in range(3)]
        pq.put(ms)
        await svc.consume(MQ, pq, [ms[1]], lambda c, n: None)
        await svc.consume(MQ, pq, [ms[0]], lambda c, n: None)
        await svc.consume(MQ, pq, [ms[2]], lambda c, n: None)
        return owner.commits

    assert asyncio.run(main()) == [(0, True), (2, True), (3, True)]


def test_reconsume_later_sends_back_and_commits():
    async def main():
        async def listener(msgs):
            return ConsumeResult.RECONSUME_LATER

        owner = Owner(listener)
        svc = ConcurrentConsumeService(owner, 1, in_thread=False)
        pq = ProcessQueue()
        pq.put([msg(5)])
        await svc.consume(MQ, pq, [msg(5)], lambda c, n: None)
        return owner

    owner = asyncio.run(main())
    assert owner.sent_back == [5] and owner.commits == [(6, True)]


def test_failed_send_back_keeps_the_message_and_retries_locally(monkeypatch):
    monkeypatch.setattr(consume, "SEND_BACK_RETRY_MS", 10)

    async def main():
        calls = []

        def listener(msgs):
            calls.append(msgs[0].reconsume_times)
            if len(calls) == 1:
                raise RuntimeError("boom")  # an exception means RECONSUME_LATER
            return ConsumeResult.SUCCESS

        owner = Owner(listener, send_back_ok=False)
        svc = ConcurrentConsumeService(owner, 1, in_thread=True)
        tasks = set()

        def spawn(coro, name):
            t = asyncio.ensure_future(coro)
            tasks.add(t)
            return t

        worker = asyncio.ensure_future(svc.run_worker_loop(spawn))
        pq = ProcessQueue()
        m = msg(7)
        pq.put([m])
        svc.submit(MQ, pq, [m], 1)
        for _ in range(100):
            if owner.commits:
                break
            await asyncio.sleep(0.01)
        worker.cancel()
        await asyncio.gather(worker, *tasks, return_exceptions=True)
        return calls, owner.commits

    calls, commits = asyncio.run(main())
    assert calls == [0, 1]  # second delivery counts the local retry
    assert commits == [(8, True)]  # nothing committed until the retry succeeded


def test_orderly_suspend_redelivers_the_same_batch_in_order(monkeypatch):
    monkeypatch.setattr(consume, "SUSPEND_MS", 10)

    async def main():
        seen: list[int] = []
        suspended = []

        async def listener(msgs):
            off = msgs[0].queue_offset
            if off == 1 and not suspended:
                suspended.append(off)
                return ConsumeOrderlyResult.SUSPEND
            seen.append(off)
            return ConsumeOrderlyResult.SUCCESS

        owner = Owner(listener)
        owner.clustering = False
        svc = OrderlyConsumeService(owner, 1, in_thread=False)
        pq = ProcessQueue()
        wake = asyncio.Event()
        loop_task = asyncio.ensure_future(svc.run_queue_loop(MQ, pq, wake))
        pq.put([msg(i) for i in range(4)])
        wake.set()
        for _ in range(200):
            if len(seen) == 4:
                break
            await asyncio.sleep(0.01)
        pq.dropped = True
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        return seen, owner.commits

    seen, commits = asyncio.run(main())
    assert seen == [0, 1, 2, 3]
    assert commits == [(1, False), (2, False), (3, False), (4, False)]


def test_orderly_waits_while_the_queue_lock_is_missing():
    async def main():
        seen = []
        owner = Owner(lambda msgs: seen.append(1) or ConsumeOrderlyResult.SUCCESS)
        svc = OrderlyConsumeService(owner, 1, in_thread=False)
        pq = ProcessQueue()
        pq.locked = False
        wake = asyncio.Event()
        t = asyncio.ensure_future(svc.run_queue_loop(MQ, pq, wake))
        pq.put([msg(0)])
        wake.set()
        await asyncio.sleep(0.25)
        assert seen == []
        pq.locked = True
        pq.last_lock_ms = consume.monotonic_ms()
        await asyncio.sleep(0.25)
        pq.dropped = True
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return seen

    assert asyncio.run(main()) == [1]


class _HeldListener:
    """A listener (run in a thread) that records the offsets it is given and holds each call until released."""

    def __init__(self) -> None:
        import threading

        self.entered, self.release = threading.Event(), threading.Event()
        self.seen: list[int] = []

    def __call__(self, msgs):
        self.seen.extend(m.queue_offset for m in msgs)
        self.entered.set()
        self.release.wait(5)
        return ConsumeResult.SUCCESS


async def _one_batch_held(queued: list[MessageExt]):
    """A one-worker service whose listener is inside the batch of offset 0, with `queued` waiting behind it."""
    held = _HeldListener()
    owner = Owner(held)
    svc = ConcurrentConsumeService(owner, 1, in_thread=True)
    pq = ProcessQueue()
    first = [msg(0)]
    pq.put(first + queued)
    worker = asyncio.ensure_future(svc.run_worker_loop(lambda c, n: asyncio.ensure_future(c)))
    svc.submit(MQ, pq, first, 1)
    await asyncio.to_thread(held.entered.wait, 5)
    if queued:
        svc.submit(MQ, pq, queued, 1)
    return held, owner, svc, worker


def test_drain_lets_a_running_batch_commit_and_starts_no_new_one():
    """shutdown's drain: the batch the listener is consuming finishes and its offset reaches the owner before the
    tasks are cancelled (its commit would be lost otherwise, and the message consumed again); a batch still
    queued does not start."""
    async def main():
        held, owner, svc, worker = await _one_batch_held([msg(1)])
        drained = asyncio.ensure_future(svc.drain(5.0))
        await asyncio.sleep(0.05)
        assert not drained.done() and owner.commits == []  # waiting for the listener
        held.release.set()
        assert await drained is True
        assert owner.commits == [(1, True)]  # the running batch committed: the next offset is 1
        await asyncio.sleep(0.05)
        assert held.seen == [0]  # the queued batch never started
        worker.cancel()

    asyncio.run(main())


def test_drain_is_bounded_by_its_timeout():
    async def main():
        held, owner, svc, worker = await _one_batch_held([])
        assert await svc.drain(0.1) is False
        assert owner.commits == []
        held.release.set()
        worker.cancel()

    asyncio.run(main())
