"""Fixtures for tests that run real OrbitMQ processes (orbitmq.testing.procs); every process is killed at
teardown, whatever the test did (and at interpreter exit as a last resort)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orbitmq.testing.procs import ServerProcess, Standalone, free_port, start_broker, start_namesrv


@pytest.fixture
def free_tcp_port() -> int:
    return free_port()


@pytest.fixture
def standalone_factory(tmp_path: Path) -> Iterator[Callable[..., Standalone]]:
    """make(**broker_conf_keys) -> a started Standalone (namesrv + broker, broker registered) in tmp_path."""
    made: list[Standalone] = []

    def make(*, name: str | None = None, wait_registered: bool = True, **broker_keys: Any) -> Standalone:
        d = tmp_path / (name or f"standalone{len(made)}")
        s = Standalone(d, **broker_keys)
        made.append(s)
        return s.start(wait_registered=wait_registered)

    try:
        yield make
    finally:
        for s in made:
            s.close()


@pytest.fixture
def standalone(standalone_factory: Callable[..., Standalone]) -> Standalone:
    """A standalone name server + broker on free ports in tmp_path. Attributes: namesrv_addr, broker_addr,
    vip_addr, store_dir, conf_path, log_path, proc (ServerProcess); kill9() / terminate() / restart()."""
    return standalone_factory(name="standalone")


@pytest.fixture
def namesrv_proc(tmp_path: Path) -> Iterator[ServerProcess]:
    """`orbitmq namesrv -c namesrv.conf` on a free port; `.ports[0]` is its port."""
    proc = start_namesrv(tmp_path / "namesrv")
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """make(namesrv_addr, name="b0", **broker_conf_keys) -> a started `orbitmq broker -c` process."""
    made: list[ServerProcess] = []

    def make(namesrv_addr: str, *, name: str | None = None, **keys: Any) -> ServerProcess:
        d = tmp_path / (name or f"broker{len(made)}")
        proc = start_broker(d, namesrv_addr, **keys)
        made.append(proc)
        return proc

    try:
        yield make
    finally:
        for p in made:
            p.close()
