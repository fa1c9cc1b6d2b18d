"""Synchronous facade: BlockingProducer, BlockingPushConsumer, BlockingAdmin run the async clients on an event
loop in one background thread per facade object (never touch the caller's loop).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from orbitmq.client.admin import Admin
from orbitmq.client.consume import Listener
from orbitmq.client.producer import Producer, SendResult
from orbitmq.client.push_consumer import PushConsumer
from orbitmq.model import Message, MessageExt, MessageQueue

T = TypeVar("T")


class _LoopThread:
    """An asyncio loop running forever in a daemon thread until stop()."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class BlockingProducer:
    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        self._lt: _LoopThread | None = None
        self._args = (group, namesrv, kwargs)
        self.producer: Producer | None = None

    def start(self) -> None:
        if self._lt is not None:
            return
        self._lt = _LoopThread("orbitmq-producer")
        group, namesrv, kwargs = self._args

        async def make() -> Producer:
            p = Producer(group, namesrv, **kwargs)
            await p.start()
            return p

        self.producer = self._lt.call(make())

    def _p(self) -> tuple[_LoopThread, Producer]:
        if self._lt is None or self.producer is None:
            raise RuntimeError("producer not started")
        return self._lt, self.producer

    def send(self, msg: Message, *, queue: MessageQueue | None = None) -> SendResult:
        lt, p = self._p()
        return lt.call(p.send(msg, queue=queue))

    def send_oneway(self, msg: Message) -> None:
        lt, p = self._p()
        lt.call(p.send_oneway(msg))

    def send_batch(self, msgs: list[Message]) -> SendResult:
        lt, p = self._p()
        return lt.call(p.send_batch(msgs))

    def send_orderly(self, msg: Message, sharding_key: str) -> SendResult:
        lt, p = self._p()
        return lt.call(p.send_orderly(msg, sharding_key))

    def shutdown(self) -> None:
        if self._lt is None:
            return
        lt, p = self._p()
        try:
            lt.call(p.shutdown(), 30)
        finally:
            lt.stop()
            self._lt = None
            self.producer = None

    def __enter__(self) -> BlockingProducer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class BlockingPushConsumer:
    """Listeners run in worker threads (sync listeners) as with the async consumer."""

    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        self._args = (group, namesrv, kwargs)
        self._subs: list[tuple[str, str, Listener | None]] = []
        self._lt: _LoopThread | None = None
        self.consumer: PushConsumer | None = None

    def subscribe(self, topic: str, expression: str = "*", listener: Listener | None = None) -> None:
        self._subs.append((topic, expression, listener))

    def start(self) -> None:
        if self._lt is not None:
            return
        self._lt = _LoopThread("orbitmq-consumer")
        group, namesrv, kwargs = self._args

        async def make() -> PushConsumer:
            c = PushConsumer(group, namesrv, **kwargs)
            for t, e, listener in self._subs:
                c.subscribe(t, e, listener)
            await c.start()
            return c

        try:
            self.consumer = self._lt.call(make())
        except BaseException:
            self._lt.stop()
            self._lt = None
            raise

    def shutdown(self) -> None:
        if self._lt is None or self.consumer is None:
            return
        try:
            self._lt.call(self.consumer.shutdown(), 30)
        finally:
            self._lt.stop()
            self._lt = None
            self.consumer = None

    def __enter__(self) -> BlockingPushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class BlockingAdmin:
    """Every Admin coroutine method, called synchronously: `BlockingAdmin(ns).topic_list()`."""

    def __init__(self, namesrv: str, **kwargs: Any) -> None:
        self._lt = _LoopThread("orbitmq-admin")
        self._admin = Admin(namesrv, **kwargs)
        self._lt.call(self._admin.start())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._admin, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if asyncio.iscoroutine(result):
                return self._lt.call(result)
            return result

        return call

    def close(self) -> None:
        if self._lt.loop.is_closed():
            return
        try:
            self._lt.call(self._admin.close(), 30)
        finally:
            self._lt.stop()

    def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        return self._lt.call(self._admin.query_msg_by_id(msg_id, topic))

    def __enter__(self) -> BlockingAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
