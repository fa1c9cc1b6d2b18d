"""TaskSet: the SDK's structured-concurrency helper. Every background task of a client object lives in one
TaskSet; close() cancels and awaits them all, so shutdown leaves no orphan tasks. Crashes are logged, never lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from orbitmq.base import marks

log = logging.getLogger(__name__)
T = TypeVar("T")


class TaskSet:
    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        if self.closed:
            coro.close()
            raise RuntimeError(f"{self.name} is closed")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            marks.hit("client task crashed")
            log.error("%s: task %s crashed: %r", self.name, task.get_name(), exc, exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Cancel every task and wait for all of them (bounded)."""
        self.closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            done, pending = await asyncio.wait(tasks, timeout=timeout_s)
            if pending:
                log.error("%s: %d tasks did not stop within %.1fs: %s", self.name, len(pending), timeout_s,
                          ", ".join(sorted(t.get_name() for t in pending)))
                for t in pending:
                    self._tasks.discard(t)
                break


async def run_periodic(name: str, interval_ms: int, fn: Callable[[], Awaitable[None]], *,
                       initial_delay_ms: int | None = None, wake: asyncio.Event | None = None) -> None:
    """run_<thing>_loop body: call fn every interval (or when `wake` is set); failures are logged and counted,
    and the loop keeps going (explicit policy: a periodic client chore is always retried next period)."""
    delay = interval_ms if initial_delay_ms is None else initial_delay_ms
    while True:
        if wake is None:
            await asyncio.sleep(delay / 1000)
        else:
            try:
                # asyncio.timeout, not wait_for: wait_for on 3.11 can swallow a cancel that races the wake-up
                async with asyncio.timeout(delay / 1000):
                    await wake.wait()
            except TimeoutError:
                pass
            wake.clear()
        delay = interval_ms
        try:
            await fn()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - counted and logged, next period retries
            marks.hit(f"client loop error: {name}")
            log.warning("%s failed: %r", name, e)
