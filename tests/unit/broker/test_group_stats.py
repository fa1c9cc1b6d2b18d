"""GroupGetStats: per group/topic pull rate over the last minute (GET_CONSUME_STATS consumeTps)."""

from __future__ import annotations

from orbitmq.broker import group_stats
from orbitmq.broker.group_stats import WINDOW_S, GroupGetStats


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def test_rate_counts_complete_seconds_of_the_last_minute() -> None:
    clock = _Clock()
    st = GroupGetStats(clock)
    for _ in range(30):  # 30 s of 120 msgs/s for G on T
        st.on_get("G", "T", 100)
        st.on_get("G", "T", 20)
        clock.ms += 1000
    st.on_get("G", "T", 999)  # the current second is not complete: not counted yet
    assert st.tps("G", "T") == 30 * 120 / WINDOW_S
    assert st.tps("G", "Other") == 0.0 and st.tps("H", "T") == 0.0
    clock.ms += 1000
    assert st.tps("G", "T") == (30 * 120 + 999) / WINDOW_S


def test_old_seconds_leave_the_window_and_idle_pairs_are_dropped() -> None:
    clock = _Clock()
    st = GroupGetStats(clock)
    st.on_get("G", "T", 60)
    clock.ms += 1000
    assert st.tps("G", "T") == 1.0
    clock.ms += (WINDOW_S - 1) * 1000  # the counted second is now exactly WINDOW_S seconds old: gone
    assert st.tps("G", "T") == 0.0
    clock.ms += 2000
    st.on_get("G", "T2", 5)  # a long gap clears every bucket, not only the ones after the last count
    assert st.tps("G", "T") == 0.0
    assert len(st) == 1  # ("G", "T") was idle for more than a window
    st.on_get("G", "T", 0)  # empty pulls are not counted and create nothing
    assert len(st) == 1


def test_table_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(group_stats, "MAX_PAIRS", 3)
    clock = _Clock()
    st = GroupGetStats(clock)
    for g in ("a", "b", "c", "d"):
        st.on_get(g, "T", 1)
    assert len(st) == 3 and st.tps("d", "T") == 0.0
    clock.ms += (WINDOW_S + 2) * 1000  # all idle: the next new pair evicts them
    st.on_get("d", "T", 7)
    clock.ms += 1000
    assert len(st) == 1 and st.tps("d", "T") == 7 / WINDOW_S
