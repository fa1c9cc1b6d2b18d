"""Issue 12.2: SQL92 limits (length, nesting, IN list), the byte-bounded compile cache, and pull bounds."""

from __future__ import annotations

import pytest

from orbitmq.broker.filter import FilterCache, SqlLimitError, SqlLimits, entry_cost
from orbitmq.broker.filter.sql92 import SqlParseError, compile_sql92, evaluate


def test_length_limit_counts_utf8_bytes() -> None:
    limits = SqlLimits(max_length=20)
    assert compile_sql92("a = 'xxxxxxxxxx'", limits)({"a": "xxxxxxxxxx"})
    with pytest.raises(SqlLimitError, match="21 bytes, over the limit of 20"):
        compile_sql92("a = 'xxxxxxxxxxxxxxx'", limits)
    with pytest.raises(SqlLimitError, match="over the limit of 20"):
        compile_sql92("a = '" + "\u00e9" * 8 + "'", limits)  # 14 characters, 22 bytes
    big = " AND ".join(["a > 1"] * 1000)
    with pytest.raises(SqlLimitError):
        compile_sql92(big)  # default 4 KiB
    assert compile_sql92(big, SqlLimits(max_length=0))({"a": "2"})  # 0 = off


def test_depth_limit_parentheses_and_not() -> None:
    limits = SqlLimits(max_depth=3)
    assert compile_sql92("((( a = 1 )))", limits)({"a": "1"})
    with pytest.raises(SqlLimitError, match="deeper than 3"):
        compile_sql92("(((( a = 1 ))))", limits)
    assert compile_sql92("NOT NOT NOT a = 1", limits)({"a": "2"})
    with pytest.raises(SqlLimitError, match="deeper than 3"):
        compile_sql92("NOT (NOT (NOT a = 1))", limits)
    # siblings do not add up: depth is the nesting, not the count of parentheses
    assert compile_sql92(" AND ".join(["((a = 1))"] * 50), limits)({"a": "1"})
    with pytest.raises(SqlLimitError):
        compile_sql92("(" * 33 + "a = 1" + ")" * 33)  # default 32


def test_in_list_limit() -> None:
    def in_list(n: int) -> str:
        return "a IN (" + ", ".join(f"'{i}'" for i in range(n)) + ")"

    assert compile_sql92(in_list(256))({"a": "255"})
    with pytest.raises(SqlLimitError, match="IN list longer than 256"):
        compile_sql92(in_list(257))
    with pytest.raises(SqlLimitError, match="longer than 2"):
        compile_sql92(in_list(3), SqlLimits(max_in_list=2))


def test_long_chains_are_flat_and_keep_semantics() -> None:
    n = 5000  # far deeper than the interpreter's recursion limit if chains were nested closures
    chain = " AND ".join(["a > 1"] * n)
    assert compile_sql92(chain, SqlLimits(max_length=0))({"a": "2"})
    assert not compile_sql92(chain + " AND b = 1", SqlLimits(max_length=0))({"a": "2"})
    ors = " OR ".join(["a = 1"] * n + ["a = 2"])
    assert compile_sql92(ors, SqlLimits(max_length=0))({"a": "2"})
    # RocketMQ's three-valued rules over chains: unknown on the left of AND is false; OR propagates unknown
    assert not evaluate("x = 1 AND a = 1 AND a = 1", {"a": "1"})
    assert evaluate("x = 1 OR x = 2 OR a = 1", {"a": "1"})
    assert not evaluate("NOT (a = 2 OR x = 1)", {"a": "1"})  # false OR unknown -> unknown; NOT unknown -> unknown
    assert evaluate("NOT (a = 2 OR a = 3)", {"a": "1"})


def test_cache_is_lru_by_bytes_and_remembers_refusals() -> None:
    c1, c2 = entry_cost("G", "T1", "a = 1"), entry_cost("G", "T2", "a = 1")
    cache = FilterCache(max_bytes=c1 + c2 + 1)
    f1 = cache.get("G", "T1", "a = 1")
    cache.get("G", "T2", "a = 1")
    assert cache.get("G", "T1", "a = 1") is f1  # T1 now most recently used
    cache.get("G", "T3", "a = 1")  # evicts T2, the least recently used
    assert len(cache) == 2 and cache.bytes <= c1 + c2 + 1 and cache.evictions == 1
    compiles = cache.compiles
    assert cache.get("G", "T1", "a = 1") is f1 and cache.compiles == compiles
    cache.get("G", "T2", "a = 1")
    assert cache.compiles == compiles + 1
    # an entry bigger than the whole budget is compiled but never cached
    huge = " AND ".join(["a > 1"] * 100)
    cache.get("G", "T", huge)
    assert ("G", "T", huge) not in cache._cache and cache.bytes <= c1 + c2 + 1
    # refusals: raised every time, compiled once, a fresh exception each time
    refusing = FilterCache()
    errs = []
    for _ in range(3):
        with pytest.raises(SqlParseError, match="found end of expression") as ei:
            refusing.get("G", "T", "a = ")
        errs.append(ei.value)
    assert refusing.compiles == 1 and errs[0] is not errs[1]
    limited = FilterCache(limits=lambda: SqlLimits(max_in_list=1))
    with pytest.raises(SqlLimitError):
        limited.get("G", "T", "a IN ('1', '2')")


def test_cache_bytes_stay_bounded_under_many_distinct_expressions() -> None:
    budget = 256 * 1024
    cache = FilterCache(max_bytes=budget)
    for i in range(3000):
        cache.get(f"G{i % 7}", "T", f"a = {i} OR b IN ('{i}', 'x')")
        assert cache.bytes <= budget
    assert cache.evictions > 0 and len(cache) < 3000
