"""Bounded zlib inflation: peers send compressed bodies (REGISTER_BROKER, compressed messages), and a few MB of
zeros inflate to GBs. `inflate` refuses anything that would exceed its ceiling before allocating it."""

from __future__ import annotations

import zlib


class InflateError(ValueError):
    """The data is not zlib, is truncated, or inflates beyond the ceiling."""


def inflate(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    """The zlib stream `data` inflated, at most `max_size` bytes (InflateError beyond, or when malformed)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, max_size + 1)
    except zlib.error as e:
        raise InflateError(f"bad zlib data: {e}") from None
    if len(out) > max_size or (d.unconsumed_tail and not d.eof):
        raise InflateError(f"inflates to more than {max_size} bytes")
    if not d.eof:
        raise InflateError("truncated zlib data")
    return out
