"""Worst-case SQL92 compile cost under the default limits (issue 12.2), and memory per cached entry.

The broker compiles once per distinct (group, topic, expression), on its compile thread (the pull waits, the event
loop does not); refusals are cached too. The expression length is bounded (filterSqlMaxLength, 4 KiB); this script
prints what the slowest expressions that can still be compiled cost (time the compile thread holds the GIL), and how
close the cache's byte estimate is to what an entry really holds.

    .venv/bin/python bench/sql92_compile_bench.py
"""

from __future__ import annotations

import time
import tracemalloc

from orbitmq.broker.filter import BYTES_PER_EXPRESSION_CHAR, ENTRY_OVERHEAD, FilterCache, SqlParseError
from orbitmq.broker.filter.sql92 import DEFAULT_LIMITS, compile_sql92


def _fill(unit: str, joiner: str, limit: int) -> str:
    parts: list[str] = []
    while len(joiner.join([*parts, unit])) <= limit:
        parts.append(unit)
    return joiner.join(parts)


def shapes(limit: int) -> dict[str, str]:
    in_list = "a IN (" + ", ".join(f"'v{i}'" for i in range(DEFAULT_LIMITS.max_in_list)) + ")"
    return {
        "AND chain of comparisons": _fill("a > 1", " AND ", limit),
        "OR chain of BETWEENs": _fill("b BETWEEN 1 AND 2", " OR ", limit),
        "IN list at the item cap": in_list[:limit] if len(in_list) <= limit else in_list,
        "nesting at the depth cap": "(" * (DEFAULT_LIMITS.max_depth - 1) + _fill("c = 'x'", " AND ", limit - 80)
                                    + ")" * (DEFAULT_LIMITS.max_depth - 1),
    }


def main() -> None:
    limit = DEFAULT_LIMITS.max_length
    print(f"limits: {DEFAULT_LIMITS}")
    for name, expr in shapes(limit).items():
        try:
            compile_sql92(expr)
        except SqlParseError as e:
            print(f"{name}: refused ({e})")
            continue
        runs = 50
        t0 = time.perf_counter()
        for _ in range(runs):
            compile_sql92(expr)
        ms = (time.perf_counter() - t0) / runs * 1000
        tracemalloc.start()
        cache = FilterCache()
        cache.get("G", "T", expr)
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        est = ENTRY_OVERHEAD + 2 + BYTES_PER_EXPRESSION_CHAR * len(expr)
        print(f"{name}: {len(expr)} bytes, compile {ms:.2f} ms, cached entry holds {held} bytes "
              f"(estimate {est})")


if __name__ == "__main__":
    main()
