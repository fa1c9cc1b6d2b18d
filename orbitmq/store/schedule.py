"""Delay levels (messageDelayLevel) as the store and the broker's schedule service see them: level parsing and
the delivery time written as the ConsumeQueue tags code of SCHEDULE_TOPIC_XXXX entries (store time + level delay,
as RocketMQ 4.x does at dispatch, so recovery re-dispatch computes the same value)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from orbitmq.base.errors import ConfigError

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """"1s 5s 10s 1m ..." -> delay of each level in ms (level i is index i-1). Raises ConfigError."""
    out: list[int] = []
    for token in spec.split():
        unit = _UNIT_MS.get(token[-1:].lower())
        try:
            value = int(token[:-1]) if unit is not None else -1
        except ValueError:
            value = -1
        if unit is None or value < 0:
            raise ConfigError(f"messageDelayLevel: bad level {token!r} (want <n><s|m|h|d>, e.g. 5s)")
        out.append(value * unit)
    if not out:
        raise ConfigError("messageDelayLevel: no levels")
    return tuple(out)


@lru_cache(maxsize=16)
def delay_table(spec: str) -> tuple[int, ...]:
    """parse_delay_levels, cached (the store asks once per schedule message)."""
    return parse_delay_levels(spec)


def level_of(props: Mapping[str, str], levels: int) -> int:
    """The DELAY property clamped to 1..levels; 0 when absent or not a positive integer."""
    try:
        level = int(props.get("DELAY") or 0)
    except ValueError:
        return 0
    if level <= 0:
        return 0
    return min(level, levels)


def delivery_time(props: Mapping[str, str], store_ts: int, spec: str) -> int:
    """Due time of a schedule-topic record: its store timestamp + the delay of its DELAY level."""
    table = delay_table(spec)
    level = level_of(props, len(table))
    return store_ts + table[level - 1] if level else store_ts


def corrected_due(tags_code: int, level_delay_ms: int, now: int) -> int:
    """The due time the schedule service acts on: the tags code, or now when it lies more than one level delay
    ahead (a shortened messageDelayLevel or a clock step back), as RocketMQ's correctDeliverTimestamp."""
    return now if tags_code > now + level_delay_ms else tags_code
