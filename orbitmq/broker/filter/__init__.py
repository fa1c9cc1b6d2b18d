"""Broker-side message filtering beyond tag hash codes: SQL92 property expressions (sql92.py) compiled once per
(group, topic, expression) and turned into record-level predicates for the store's second filter stage.

The compile cache is an LRU bounded by an estimate of its bytes, and it remembers refusals too (a client re-sending
a bad expression with every pull costs a dict look-up, not a parse). A cached expression is answered inline; a new
one is compiled off the event loop (`FilterCache.lookup`): one compile thread per process, at most
`max_pending` distinct expressions waiting for it (more: FilterBusy, answered SYSTEM_BUSY), and the requests
needing an expression wait for its compile without holding up anything else on the loop. With the expression
length bounded (SqlLimits, 4 KiB) the worst compile measured by bench/sql92_compile_bench.py is 4-20 ms on a busy
2-core machine; on the compile thread it shares the interpreter lock with the loop, which the thread hands back
every switch interval (5 ms), so the loop is slowed, not stopped, while a burst of new expressions compiles.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from orbitmq.broker.filter.sql92 import (
    DEFAULT_LIMITS,
    Predicate,
    SqlLimitError,
    SqlLimits,
    SqlParseError,
    compile_sql92,
)
from orbitmq.model.properties import decode_properties
from orbitmq.model.record import read_properties_text

log = logging.getLogger(__name__)

RecordFilter = Callable[[memoryview | bytes], bool]
Compile = Callable[[str, SqlLimits], Predicate]
DEFAULT_MAX_PENDING = 64  # distinct expressions waiting for the compile thread
EXPRESSION_TYPE_SQL92 = "SQL92"
DEFAULT_CACHE_BYTES = 16 * 1024 * 1024
# estimated bytes held per cached entry: a fixed part (dict slot, key tuple, closures of a small expression) plus
# a multiple of the expression's length (tokens -> closures; calibrated with tracemalloc, see the bench script)
ENTRY_OVERHEAD = 1024
BYTES_PER_EXPRESSION_CHAR = 64

__all__ = ["DEFAULT_CACHE_BYTES", "EXPRESSION_TYPE_SQL92", "FilterBusy", "FilterCache", "PendingCompile", "entry_cost",
           "RecordFilter", "SqlLimitError", "SqlLimits", "SqlParseError", "compile_sql92", "record_filter_of",
           "sql_limits"]

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _compile_pool() -> ThreadPoolExecutor:
    """The process-wide SQL92 compile thread (one: compiles hold the interpreter lock anyway)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orbitmq-sql92-compile")
        return _executor


class FilterBusy(Exception):
    """Too many distinct expressions are waiting to be compiled: the request should be retried later."""


