"""Broker-side message filtering beyond tag hash codes: SQL92 property expressions (sql92.py) compiled once per
(group, topic, expression) and turned into record-level predicates for the store's second filter stage.

The compile cache is an LRU bounded by an estimate of its bytes, and it remembers refusals too (a client re-sending
a bad expression with every pull costs a dict look-up, not a parse). Compilation still runs on the event loop:
with the expression length bounded (SqlLimits, 4 KiB) the worst case measured by bench/sql92_compile_bench.py is
4-20 ms on a busy 2-core machine, once per distinct (group, topic, expression) -- a known gap: a client sending
many distinct maximal expressions can stall the loop that long per expression.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
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

RecordFilter = Callable[[memoryview | bytes], bool]
EXPRESSION_TYPE_SQL92 = "SQL92"
DEFAULT_CACHE_BYTES = 16 * 1024 * 1024
# estimated bytes held per cached entry: a fixed part (dict slot, key tuple, closures of a small expression) plus
# a multiple of the expression's length (tokens -> closures; calibrated with tracemalloc, see the bench script)
ENTRY_OVERHEAD = 1024
BYTES_PER_EXPRESSION_CHAR = 64

__all__ = ["DEFAULT_CACHE_BYTES", "EXPRESSION_TYPE_SQL92", "FilterCache", "entry_cost", "RecordFilter", "SqlLimitError",
           "SqlLimits", "SqlParseError", "compile_sql92", "record_filter_of", "sql_limits"]


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
                 limits: SqlLimits | Callable[[], SqlLimits] = DEFAULT_LIMITS) -> None:
        self._cache: OrderedDict[tuple[str, str, str], tuple[RecordFilter | _Refusal, int]] = OrderedDict()
        self._max_bytes = max_bytes
        self._limits = limits
        self.bytes = 0
        self.compiles = 0
        self.evictions = 0

    def _cap(self) -> int:
        return self._max_bytes() if callable(self._max_bytes) else self._max_bytes

    def get(self, group: str, topic: str, expression: str) -> RecordFilter:
        key = (group, topic, expression)
        hit = self._cache.get(key)
        if hit is None:
            limits = self._limits() if callable(self._limits) else self._limits
            value: RecordFilter | _Refusal
            try:
                value = record_filter_of(compile_sql92(expression, limits))
            except SqlParseError as e:
                value = _Refusal(type(e), str(e))
            self.compiles += 1
            cost = entry_cost(group, topic, expression)
            cap = self._cap()
            if cost <= cap:
                self._cache[key] = (value, cost)
                self.bytes += cost
                while self.bytes > cap:
                    _, (_, old) = self._cache.popitem(last=False)
                    self.bytes -= old
                    self.evictions += 1
        else:
            value = hit[0]
            self._cache.move_to_end(key)
        if isinstance(value, _Refusal):
            raise value.kind(value.reason)  # a fresh exception: re-raising one object would grow its traceback
        return value

    def __len__(self) -> int:
        return len(self._cache)
