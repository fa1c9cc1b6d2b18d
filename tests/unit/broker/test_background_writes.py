"""Issue 18 item 4: concurrent atomic_write calls of one path never share a temp file, and the services' off-loop
writes (BackgroundWrites) are still awaited by drain() after their caller was cancelled, as Broker.stop does
before the services write the same files from the loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from orbitmq.base.fsio import atomic_write, read_with_backup
from orbitmq.broker.services import BackgroundWrites


def test_concurrent_atomic_writes_of_one_path_do_not_collide(tmp_path: Path) -> None:
    target = tmp_path / "offsets.json"
    payloads = [bytes([65 + i]) * (64 * 1024) for i in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(payloads))

    def writer(data: bytes) -> None:
        start.wait()
        try:
            for _ in range(6):
                atomic_write(target, data)
        except BaseException as e:  # a shared temp file: FileNotFoundError on rename, or a torn file
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    current, backup = read_with_backup(target)
    assert current in payloads and backup in payloads  # whole payloads, never a mix
    assert not list(tmp_path.glob("*.tmp"))


def test_drain_waits_for_a_write_whose_caller_was_cancelled(tmp_path: Path) -> None:
    target = tmp_path / "delayOffset.json"
    started, release = threading.Event(), threading.Event()

    def slow_write(path: Path, data: bytes) -> None:
        started.set()
        release.wait(5)
        atomic_write(path, data)

    async def run() -> None:
        writes = BackgroundWrites()
        task = asyncio.ensure_future(writes.run(slow_write, target, b"from the thread"))
        assert await asyncio.to_thread(started.wait, 5)
        task.cancel()  # what the broker's supervisor cancel does to a service's persist loop
        await asyncio.gather(task, return_exceptions=True)
        assert len(writes) == 1  # the thread is still writing
        drain = asyncio.ensure_future(writes.drain())
        for _ in range(20):
            await asyncio.sleep(0)  # loop iterations, no wall-clock wait
        assert not drain.done()
        release.set()
        await asyncio.wait_for(drain, 5)
        assert len(writes) == 0
        atomic_write(target, b"final state from the loop")  # the service's stop(): no other writer now

    asyncio.run(run())
    assert target.read_bytes() == b"final state from the loop"
    assert read_with_backup(target)[1] == b"from the thread"


def test_drain_collects_a_failed_write() -> None:
    def broken() -> None:
        raise OSError("disk full")

    async def run() -> None:
        writes = BackgroundWrites()
        task = asyncio.ensure_future(writes.run(broken))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.wait_for(writes.drain(), 5)
        assert len(writes) == 0

    asyncio.run(run())
