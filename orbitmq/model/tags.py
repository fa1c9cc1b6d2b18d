"""Java String.hashCode for tags and index keys; tag expressions ("A || B", "*")."""

from __future__ import annotations

import struct
from functools import lru_cache
from operator import mul

from orbitmq.base.native import speedups

_POW_LEN = 512
_WEIGHTS: dict[int, tuple[int, ...]] = {}  # n -> (31**(n-1), ..., 31, 1) mod 2**32, built on first use


def _weights(n: int) -> tuple[int, ...]:
    w = _WEIGHTS[n] = tuple(pow(31, n - 1 - i, 1 << 32) for i in range(n))
    return w


def java_hash_py(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, signed 32-bit (pure-Python twin of the native one)."""
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")
    else:
        data = s.encode("utf-16-be")
        units = struct.unpack(f">{len(data) // 2}H", data)
    n = len(units)
    if n <= _POW_LEN:
        # hashCode = sum(unit[i] * 31**(n-1-i)) mod 2**32: a C-level multiply-accumulate, not a Python loop
        h = sum(map(mul, units, _WEIGHTS.get(n) or _weights(n))) & 0xFFFFFFFF
    else:
        h = 0
        for u in units:
            h = (31 * h + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


_native = speedups()
java_hash = java_hash_py if _native is None else _native.java_hash


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
