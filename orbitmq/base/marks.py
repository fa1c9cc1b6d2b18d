"""Coverage marks: production code calls hit("name"); tests read counts to assert a path was reached."""

from __future__ import annotations

from collections import Counter

_counts: Counter[str] = Counter()


def hit(name: str) -> None:
    _counts[name] += 1


def count(name: str) -> int:
    return _counts[name]


def reset() -> None:
    _counts.clear()
