"""base.inflate: zlib inflation with a ceiling (decompression bombs refused before they are allocated)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.base.inflate import InflateError, inflate


@given(st.binary(max_size=4096))
def test_round_trip_within_the_ceiling(data: bytes) -> None:
    assert inflate(zlib.compress(data), len(data)) == data


def test_one_byte_over_the_ceiling_is_refused() -> None:
    with pytest.raises(InflateError, match="more than 99 bytes"):
        inflate(zlib.compress(b"x" * 100), 99)


def test_bomb_refused_without_allocating_it() -> None:
    bomb = zlib.compress(b"\0" * (64 << 20), 9)  # 64 MiB of zeros in ~64 KB
    with pytest.raises(InflateError, match="more than"):
        inflate(bomb, 1 << 20)


@pytest.mark.parametrize("data", [b"", b"not zlib", zlib.compress(b"hello world" * 10)[:-5]])
def test_garbage_and_truncated_streams(data: bytes) -> None:
    with pytest.raises(InflateError):
        inflate(data, 1 << 20)
