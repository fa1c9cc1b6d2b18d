"""Long polling: PULL_MESSAGE requests parked until a matching message arrives or their hold time passes.

Held requests live in a dict keyed (topic, queue_id) → list, so a dispatched message only touches the
requests of its own queue. Wake-ups are batched into one loop callback; the answer is produced by re-running
the pull without suspend permission (the `rerun` callable from handlers/pull.py). Must not import remoting.

Bounds (HoldLimits, from broker.conf): a hold never lasts longer than `max_hold_ms` whatever suspendTimeoutMillis
the client asks; a connection holding `max_per_connection` pulls, or a broker holding `max_total`, gets SYSTEM_BUSY
at once for the next one (RocketMQ clients retry such a pull after a pause, PULL_NOT_FOUND would make them spin).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from orbitmq.base.clock import monotonic_ms
from orbitmq.protocol import ResponseCode

log = logging.getLogger("orbitmq.broker.long_poll")

# rerun(conn, request) -> response (or None if the connection is gone); never suspends again
Rerun = Callable[[Any, Any], Any]


class HoldLimits(NamedTuple):
    """0 (or less) switches a bound off."""

    max_hold_ms: int = 60_000
    max_per_connection: int = 1_000
    max_total: int = 100_000


LIMIT_HOLD_PER_CONNECTION = "longPollingMaxHeldPerConnection"
LIMIT_HOLD_TOTAL = "longPollingMaxHeld"
LIMIT_HOLD_TIME = "longPollingMaxHoldMs"


class HeldPull:
    __slots__ = ("conn", "request", "topic", "queue_id", "queue_offset", "deadline_ms", "codes")

    def __init__(self, conn: Any, request: Any, topic: str, queue_id: int, queue_offset: int, deadline_ms: int,
                 codes: frozenset[int] | None) -> None:
        self.conn = conn
        self.request = request
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.deadline_ms = deadline_ms
        self.codes = codes  # None = match everything

    def matches(self, tags_code: int | None) -> bool:
        return self.codes is None or tags_code is None or tags_code in self.codes


class LongPollService:
    """Parks pull requests and answers them on message arrival, on the periodic check, or at stop."""

    def __init__(self, rerun: Rerun, max_offset: Callable[[str, int], int],
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self._rerun = rerun
        self._max_offset = max_offset
        self._clock = clock_ms
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._ready: list[HeldPull] = []
        self._drain_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.answered_count = 0
        self.timeout_count = 0
        self._wake_fut: asyncio.Future[bool] | None = None  # resolved by hold() to wake the checker earlier
        self._next_check_ms: int | None = None
        self._limits: Callable[[], HoldLimits] = HoldLimits
        self._on_limit: Callable[[str], None] | None = None
        self._per_conn: dict[Any, int] = {}  # connection -> pulls held (or ready to answer) for it
        self._count = 0
        self.refused_count = 0

    def set_limits(self, limits: Callable[[], HoldLimits], on_limit: Callable[[str], None] | None = None) -> None:
        """`limits` is read on every hold (hot-reloadable config); `on_limit` counts each bound hit."""
        self._limits = limits
        self._on_limit = on_limit

    def held_by(self, conn: Any) -> int:
        return self._per_conn.get(conn, 0)

    def _limit_hit(self, name: str) -> None:
        if self._on_limit is not None:
            self._on_limit(name)

    def _release(self, conn: Any) -> None:
        n = self._per_conn.get(conn, 0) - 1
        if n > 0:
            self._per_conn[conn] = n
        else:
            self._per_conn.pop(conn, None)
        self._count -= 1

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Remember the event loop that owns the table (dispatch listeners may call from another thread)."""
        self._loop = loop or asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def __len__(self) -> int:
        return sum(len(v) for v in self._held.values())

    @property
    def held_table(self) -> dict[tuple[str, int], list[HeldPull]]:
        """The live table of parked pulls (never replaced): on_dispatch does nothing while it is empty, so the
        store calls it only while it is not (add_dispatch_listener's while_nonempty)."""
        return self._held

    @property
    def held_count(self) -> int:
        """Pulls parked or about to be answered (what the caps count)."""
        return self._count

    # ----- parking -----
    def hold(self, conn: Any, request: Any, topic: str, queue_id: int, queue_offset: int, hold_ms: int,
             codes: frozenset[int] | None) -> None:
        lim = self._limits()
        if 0 < lim.max_per_connection <= self._per_conn.get(conn, 0):
            self._refuse(conn, request, LIMIT_HOLD_PER_CONNECTION,
                         f"too many held pulls on this connection (longPollingMaxHeldPerConnection="
                         f"{lim.max_per_connection}), try again later")
            return
        if 0 < lim.max_total <= self._count:
            self._refuse(conn, request, LIMIT_HOLD_TOTAL,
                         f"too many held pulls on this broker (longPollingMaxHeld={lim.max_total}), try again later")
            return
        if 0 < lim.max_hold_ms < hold_ms:
            hold_ms = lim.max_hold_ms
            self._limit_hit(LIMIT_HOLD_TIME)
        self._per_conn[conn] = self._per_conn.get(conn, 0) + 1
        self._count += 1
        deadline = self._clock() + hold_ms
        req = HeldPull(conn, request, topic, queue_id, queue_offset, deadline, codes)
        fut = self._wake_fut
        if fut is not None and not fut.done() and (self._next_check_ms is None or deadline < self._next_check_ms):
            fut.set_result(False)
        key = (topic, queue_id)
        lst = self._held.get(key)
        if lst is None:
            self._held[key] = [req]
        else:
            lst.append(req)
        # a message may have become visible between the store read and now (store dispatching in a thread)
        if self._max_offset(topic, queue_id) > queue_offset:
            self._wake_key(key, queue_offset + 1, None)

    def _refuse(self, conn: Any, request: Any, limit: str, remark: str) -> None:
        self.refused_count += 1
        self._limit_hit(limit)
        try:
            conn.send(request.response(ResponseCode.SYSTEM_BUSY, remark))
        except Exception:
            log.debug("could not refuse a pull on %s", getattr(conn, "remote_addr", "?"), exc_info=True)

    # ----- wake-ups -----
    def on_dispatch(self, req: Any) -> None:
        """Store dispatch listener: a record of (topic, queue_id) is now visible at req.queue_offset."""
        if not self._held:
            return
        if self._loop is not None and threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.notify_arriving, req.topic, req.queue_id,
                                            req.queue_offset + 1, req.tags_code)
            return
        self.notify_arriving(req.topic, req.queue_id, req.queue_offset + 1, req.tags_code)

    def notify_arriving(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None) -> None:
        key = (topic, queue_id)
        if key in self._held:
            self._wake_key(key, max_offset, tags_code)

    def _wake_key(self, key: tuple[str, int], max_offset: int, tags_code: int | None) -> None:
        lst = self._held.get(key)
        if not lst:
            return
        keep: list[HeldPull] = []
        for h in lst:
            if max_offset > h.queue_offset and h.matches(tags_code):
                self._ready.append(h)
            else:
                keep.append(h)
        if keep:
            self._held[key] = keep
        else:
            del self._held[key]
        if self._ready and not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                loop = self._loop or asyncio.get_running_loop()
                loop.call_soon(self._drain)
            except RuntimeError:  # no loop (unit tests driving the service directly)
                self._drain()

    def _drain(self) -> None:
        self._drain_scheduled = False
        ready, self._ready = self._ready, []
        for h in ready:
            self._answer(h)

    def _answer(self, h: HeldPull) -> None:
        conn = h.conn
        self._release(conn)
        if getattr(conn, "closed", False):
            return
        try:
            resp = self._rerun(conn, h.request)
        except Exception as e:  # answer the client rather than leave it waiting for its timeout
            log.exception("re-running held pull %s/%d failed", h.topic, h.queue_id)
            resp = _error_response(h.request, e)
        if resp is None:
            return
        try:
            conn.send(resp)
            self.answered_count += 1
        except Exception:
            log.debug("could not answer held pull on %s", getattr(conn, "remote_addr", "?"), exc_info=True)

    # ----- periodic check -----
    def check(self, now_ms: int | None = None) -> int:
        """Answer requests whose queue grew or whose deadline passed; returns how many were answered."""
        now = self._clock() if now_ms is None else now_ms
        answered = 0
        for key in list(self._held):
            lst = self._held.get(key)
            if not lst:
                continue
            max_offset = self._max_offset(key[0], key[1])
            keep: list[HeldPull] = []
            due: list[HeldPull] = []
            for h in lst:
                if getattr(h.conn, "closed", False):
                    self._release(h.conn)
                    continue
                if max_offset > h.queue_offset or now >= h.deadline_ms:
                    due.append(h)
                else:
                    keep.append(h)
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
            for h in due:
                if now >= h.deadline_ms and max_offset <= h.queue_offset:
                    self.timeout_count += 1
                self._answer(h)
                answered += 1
        return answered

    def next_deadline_ms(self) -> int | None:
        best: int | None = None
        for lst in self._held.values():
            for h in lst:
                if best is None or h.deadline_ms < best:
                    best = h.deadline_ms
        return best

    def answer_all(self) -> int:
        """At stop: answer every held request now (found messages or PULL_NOT_FOUND)."""
        held = [h for lst in self._held.values() for h in lst] + self._ready
        self._held.clear()
        self._ready = []
        for h in held:
            self._answer(h)
        return len(held)

    async def run_check_loop(self, interval_ms: int, granularity_ms: int = 200) -> None:
        """Checker: every interval_ms, or sooner when a deadline falls before the next tick (deadlines are
        honoured to within granularity_ms, so a table of thousands is not rescanned per deadline)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                now = self._clock()
                wait = interval_ms
                nd = self.next_deadline_ms()
                if nd is not None:
                    wait = max(granularity_ms, min(wait, nd - now))
                self._next_check_ms = now + wait
                # a timed wait that creates no task: a timer resolves the future unless hold() does first
                self._wake_fut = fut = loop.create_future()
                handle = loop.call_later(wait / 1000, _resolve, fut, True)
                try:
                    timed_out = await fut
                finally:
                    handle.cancel()
                    self._wake_fut = None
                if timed_out:
                    self.check()
                # else: a request with an earlier deadline arrived; recompute the wait
        finally:
            self._next_check_ms = None


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _error_response(request: Any, exc: Exception) -> Any:
    try:
        return request.response(1, f"{type(exc).__name__}: {exc}")
    except Exception:
        return None
