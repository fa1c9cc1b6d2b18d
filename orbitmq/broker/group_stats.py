"""Per consumer group and topic: messages pulled per second over the last minute (Java's GROUP_GET_NUMS stat),
read by GET_CONSUME_STATS as consumeTps.

Hot path cost: one clock read, one dict lookup and an add per successful pull. Buckets roll lazily; a pair that
saw no pull for a whole window is dropped on the next read, so the table tracks only active groups.

Also plain totals read by the Prometheus collector at scrape time (broker/metrics.py): messages and bytes pulled
per (group, topic) since start (`out`, never expired, at most MAX_PAIRS pairs), and the next offset of the last
pull per (group, topic, queue) (`pulled`, at most MAX_QUEUES): in-flight = pulled - committed.
"""

from __future__ import annotations

from collections.abc import Callable

from orbitmq.base.clock import monotonic_ms

WINDOW_S = 60
MAX_PAIRS = 65_536  # bound: beyond it new pairs are not counted until idle ones expire
MAX_QUEUES = 262_144  # bound of the pulled-offset table: further queues are not tracked


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
    __slots__ = ("_series", "_clock", "out", "pulled", "dropped")

    def __init__(self, clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self._series: dict[tuple[str, str], _Series] = {}
        self._clock = clock_ms
        self.out: dict[tuple[str, str], list[int]] = {}  # (group, topic) -> [messages, bytes] pulled since start
        self.pulled: dict[tuple[str, str, int], int] = {}  # (group, topic, queue) -> next offset of the last pull
        self.dropped = 0  # pulls not counted in `out` / `pulled` because a table was full

    def __len__(self) -> int:
        return len(self._series)

    def on_pulled(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """A pull of (group, topic, queue) answered up to `next_offset` (for in-flight messages)."""
        key = (group, topic, queue_id)
        pulled = self.pulled
        if key in pulled or len(pulled) < MAX_QUEUES:
            pulled[key] = next_offset
        else:
            self.dropped += 1

    def on_get(self, group: str, topic: str, msg_count: int, size_bytes: int = 0) -> None:
        if msg_count <= 0:
            return
        tot = self.out.get((group, topic))
        if tot is None:
            if len(self.out) >= MAX_PAIRS:
                self.dropped += 1
            else:
                tot = self.out[(group, topic)] = [0, 0]
        if tot is not None:
            tot[0] += msg_count
            tot[1] += size_bytes
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
