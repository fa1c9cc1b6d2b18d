"""BrokerStats seconds: the default clock (read as monotonic_ns) and an injected clock_ms give the same buckets."""

from __future__ import annotations

from orbitmq.base.clock import monotonic_ms
from orbitmq.broker.stats import BrokerStats


def test_default_clock_second_is_monotonic_ms_second():
    stats = BrokerStats()
    for _ in range(1000):
        before = monotonic_ms() // 1000
        idx = stats._roll()
        after = monotonic_ms() // 1000
        assert before <= stats._sec <= after
        assert idx == stats._sec % 600


def test_injected_clock_drives_the_buckets():
    now = [10_000_500]
    stats = BrokerStats(clock_ms=lambda: now[0])
    stats.on_put(5, 500)
    now[0] += 400  # same second
    stats.on_put(3, 300)
    now[0] += 1000  # next second: the previous one is complete
    assert stats.put_tps(10) == 0.8
    assert stats.put_msgs_total == 8 and stats.put_bytes_total == 800
    now[0] += 700 * 1000  # past the window: every bucket rolled out
    assert stats.put_tps(600) == 0.0
