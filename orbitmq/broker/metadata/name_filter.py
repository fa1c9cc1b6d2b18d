"""Loading guard for config/*.json tables (topics, subscription groups, consumer offsets): entries whose name
breaks the orbitmq.model.names rules are dropped with a warning, and the rest loads. Never raises for a name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("orbitmq.broker.metadata")

V = TypeVar("V")
MAX_LOGGED = 10  # entries named in the log per table load; the rest are counted


def drop_illegal(table: dict[str, V], check: Callable[[str], str | None], what: str) -> dict[str, V]:
    """`table` without the entries whose key `check` refuses; each drop is logged (the first MAX_LOGGED by name)."""
    kept: dict[str, V] = {}
    dropped = 0
    for name, value in table.items():
        err = check(name)
        if err is None:
            kept[name] = value
            continue
        dropped += 1
        if dropped <= MAX_LOGGED:
            log.warning("%s entry %r skipped: %s", what, name, err)
    if dropped > MAX_LOGGED:
        log.warning("%s: %d entries with illegal names skipped in all", what, dropped)
    return kept
