"""Fixtures of the CLI unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.cli.fake_remoting import FakeServer


@pytest.fixture
def servers() -> Iterator[list[FakeServer]]:
    """Three scripted servers on 127.0.0.1, closed after the test."""
    made = [FakeServer() for _ in range(3)]
    yield made
    for s in made:
        s.close()
