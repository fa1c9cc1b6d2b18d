"""Synchronous OrbitMQ access for Spark driver and executor code: one asyncio loop thread per process running the
SDK's PullConsumer / Producer, shared by every reader and writer of that process (Python workers are reused).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import zlib
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from orbitmq.base.errors import RemotingError
from orbitmq.client import Message, MessageQueue, NoRouteError, Producer, PullConsumer, PullResult, SendResult
from orbitmq.client.errors import ResponseError
from orbitmq.model import Prop

T = TypeVar("T")
DEFAULT_GROUP = "orbitmq-spark-reader"
DEFAULT_PRODUCER_GROUP = "orbitmq-spark-writer"
STICKY_ATTEMPTS = 3  # sends of one batch to its own queue before any queue will do
log = logging.getLogger("orbitmq.spark")


class SyncClient:
    """Blocking calls onto the SDK; consumers are created per group, the producer per producer group."""

    def __init__(self, namesrv: str, timeout_s: float = 60.0) -> None:
        self.namesrv = namesrv
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="orbitmq-spark", daemon=True)
        self._thread.start()
        self._consumers: dict[str, PullConsumer] = {}
        self._producers: dict[str, Producer] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s or self.timeout_s)

    # ---- clients ------------------------------------------------------------------------------------------
    def consumer(self, group: str = DEFAULT_GROUP) -> PullConsumer:
        with self._lock:
            c = self._consumers.get(group)
            if c is None:
                c = PullConsumer(group, self.namesrv, instance_name=f"spark-{self._pid}")
                self.call(c.start())
                self._consumers[group] = c
            return c

    def producer(self, group: str = DEFAULT_PRODUCER_GROUP, **kwargs: Any) -> Producer:
        with self._lock:
            p = self._producers.get(group)
            if p is None:
                p = Producer(group, self.namesrv, instance_name=f"spark-{self._pid}", **kwargs)
                self.call(p.start())
                self._producers[group] = p
            return p

    # ---- reads ---------------------------------------------------------------------------------------------
    def queues(self, topic: str, group: str = DEFAULT_GROUP) -> list[MessageQueue]:
        """Readable queues of the topic, fresh from the name server, sorted (broker, queue id)."""
        return sorted(self.call(self.consumer(group).fetch_queues(topic)))

    def offset_bounds(self, mqs: Iterable[MessageQueue], group: str = DEFAULT_GROUP
                      ) -> dict[MessageQueue, tuple[int, int]]:
        """(min offset, max offset) per queue, asked concurrently."""
        c = self.consumer(group)

        async def one(mq: MessageQueue) -> tuple[MessageQueue, tuple[int, int]]:
            lo, hi = await asyncio.gather(c.min_offset(mq), c.max_offset(mq))
            return mq, (lo, hi)

        async def run() -> dict[MessageQueue, tuple[int, int]]:
            return dict(await asyncio.gather(*(one(mq) for mq in mqs)))

        return self.call(run())

    def search_offset(self, mq: MessageQueue, timestamp_ms: int, group: str = DEFAULT_GROUP) -> int:
        return self.call(self.consumer(group).search_offset(mq, timestamp_ms))

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = "*",
             group: str = DEFAULT_GROUP) -> PullResult:
        c = self.consumer(group)

        async def run() -> PullResult:
            if mq.topic not in c.subscribed_topics():
                await c.fetch_queues(mq.topic)  # route for find_broker_addr
            return await c.pull(mq, offset, max_nums, expression)

        return self.call(run())

    def pull_many(self, mq: MessageQueue, requests: list[tuple[int, int]], expression: str = "*",
                  group: str = DEFAULT_GROUP) -> list[PullResult]:
        """Several pulls of one queue at once: [(offset, max_nums)] -> results in the same order."""
        c = self.consumer(group)

        async def run() -> list[PullResult]:
            if mq.topic not in c.subscribed_topics():
                await c.fetch_queues(mq.topic)
            return list(await asyncio.gather(*(c.pull(mq, o, n, expression) for o, n in requests)))

        return self.call(run())

    def commit_offsets(self, group: str, table: dict[MessageQueue, int]) -> None:
        c = self.consumer(group)

        async def run() -> None:
            await asyncio.gather(*(c.update_offset(mq, off) for mq, off in table.items()))

        self.call(run())

    def committed_offset(self, group: str, mq: MessageQueue) -> int:
        return self.call(self.consumer(group).query_offset(mq))

    # ---- writes --------------------------------------------------------------------------------------------
    def send_batches(self, batches: list[list[Message]], group: str = DEFAULT_PRODUCER_GROUP,
                     max_in_flight: int = 8) -> list[SendResult]:
        """Send each list as one SEND_BATCH_MESSAGE, up to max_in_flight at once; any failure raises.

        Each batch goes to a queue chosen from its first message's UNIQ_KEY (the same queue, so the same broker
        group, every time the same batch is sent again) and is retried there: a re-send is then answered by that
        broker's de-duplication. Only after STICKY_ATTEMPTS failures there does the SDK pick another queue."""
        p = self.producer(group)

        async def one(msgs: list[Message], sem: asyncio.Semaphore) -> SendResult:
            async with sem:
                # the producer's own queue list (a topic new to the broker is auto-created as by a plain send)
                queues = (await p._instance().publish_info(msgs[0].topic, p.default_topic_queue_nums)).queues
                uniq = msgs[0].properties.get(Prop.UNIQ_KEY)
                if not queues or uniq is None:
                    return await p.send_batch(msgs)
                mq = queues[zlib.crc32(uniq.encode()) % len(queues)]
                for attempt in range(STICKY_ATTEMPTS):
                    try:
                        return await p.send_batch(msgs, queue=mq)
                    except (RemotingError, ResponseError, NoRouteError) as exc:
                        log.warning("batch of %d to %s failed (attempt %d): %s", len(msgs), mq, attempt + 1, exc)
                        await asyncio.sleep(0.2 * (attempt + 1))
                return await p.send_batch(msgs)

        async def run() -> list[SendResult]:
            sem = asyncio.Semaphore(max_in_flight)
            return list(await asyncio.gather(*(one(b, sem) for b in batches)))

        return self.call(run())

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            for c in self._consumers.values():
                await c.shutdown()
            for p in self._producers.values():
                await p.shutdown()

        try:
            self.call(shutdown(), 15)
        except Exception:  # noqa: BLE001 - best effort at process exit
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


_CLIENTS: dict[str, SyncClient] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(namesrv: str) -> SyncClient:
    """The process-wide SyncClient for a name server address (re-created after a fork)."""
    with _CLIENTS_LOCK:
        c = _CLIENTS.get(namesrv)
        if c is None or c._pid != os.getpid():
            c = SyncClient(namesrv)
            _CLIENTS[namesrv] = c
        return c


def close_all() -> None:
    with _CLIENTS_LOCK:
        clients = [c for c in _CLIENTS.values() if c._pid == os.getpid()]
        _CLIENTS.clear()
    for c in clients:
        c.close()


atexit.register(close_all)
