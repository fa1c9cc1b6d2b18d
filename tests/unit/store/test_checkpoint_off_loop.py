"""Issue 18 item 5: the periodic derived flush writes the checkpoint from a worker thread (its three fsyncs are off
the event loop), the snapshot claims only data synced before it was taken, and a snapshot written late never
replaces a newer checkpoint."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.store.checkpoint import Checkpoint
from orbitmq.store.disk import MmapDisk


class _ObservedDisk(MmapDisk):
    """The real disk, recording which thread wrote the checkpoint; optionally holding the first such write."""

    def __init__(self) -> None:
        super().__init__()
        self.writer_threads: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()

    def write_small_atomic(self, path: str, data: bytes) -> None:
        if path.endswith("checkpoint"):
            self.writer_threads.append(threading.get_ident())
            self.entered.set()
            self.hold.wait(5)
        super().write_small_atomic(path, data)


def _store(tmp_path: Path, disk: _ObservedDisk) -> MessageStore:
    s = MessageStore(StoreConfig(str(tmp_path / "s"), mapped_file_size_commitlog=1 << 20, max_message_size=64 * 1024,
                                 flush_interval_consume_queue_ms=3_600_000), disk=disk)
    s.load()
    return s


def _msg(i: int) -> MessageInner:
    return MessageInner("T", 0, b"body", {"KEYS": f"k{i}"})


def test_off_loop_flush_writes_the_checkpoint_from_a_worker_thread(tmp_path: Path) -> None:
    disk = _ObservedDisk()

    async def run() -> None:
        s = _store(tmp_path, disk)
        await s.start()
        try:
            for i in range(20):
                assert (await s.put_message(_msg(i))).ok
            await s.flusher.flush()  # type: ignore[union-attr]
            disk.writer_threads.clear()
            await s._flush_derived_off_loop()
            assert disk.writer_threads and threading.get_ident() not in disk.writer_threads
            on_disk = Checkpoint.decode((tmp_path / "s" / "checkpoint").read_bytes())
            assert on_disk is not None
            assert on_disk.master_flushed_offset == s.flusher.flushed_offset > 0  # type: ignore[union-attr]
            assert on_disk.logics_msg_timestamp == s.checkpoint.state.logics_msg_timestamp > 0
        finally:
            await s.shutdown()

    asyncio.run(run())


def test_a_late_snapshot_never_replaces_a_newer_checkpoint(tmp_path: Path) -> None:
    disk = _ObservedDisk()

    async def run() -> None:
        s = _store(tmp_path, disk)
        await s.start()
        try:
            assert (await s.put_message(_msg(0))).ok
            await s.flusher.flush()  # type: ignore[union-attr]
            disk.hold.clear()
            disk.entered.clear()
            late = asyncio.ensure_future(s._flush_derived_off_loop())
            assert await asyncio.to_thread(disk.entered.wait, 5)  # the worker holds the older snapshot
            older = s.checkpoint_writer.written
            s.checkpoint.state.master_flushed_offset = 0  # what truncate_dirty does: the checkpoint must go down
            seq, data = s.checkpoint_writer.snapshot()
            newer = asyncio.ensure_future(asyncio.to_thread(s.checkpoint_writer.write, seq, data))
            disk.hold.set()
            await late
            assert await newer
            assert s.checkpoint_writer.written == seq > older
            on_disk = Checkpoint.decode((tmp_path / "s" / "checkpoint").read_bytes())
            assert on_disk is not None and on_disk.master_flushed_offset == 0
            # the older snapshot, had it been written after the newer one, would claim the flushed data again
            assert not s.checkpoint_writer.write(seq - 1, b"stale")
        finally:
            disk.hold.set()
            await s.shutdown()

    asyncio.run(run())
