"""Broker.stop waits for the services' file writes still running in worker threads (ServiceEnv.writes) after it
cancelled the services, before they write their final state to the same files and the store shuts down."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from orbitmq.base.fsio import atomic_write
from orbitmq.broker import Broker, BrokerConfig
from orbitmq.store import StoreConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_stop_drains_in_flight_service_writes(tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()
    target = tmp_path / "store" / "config" / "scratch.json"

    def slow_write(path: Path, data: bytes) -> None:
        started.set()
        release.wait(20)
        atomic_write(path, data)

    async def main() -> None:
        broker = Broker(BrokerConfig(broker_ip1="127.0.0.1", listen_port=0),
                        StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                                    max_message_size=1024 * 1024))
        await broker.start()
        env = broker.service_env
        assert env is not None
        writer = asyncio.ensure_future(env.writes.run(slow_write, target, b"written by a service thread"))
        assert await asyncio.to_thread(started.wait, 10)
        stop = asyncio.ensure_future(broker.stop())
        try:
            for _ in range(2000):  # until stop has cancelled the services' supervisor
                if broker._supervisor is not None and broker._supervisor.done():
                    break
                await asyncio.sleep(0.005)
            for _ in range(50):
                await asyncio.sleep(0)
            assert not stop.done() and broker.store is not None and not broker.store._shutdown
            assert len(env.writes) == 1
        finally:
            release.set()
        await asyncio.wait_for(stop, 30)
        assert len(env.writes) == 0
        await asyncio.gather(writer, return_exceptions=True)

    asyncio.run(main())
    assert target.read_bytes() == b"written by a service thread"