class PendingCompile:
    """An expression being compiled off the event loop. `then(fn)` runs `fn()` on the loop once the result is
    known (cached, or a refusal); a FilterCache.lookup from inside `fn` returns that result."""

    __slots__ = ("key", "_waiters")

    def __init__(self, key: tuple[str, str, str]) -> None:
        self.key = key
        self._waiters: list[Callable[[], None]] = []

    def then(self, fn: Callable[[], None]) -> None:
        self._waiters.append(fn)

    def _run(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fn in waiters:
            try:
                fn()
            except Exception:
                log.exception("a request waiting for a SQL92 compile failed")


def record_filter_of(predicate: Predicate) -> RecordFilter:
    """A predicate over a stored record: decodes only the properties of the record, then evaluates."""

    def keep(record: memoryview | bytes) -> bool:
        try:
            text = read_properties_text(record, 0)
        except ValueError:
            return False
        return predicate(decode_properties(text))

    return keep


def sql_limits(cfg: Any) -> SqlLimits:
    """The SQL92 bounds of a BrokerConfig (read at each compile: they are hot-reloadable)."""
    return SqlLimits(cfg.filter_sql_max_length, cfg.filter_sql_max_depth, cfg.filter_sql_max_in_list)


class _Refusal(NamedTuple):
    kind: type[SqlParseError]
    reason: str


def entry_cost(group: str, topic: str, expression: str) -> int:
    """Estimated bytes one cache entry holds (see ENTRY_OVERHEAD)."""
    return ENTRY_OVERHEAD + len(group) + len(topic) + BYTES_PER_EXPRESSION_CHAR * len(expression)


class FilterCache:
    """(group, topic, expression) -> compiled record filter or the SqlParseError it raised (raised again on every
    get); least recently used entries leave when the estimated bytes pass `max_bytes`. `limits` (or a callable
    returning them, read on each compile so a hot config change applies) bounds what is compiled at all."""

    def __init__(self, max_bytes: int | Callable[[], int] = DEFAULT_CACHE_BYTES,
                 limits: SqlLimits | Callable[[], SqlLimits] = DEFAULT_LIMITS,
                 compile_fn: Compile = compile_sql92, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self._cache: OrderedDict[tuple[str, str, str], tuple[RecordFilter | _Refusal, int]] = OrderedDict()
        self._max_bytes = max_bytes
        self._limits = limits
        self._compile_fn = compile_fn
        self.max_pending = max_pending
        self._pending: dict[tuple[str, str, str], PendingCompile] = {}
        self._just_done: tuple[tuple[str, str, str], RecordFilter | _Refusal] | None = None
        self.bytes = 0
        self.compiles = 0
        self.evictions = 0
        self.busy_refusals = 0

    def _cap(self) -> int:
        return self._max_bytes() if callable(self._max_bytes) else self._max_bytes

    def _current_limits(self) -> SqlLimits:
        return self._limits() if callable(self._limits) else self._limits

    def _compile(self, expression: str, limits: SqlLimits) -> RecordFilter | _Refusal:
        """Runs on the compile thread (or inline for get()): pure, touches no cache state."""
        try:
            return record_filter_of(self._compile_fn(expression, limits))
        except SqlParseError as e:
            return _Refusal(type(e), str(e))

    def _store(self, key: tuple[str, str, str], value: RecordFilter | _Refusal) -> None:
        self.compiles += 1
        cost = entry_cost(*key)
        cap = self._cap()
        if cost <= cap:
            self._cache[key] = (value, cost)
            self.bytes += cost
            while self.bytes > cap:
                _, (_, old) = self._cache.popitem(last=False)
                self.bytes -= old
                self.evictions += 1

    @staticmethod
    def _unwrap(value: RecordFilter | _Refusal) -> RecordFilter:
        if isinstance(value, _Refusal):
            raise value.kind(value.reason)  # a fresh exception: re-raising one object would grow its traceback
        return value

    def _cached(self, key: tuple[str, str, str]) -> RecordFilter | _Refusal | None:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit[0]
        done = self._just_done
        if done is not None and done[0] == key:
            return done[1]  # inside a waiter of this very compile (the entry may not fit the cache)
        return None

    def get(self, group: str, topic: str, expression: str) -> RecordFilter:
        """The record filter of an expression, compiled inline on a miss (callers off the event loop, tools)."""
        key = (group, topic, expression)
        value = self._cached(key)
        if value is None:
            value = self._compile(expression, self._current_limits())
            self._store(key, value)
        return self._unwrap(value)

    def lookup(self, group: str, topic: str, expression: str) -> RecordFilter | PendingCompile:
        """On the event loop: the cached record filter (SqlParseError for a cached refusal), else the
        PendingCompile of the expression, started on the compile thread if it is not already running. Raises
        FilterBusy when `max_pending` other expressions are waiting. Without a running loop: get()."""
        key = (group, topic, expression)
        value = self._cached(key)
        if value is not None:
            return self._unwrap(value)
        pending = self._pending.get(key)
        if pending is not None:
            return pending
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self.get(group, topic, expression)
        if 0 < self.max_pending <= len(self._pending):
            self.busy_refusals += 1
            raise FilterBusy(f"{len(self._pending)} SQL92 expressions are waiting to be compiled, try again later")
        pending = PendingCompile(key)
        self._pending[key] = pending
        fut = loop.run_in_executor(_compile_pool(), self._compile, expression, self._current_limits())
        fut.add_done_callback(lambda f: self._finished(pending, f))
        return pending

    def _finished(self, pending: PendingCompile, fut: asyncio.Future[RecordFilter | _Refusal]) -> None:
        key = pending.key
        self._pending.pop(key, None)
        if fut.cancelled():
            value: RecordFilter | _Refusal = _Refusal(SqlParseError, "compile cancelled (the broker is stopping)")
        elif fut.exception() is not None:
            err = fut.exception()
            log.error("SQL92 compile of %r failed: %r", key[2][:200], err)
            value = _Refusal(SqlParseError, f"compile failed: {err!r}")
        else:
            value = fut.result()
            self._store(key, value)
        self._just_done = (key, value)
        try:
            pending._run()
        finally:
            self._just_done = None

    @property
    def pending(self) -> int:
        """Distinct expressions waiting for (or in) the compile thread."""
        return len(self._pending)

    def __len__(self) -> int:
        return len(self._cache)
