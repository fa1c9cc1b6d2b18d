"""Offset model of the Spark connector (sans-IO): the JSON offset shape {"broker": {"queueId": offset}}, option
parsing (earliest / latest / JSON), range splitting into partitions and maxMessagesPerTrigger admission control.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from orbitmq.model import MessageQueue

EARLIEST = -2  # in a JSON offsets option, like Kafka's convention
LATEST = -1

# {(brokerName, queueId): offset}; Spark sees it as {"brokerName": {"queueId": offset}}
OffsetMap = dict[tuple[str, int], int]
# The end offset of a stream's first batch also carries the start it was planned from, under this key (not a valid
# broker name): Spark's offset log is then the checkpoint's record of the resolved startingOffsets, and a restart
# before that batch committed re-runs it from there instead of re-resolving `latest` (source.py).
START_KEY = "@start"


def to_json_obj(offsets: OffsetMap) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (broker, qid), off in sorted(offsets.items()):
        out.setdefault(broker, {})[str(qid)] = int(off)
    return out


def from_json_obj(obj: dict[str, Any] | None) -> OffsetMap:
    out: OffsetMap = {}
    for broker, queues in (obj or {}).items():
        if broker == START_KEY:
            continue
        if not isinstance(queues, dict):
            raise ValueError(f"offsets for broker {broker!r} must be an object of queueId -> offset")
        for qid, off in queues.items():
            out[(broker, int(qid))] = int(off)
    return out


def with_start(end: OffsetMap, start: OffsetMap) -> dict[str, Any]:
    """JSON of a first batch's end offsets carrying the start offsets it was planned from."""
    obj: dict[str, Any] = dict(to_json_obj(end))
    obj[START_KEY] = to_json_obj(start)
    return obj


def carried_start(obj: dict[str, Any] | None) -> OffsetMap | None:
    """The start offsets a first batch's end offsets carry (with_start), else None."""
    start = (obj or {}).get(START_KEY)
    return from_json_obj(start) if isinstance(start, dict) else None


def parse_offsets_option(value: str | None, default: str) -> str | OffsetMap:
    """'earliest' / 'latest' or a JSON object per broker/queue (offset -2 = earliest, -1 = latest)."""
    text = (value or default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"offsets option must be earliest, latest or JSON per broker/queue, got {text!r}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"offsets JSON must be an object of brokerName -> {{queueId: offset}}, got {text!r}")
    return from_json_obj(obj)


def resolve(spec: str | OffsetMap, key: tuple[str, int], bounds: tuple[int, int], missing: str) -> int:
    """One queue's concrete offset from a parsed option, clamped into [min, max]."""
    lo, hi = bounds
    if isinstance(spec, str):
        choice = spec
    else:
        off = spec.get(key)
        if off is None:
            choice = missing
        elif off == EARLIEST:
            choice = "earliest"
        elif off == LATEST:
            choice = "latest"
        else:
            return max(lo, min(off, hi))
    return lo if choice == "earliest" else hi


def mq_key(mq: MessageQueue) -> tuple[str, int]:
    return (mq.broker_name, mq.queue_id)


@dataclass(frozen=True, slots=True)
class Range:
    """[start, end) of one queue."""

    broker: str
    queue_id: int
    start: int
    end: int


def split_ranges(starts: OffsetMap, ends: OffsetMap, max_per_partition: int) -> list[Range]:
    """Ranges of every queue with data, each cut into pieces of at most max_per_partition offsets."""
    out: list[Range] = []
    step = max(1, max_per_partition)
    for key in sorted(ends):
        s, e = starts.get(key, 0), ends[key]
        while s < e:
            n = min(e, s + step)
            out.append(Range(key[0], key[1], s, n))
            s = n
    return out


def cap_offsets(start: OffsetMap, latest: OffsetMap, limit: int | None) -> OffsetMap:
    """End offsets for the next micro-batch: `latest`, but at most `limit` new messages in total, shared fairly
    between queues with backlog (water-filling: small backlogs are taken whole, the rest split evenly).
    Never moves a queue backwards from `start`."""
    end: OffsetMap = {k: max(v, start.get(k, v)) for k, v in latest.items()}
    for k, v in start.items():
        end.setdefault(k, v)
    if limit is None:
        return end
    lags = sorted(((end[k] - start.get(k, 0), k) for k in latest if end[k] > start.get(k, 0)), key=lambda t: t[0])
    total = sum(lag for lag, _ in lags)
    if total <= limit:
        return end
    budget = max(1, limit)
    left = len(lags)
    for lag, k in lags:
        share = budget // left if left else 0
        take = min(lag, share)
        if take == 0 and budget > 0:  # fewer messages allowed than queues: one each until the budget is spent
            take = min(lag, 1)
        end[k] = start.get(k, 0) + take
        budget -= take
        left -= 1
    return end
