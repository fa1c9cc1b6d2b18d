"""Consumption services of the push consumer: listener types/results, calling a listener (sync or async),
the concurrent worker pool and the orderly per-queue loop.

They see the consumer only through `ConsumeOwner`, so the pull/rebalance machinery stays in push_consumer.py.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any, Protocol

from orbitmq.base import marks
from orbitmq.base.clock import monotonic_ms
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.model import MessageExt, MessageQueue, Prop

log = logging.getLogger(__name__)

LOCK_MAX_LIVE_MS = 30_000  # our own lock is treated as expired if not renewed for this long
SUSPEND_MS = 1_000
SEND_BACK_RETRY_MS = 1_000
DEFAULT_MAX_RECONSUME_TIMES = 16


class ConsumeResult(Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyResult(Enum):
    SUCCESS = "SUCCESS"
    SUSPEND = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


Listener = Callable[[list[MessageExt]], Any]


class ConsumeOwner(Protocol):
    group: str
    retry_topic: str
    clustering: bool

    def listener_for(self, topic: str) -> Listener: ...

    def on_consumed(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    max_reconsume_times: int

    async def send_back(self, mq: MessageQueue, msg: MessageExt, delay_level: int = 0) -> bool: ...


def restore_retry_topic(msgs: list[MessageExt], retry_topic: str) -> None:
    """Messages pulled from %RETRY%<group> are shown to the listener under their original topic."""
    for m in msgs:
        if m.topic == retry_topic:
            orig = m.properties.get(Prop.RETRY_TOPIC)
            if orig:
                m.topic = orig


async def call_listener(listener: Listener, msgs: list[MessageExt], in_thread: bool) -> Any:
    """Run a sync or async listener; exceptions propagate to the caller."""
    if inspect.iscoroutinefunction(listener):
        return await listener(msgs)
    if in_thread:
        result = await asyncio.to_thread(listener, msgs)
    else:
        result = listener(msgs)
    if inspect.isawaitable(result):
        result = await result
    return result


class ConcurrentConsumeService:
    """A fixed pool of worker tasks draining (mq, pq, batch) work items; commit = smallest offset in flight."""

    def __init__(self, owner: ConsumeOwner, workers: int, in_thread: bool) -> None:
        self.owner = owner
        self.workers = workers
        self.in_thread = in_thread
        self.queue: asyncio.Queue[tuple[MessageQueue, ProcessQueue, list[MessageExt]]] = asyncio.Queue()
        self.stopping = False  # drain(): no new batch starts
        self._busy = 0  # batches between their listener call and their commit
        self._idle = asyncio.Event()
        self._idle.set()

    async def drain(self, timeout_s: float) -> bool:
        """Start no new batch and wait (at most timeout_s) until the batches already handed to the listener are
        finished and their offsets given to the owner, so that a shutdown's last commit covers what the listener
        consumed (else it is consumed again after a restart). True when none was left running."""
        self.stopping = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt], batch_size: int) -> None:
        put = self.queue.put_nowait
        for i in range(0, len(msgs), batch_size):
            put((mq, pq, msgs[i:i + batch_size]))

    async def resubmit_later(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                             delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        if not pq.dropped:
            self.queue.put_nowait((mq, pq, msgs))

    async def run_worker_loop(self, spawn: Callable[[Awaitable[None], str], object]) -> None:
        while True:
            mq, pq, msgs = await self.queue.get()
            if pq.dropped or self.stopping:  # a batch not started while draining: not committed, pulled again
                continue
            self._busy += 1
            self._idle.clear()
            try:
                await self.consume(mq, pq, msgs, spawn)
            finally:
                self._busy -= 1
                if not self._busy:
                    self._idle.set()

    async def consume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                      spawn: Callable[[Awaitable[None], str], object]) -> None:
        owner = self.owner
        restore_retry_topic(msgs, owner.retry_topic)
        try:
            status = await call_listener(owner.listener_for(msgs[0].topic), msgs, self.in_thread)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a listener failure means "later", as in Java
            log.warning("listener of %s raised %r; messages will be reconsumed", owner.group, e)
            status = ConsumeResult.RECONSUME_LATER
        pq.last_consume_ms = monotonic_ms()
        if pq.dropped:
            return
        done = msgs
        if status is not ConsumeResult.SUCCESS and owner.clustering:
            marks.hit("consumer reconsume later")
            failed: list[MessageExt] = []
            for m in msgs:
                if not await owner.send_back(mq, m):
                    failed.append(m)
            if failed:
                marks.hit("consumer send back failed, local retry")
                for m in failed:
                    m.reconsume_times += 1
                failed_ids = {id(m) for m in failed}
                done = [m for m in msgs if id(m) not in failed_ids]
                spawn(self.resubmit_later(mq, pq, failed, SEND_BACK_RETRY_MS), "reconsume-local")
                if not done:
                    return
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            owner.on_consumed(mq, offset, True)


class OrderlyConsumeService:
    """One loop per queue: take the lowest-offset batch, consume, commit or put back and pause 1 s."""

    def __init__(self, owner: ConsumeOwner, batch_size: int, in_thread: bool) -> None:
        self.owner = owner
        self.batch_size = batch_size
        self.in_thread = in_thread

    async def run_queue_loop(self, mq: MessageQueue, pq: ProcessQueue, wake: asyncio.Event) -> None:
        owner = self.owner
        while not pq.dropped:
            if pq.cached_count == 0 or pq.has_taken:
                await wake.wait()
                wake.clear()
                continue
            lock_max_live_ms = getattr(owner, "lock_max_live_ms", LOCK_MAX_LIVE_MS)
            if owner.clustering and (not pq.locked or monotonic_ms() - pq.last_lock_ms > lock_max_live_ms):
                marks.hit("orderly consume waits for lock")
                await asyncio.sleep(0.1)
                continue
            msgs = pq.take(self.batch_size)
            if not msgs:
                continue
            restore_retry_topic(msgs, owner.retry_topic)
            try:
                status = await call_listener(owner.listener_for(msgs[0].topic), msgs, self.in_thread)
            except asyncio.CancelledError:
                pq.rollback_taken()
                raise
            except Exception as e:  # noqa: BLE001
                log.warning("orderly listener of %s raised %r; queue %s suspended", owner.group, e, mq)
                status = ConsumeOrderlyResult.SUSPEND
            pq.last_consume_ms = monotonic_ms()
            if pq.dropped:
                break
            if status is ConsumeOrderlyResult.SUCCESS or status is ConsumeResult.SUCCESS:
                offset = pq.commit_taken()
                if offset >= 0:
                    owner.on_consumed(mq, offset, False)
            else:
                suspend = False
                max_times = getattr(owner, "max_reconsume_times", DEFAULT_MAX_RECONSUME_TIMES)
                for m in msgs:  # past max reconsume times a message goes to %DLQ%<group> (delay level -1)
                    if owner.clustering and m.reconsume_times >= max_times and await owner.send_back(mq, m, -1):
                        marks.hit("orderly consume sent to DLQ")
                        continue
                    suspend = True
                    m.reconsume_times += 1
                if not suspend and not pq.dropped:
                    offset = pq.commit_taken()
                    if offset >= 0:
                        owner.on_consumed(mq, offset, False)
                    continue
                marks.hit("orderly consume suspended")
                pq.rollback_taken()
                await asyncio.sleep(SUSPEND_MS / 1000)
