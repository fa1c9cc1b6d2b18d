"""Java String.hashCode for tags and index keys; tag expressions ("A || B", "*")."""

from __future__ import annotations

from functools import lru_cache


def java_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, signed 32-bit."""
    h = 0
    if s.isascii():
        for ch in s.encode("ascii"):
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def tag_code(tags: str | None) -> int:
    """ConsumeQueue tags code: hash of the TAGS property, 0 when there is none."""
    if not tags:
        return 0
    return java_hash(tags)


def tags_of_expression(expression: str | None) -> frozenset[str] | None:
    """Tags named by a subscription expression; None means "*" (everything)."""
    if expression is None:
        return None
    expr = expression.strip()
    if expr == "" or expr == "*":
        return None
    tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
    return tags or None


def index_key_hash(key: str) -> int:
    """IndexFile key hash: abs(String.hashCode) with MIN_VALUE mapped to 0."""
    h = java_hash(key)
    if h < 0:
        h = -h
        if h > 0x7FFFFFFF:
            return 0
    return h
