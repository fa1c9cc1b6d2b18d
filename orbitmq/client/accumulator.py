"""SendAccumulator: coalesces concurrent single sends into batches (the producer's opt-in `auto_batch`).

The first send of a key opens a batch and yields once to the event loop (linger 0) or waits the linger delay;
sends made meanwhile join that batch, which then closes (or earlier, as soon as it is full: message count or
bytes). A closed batch holding one live send is handed back to that send (`ALONE`: it goes out as a plain send from
its own task, as without auto-batching); two or more are dispatched together by one task of the accumulator, which
fans the per-message results (or the one error) out to the waiting futures. Wire encoding, queue choice and
retries are the dispatcher's job (producer.py).

A waiter cancelled before its batch closes is dropped from it; cancelled after, it is simply not answered. close()
dispatches every open batch and waits for the batches in flight, so no waiter is left hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

from orbitmq.client.errors import ClientStateError
from orbitmq.model import Message

R = TypeVar("R")
ALONE: Any = object()  # a waiter's result meaning "your batch holds only you: send it yourself"


class Pending:
    """One accumulated send: the message, its encoded properties, its batch-record size and its waiter."""

    __slots__ = ("msg", "props", "size", "future")

    def __init__(self, msg: Message, props: str, size: int, future: asyncio.Future[Any]) -> None:
        self.msg = msg
        self.props = props
        self.size = size
        self.future = future


class _Batch:
    __slots__ = ("key", "items", "size")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.items: list[Pending] = []
        self.size = 0


Dispatch = Callable[[Hashable, list[Pending]], Coroutine[Any, Any, list[R]]]


class SendAccumulator(Generic[R]):
    def __init__(self, dispatch: Dispatch[R], *, max_messages: int, max_bytes: int, linger_ms: float = 0,
                 name: str = "producer") -> None:
        if max_messages < 1:
            raise ValueError(f"auto_batch_max_messages must be >= 1, not {max_messages}")
        if max_bytes < 1:
            raise ValueError(f"auto_batch_max_bytes must be >= 1, not {max_bytes}")
        if linger_ms < 0:
            raise ValueError(f"auto_batch_linger_ms must be >= 0, not {linger_ms}")
        self.dispatch = dispatch
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.linger_s = linger_ms / 1000
        self.name = name
        self._open: dict[Hashable, _Batch] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self.closed = False

    def __len__(self) -> int:
        """Sends accumulated and not yet dispatched."""
        return sum(len(b.items) for b in self._open.values())

    async def submit(self, key: Hashable, msg: Message, props: str, size: int) -> Any:
        """Accumulate one send (its record must fit max_bytes) and wait: -> its result, or ALONE; raises its
        batch's error."""
        if self.closed:
            raise ClientStateError(f"{self.name} is shut down")
        batch = self._open.get(key)
        if batch is not None and batch.size + size > self.max_bytes:
            self._close(batch)
            batch = None
        leader = batch is None
        if batch is None:
            batch = self._open[key] = _Batch(key)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        batch.items.append(Pending(msg, props, size, fut))
        batch.size += size
        if len(batch.items) >= self.max_messages:
            self._close(batch)
        elif leader:
            try:
                if self.linger_s > 0:
                    await asyncio.wait((fut,), timeout=self.linger_s)  # returns early when the batch filled up
                else:
                    await asyncio.sleep(0)  # one loop iteration: sends woken in this one join the batch
            except BaseException:
                fut.cancel()  # leaves the batch; the others are still dispatched
                self._close(batch)
                raise
            self._close(batch)
        return await fut

    def _close(self, batch: _Batch) -> None:
        if self._open.get(batch.key) is batch:
            del self._open[batch.key]
        live = [p for p in batch.items if not p.future.done()]  # a cancelled waiter leaves its batch
        batch.items = []
        if not live:
            return
        if len(live) == 1:
            live[0].future.set_result(ALONE)
            return
        task = asyncio.get_running_loop().create_task(self._run(batch.key, live), name=f"{self.name} auto-batch")
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _run(self, key: Hashable, items: list[Pending]) -> None:
        try:
            results = await self.dispatch(key, items)
        except asyncio.CancelledError:
            err = ClientStateError(f"{self.name} was shut down before the batched send completed")
            for p in items:
                if not p.future.done():
                    p.future.set_exception(err)
            raise
        except Exception as e:  # noqa: BLE001 - every waiter gets the batch's error
            for p in items:
                if not p.future.done():
                    p.future.set_exception(e)
            return
        for p, r in zip(items, results, strict=True):
            if not p.future.done():
                p.future.set_result(r)

    async def close(self, timeout_s: float) -> None:
        """Dispatch every open batch and wait for all batches in flight (cancelled after timeout_s)."""
        self.closed = True
        for batch in list(self._open.values()):
            self._close(batch)
        if self._inflight:
            tasks = list(self._inflight)
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
