"""Per consumer group and topic: messages pulled per second over the last minute (Java's GROUP_GET_NUMS stat),
read by GET_CONSUME_STATS as consumeTps.

Hot path cost: one clock read, one dict lookup and an add per successful pull. Buckets roll lazily; a pair that
saw no pull for a whole window is dropped on the next read, so the table tracks only active groups.
"""

from __future__ import annotations

from collections.abc import Callable

from orbitmq.base.clock import monotonic_ms

WINDOW_S = 60
MAX_PAIRS = 65_536  # bound: beyond it new pairs are not counted until idle ones expire


class _Series:
    __slots__ = ("buckets", "sec", "last")

    def __init__(self, sec: int) -> None:
        self.buckets = [0] * WINDOW_S
        self.sec = sec  # the second the buckets are rolled up to
        self.last = sec  # the second of the last count (idleness)

    def roll(self, sec: int) -> None:
        """Clear the buckets of the seconds between the last count and `sec`."""
        gap = sec - self.sec
        if gap <= 0:
            return
        b = self.buckets
        if gap >= WINDOW_S:
            b[:] = [0] * WINDOW_S
        else:
            for i in range(1, gap + 1):
                b[(self.sec + i) % WINDOW_S] = 0
        self.sec = sec


class GroupGetStats:
    __slots__ = ("_series", "_clock")

    def __init__(self, clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self._series: dict[tuple[str, str], _Series] = {}
        self._clock = clock_ms

    def __len__(self) -> int:
        return len(self._series)

    def on_get(self, group: str, topic: str, msg_count: int) -> None:
        if msg_count <= 0:
            return
        sec = self._clock() // 1000
        key = (group, topic)
        s = self._series.get(key)
        if s is None:
            if len(self._series) >= MAX_PAIRS:
                self._expire(sec)
                if len(self._series) >= MAX_PAIRS:
                    return
            s = self._series[key] = _Series(sec)
        elif s.sec != sec:
            s.roll(sec)
        s.buckets[sec % WINDOW_S] += msg_count
        s.last = sec

    def tps(self, group: str, topic: str) -> float:
        """Average messages per second pulled by `group` from `topic` over the last WINDOW_S complete seconds."""
        sec = self._clock() // 1000
        self._expire(sec)
        s = self._series.get((group, topic))
        if s is None:
            return 0.0
        s.roll(sec)
        cur = sec % WINDOW_S
        return (sum(s.buckets) - s.buckets[cur]) / WINDOW_S

    def _expire(self, sec: int) -> None:
        idle = [k for k, s in self._series.items() if sec - s.last > WINDOW_S]
        for k in idle:
            del self._series[k]
