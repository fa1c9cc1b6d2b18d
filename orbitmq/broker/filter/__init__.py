"""Broker-side message filtering beyond tag hash codes: SQL92 property expressions (sql92.py) compiled once per
(group, topic, expression) and turned into record-level predicates for the store's second filter stage.
"""

from __future__ import annotations

from collections.abc import Callable

from orbitmq.broker.filter.sql92 import Predicate, SqlParseError, compile_sql92
from orbitmq.model.properties import decode_properties
from orbitmq.model.record import read_properties_text

RecordFilter = Callable[[memoryview | bytes], bool]
EXPRESSION_TYPE_SQL92 = "SQL92"
MAX_CACHED = 4096

__all__ = ["EXPRESSION_TYPE_SQL92", "FilterCache", "RecordFilter", "SqlParseError", "compile_sql92",
           "record_filter_of"]


def record_filter_of(predicate: Predicate) -> RecordFilter:
    """A predicate over a stored record: decodes only the properties of the record, then evaluates."""

    def keep(record: memoryview | bytes) -> bool:
        try:
            text = read_properties_text(record, 0)
        except ValueError:
            return False
        return predicate(decode_properties(text))

    return keep


class FilterCache:
    """(group, topic, expression) -> compiled record filter; a parse failure raises SqlParseError each time."""

    def __init__(self, max_entries: int = MAX_CACHED) -> None:
        self._cache: dict[tuple[str, str, str], RecordFilter] = {}
        self._max = max_entries

    def get(self, group: str, topic: str, expression: str) -> RecordFilter:
        key = (group, topic, expression)
        f = self._cache.get(key)
        if f is None:
            f = record_filter_of(compile_sql92(expression))
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[key] = f
        return f

    def __len__(self) -> int:
        return len(self._cache)
