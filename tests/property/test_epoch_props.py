"""EpochCache.find_consistent_point on generated histories: two logs that share a prefix and then diverge agree
exactly up to the end of their common prefix, computed byte by byte from who wrote each offset."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.replication.epoch import EpochCache

# a log is a list of (epoch, length) runs; byte x of a run is "written by the master of that epoch at offset x",
# so two logs hold the same byte at x exactly when the same epoch wrote it (one master per epoch)
runs = st.lists(st.integers(1, 40), min_size=0, max_size=6)


def build(history: list[tuple[int, int]]) -> tuple[EpochCache, list[int]]:
    """EpochCache (via append, as a node records them) and the per-byte writer epochs."""
    cache = EpochCache()
    writers: list[int] = []
    for epoch, length in history:
        assert cache.append(epoch, len(writers))
        writers.extend([epoch] * length)
    cache.max_offset = len(writers)
    return cache, writers


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=300, deadline=None)
@given(shared=runs, extend_a=st.integers(0, 30), extend_b=st.integers(0, 30), tail_a=runs, tail_b=runs,
       data=st.data())
def test_consistent_point_is_the_end_of_the_common_prefix(shared, extend_a, extend_b, tail_a, tail_b, data):
    shared_hist = [(i + 1, n) for i, n in enumerate(shared)]
    base = len(shared_hist)
    # divergent epochs: disjoint numbers above the shared ones (a takes even, b odd offsets from the base)
    a_hist = [(e, n) for e, n in shared_hist]
    b_hist = [(e, n) for e, n in shared_hist]
    if a_hist:  # the last shared epoch may have written more on either side before the split
        a_hist[-1] = (a_hist[-1][0], a_hist[-1][1] + extend_a)
        b_hist[-1] = (b_hist[-1][0], b_hist[-1][1] + extend_b)
    a_hist += [(base + 2 * i + 2, n) for i, n in enumerate(tail_a)]
    b_hist += [(base + 2 * i + 3, n) for i, n in enumerate(tail_b)]
    a, a_bytes = build(a_hist)
    b, b_bytes = build(b_hist)
    expected = common_prefix(a_bytes, b_bytes)
    point = a.find_consistent_point(b)
    if not a.entries or not b.entries or a.entries[0] != b.entries[0]:
        assert point == -1 or point == expected  # no shared epoch: nothing to anchor on
        if not shared_hist:
            assert point == -1
        return
    assert point == expected
    assert b.find_consistent_point(a) == expected  # symmetric
    # after the slave truncates there, the two histories agree on every entry that starts before the point
    a.truncate_suffix_by_offset(point)
    b_before = [entry for entry in b.entries if entry[1] < point]
    assert a.entries == b_before


@settings(max_examples=200, deadline=None)
@given(history=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 50)), max_size=12))
def test_append_keeps_epochs_and_starts_increasing(history):
    cache = EpochCache()
    epoch = 0
    start = 0
    for bump, length in history:
        epoch += bump
        assert cache.append(epoch, start)
        start += length
    starts = [s for _e, s in cache.entries]
    epochs = [e for e, _s in cache.entries]
    assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))  # strictly increasing both
    if cache.entries:
        assert cache.entries[-1][0] == epoch  # the newest epoch is always findable (#9689)
