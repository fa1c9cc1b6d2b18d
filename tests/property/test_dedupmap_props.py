"""Hypothesis: the native de-dup map (`_speedups.DedupMap`, orbitmq/base/_dedupmap.c) answers every operation as its
pure-Python twin `PyDedupMap` does: puts (new, re-put, keep_existing), deletes, evictions by time and by size,
clear, and bursts that make the native arrays grow, compact and shrink; compared after each step: the entries in
order, the length, the positions (next and evicted), the journal rows of a range, lookups and eviction's answer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.broker.services.dedup import PyDedupMap

native = pytest.importorskip("orbitmq.base._speedups")

KEYS = ["k0", "k1", "k2", "U\x1fTopicA", "Ü\x1fTópico", "\udcff\x1fT", "", "x" * 300]

_op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.integers(-5, 60), st.text(max_size=6), st.booleans()),
    st.tuples(st.just("del"), st.sampled_from(KEYS)),
    st.tuples(st.just("evict"), st.integers(-10, 70), st.integers(0, 5000)),
    st.tuples(st.just("bulk"), st.integers(1, 40_000), st.integers(0, 60)),
    st.tuples(st.just("rows"), st.integers(0, 50_000), st.integers(0, 50_000)),
    st.tuples(st.just("clear")),
)


def _apply(m: Any, op: tuple[Any, ...], step: int) -> Any:
    kind = op[0]
    if kind == "put":
        _, key, ts, text, keep = op
        return m.put(key, f"{ts}\x1f{text}", keep_existing=keep)
    if kind == "del":
        try:
            del m[op[1]]
        except KeyError:
            return "missing"
        return None
    if kind == "evict":
        return m.evict(op[1], op[2])
    if kind == "bulk":  # a burst of new keys, store times rising from op[2]
        for i in range(op[1]):
            m.put(f"B{step}-{i:08d}\x1fTopicA", f"{op[2] + i // 1000}\x1f0\x1f{i}\x1fID\x1fPG")
        return None
    if kind == "rows":
        return m.rows(op[1], op[1] + op[2] % 3000)
    return m.clear()


def _view(m: Any) -> tuple[Any, ...]:
    keys = list(m)
    return (len(m), m.position, m.head, m.items(), keys == m.keys(), m.rows(0, m.position),
            [(k in m, m.get(k), m.get(k, "?")) for k in KEYS])


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(_op, max_size=25))
def test_native_map_answers_as_the_python_map(ops: list[tuple[Any, ...]]) -> None:
    nat, py = native.DedupMap(seed=12345), PyDedupMap()
    for step, op in enumerate(ops):
        assert _apply(nat, op, step) == _apply(py, op, step), op
        assert _view(nat) == _view(py), op


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), n=st.integers(0, 3000))
def test_any_seed_finds_every_key(seed: int, n: int) -> None:
    """The index works whatever the seed (probe runs, backward-shift deletion): every live key found, none other."""
    m = native.DedupMap(seed=seed)
    for i in range(n):
        m.put(f"K{i}", f"{i}\x1fv")
    for i in range(0, n, 3):
        del m[f"K{i}"]
    assert all((f"K{i}" in m) == (i % 3 != 0) for i in range(n))
    assert m.evict(n // 2, 10**9) in (None, *range(n))
    assert sorted(m) == sorted(f"K{i}" for i in range(n // 2, n) if i % 3 != 0)


def test_refusals() -> None:
    m = native.DedupMap()
    with pytest.raises(ValueError):
        m.put("k", "no store time")
    with pytest.raises(TypeError):
        m.put(b"k", "1\x1fv")
    with pytest.raises(TypeError):
        m["k"] = "1\x1fv"
    with pytest.raises(KeyError):
        m["k"]  # noqa: B018
    assert len(m) == 0 and m.position == 0
    with pytest.raises(ValueError):
        PyDedupMap().put("k", "no store time")
