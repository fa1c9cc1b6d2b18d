"""Segments created ahead, off the event loop (store/allocate.py, RocketMQ's AllocateMappedFileService): the next
CommitLog segment / ConsumeQueue file is asked for when the current one is half full, the roll takes it; a crash
with a prepared file on disk loses nothing and writes go on contiguously; a failed creation refuses the put with
CREATE_MAPPED_FILE_FAILED and the next put tries again; an unused prepared file is deleted at shutdown."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from typing import Any

from orbitmq.base import marks
from orbitmq.store import GetStatus, MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.store.consume_queue import ConsumeQueueTable
from orbitmq.store.disk import MmapDisk
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.testing.sim_disk import SimDisk

SEG = 128 * 1024
BODY = b"x" * 1000


def _cfg(root: str = "/s", **kw: Any) -> StoreConfig:
    base: dict[str, Any] = dict(mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 100,
                                max_message_size=4096, max_hash_slot_num=64, max_index_num=512,
                                flush_disk_type="SYNC_FLUSH")
    base.update(kw)
    return StoreConfig(root, **base)


def _cl_files(disk: Any, root: str = "/s") -> list[str]:
    return disk.list_files(os.path.join(root, "commitlog"))


async def _put(s: MessageStore, i: int) -> Any:
    return await s.put_message(MessageInner("T", 0, b"%06d" % i + BODY, {}))


def _bodies(s: MessageStore, n: int) -> list[int]:
    out = []
    for q in range(n):
        g = s.get_message("g", "T", 0, q, 1)
        assert g.status is GetStatus.FOUND, (q, g.status)
        out.append(q)
    return out


def test_next_commitlog_segment_is_prepared_at_half_and_taken_at_the_roll() -> None:
    disk = SimDisk()
    s = MessageStore(_cfg(), disk=disk)
    s.load()
    per_seg = SEG // (len(BODY) + 6 + 100)

    async def go() -> None:
        i = 0
        while s.commitlog.max_offset < SEG // 2 - 2000:
            assert (await _put(s, i)).status is PutStatus.PUT_OK
            i += 1
        assert _cl_files(disk) == ["00000000000000000000"]  # not before half
        while s.commitlog.max_offset < SEG // 2 + 2000:
            assert (await _put(s, i)).status is PutStatus.PUT_OK
            i += 1
        # ready before the boundary: the file exists, allocated, with nothing written into it yet
        assert _cl_files(disk) == ["00000000000000000000", f"{SEG:020d}"]
        assert len(s.commitlog.segments) == 1
        taken = marks.count("segment taken from the ahead allocator")
        while len(s.commitlog.segments) < 2:
            assert (await _put(s, i)).status is PutStatus.PUT_OK
            i += 1
        assert marks.count("segment taken from the ahead allocator") == taken + 1
        assert _bodies(s, i) == list(range(i))
        assert i > per_seg // 2
        await s.shutdown()

    asyncio.run(go())
    assert _cl_files(disk) == ["00000000000000000000", f"{SEG:020d}"]


def test_unused_prepared_segment_is_deleted_at_shutdown() -> None:
    disk = SimDisk()
    s = MessageStore(_cfg(), disk=disk)
    s.load()

    async def go() -> None:
        i = 0
        while not s.commitlog.segments.ahead_of == 0:
            assert (await _put(s, i)).status is PutStatus.PUT_OK
            i += 1
        assert len(_cl_files(disk)) == 2
        await s.shutdown()

    asyncio.run(go())
    assert _cl_files(disk) == ["00000000000000000000"]


def test_crash_with_a_prepared_segment_on_disk_loses_nothing_and_writes_go_on() -> None:
    disk = SimDisk(seed=3)
    s = MessageStore(_cfg(), disk=disk)
    s.load()
    acked = 0

    async def fill() -> None:
        nonlocal acked
        # into the second segment, past its half: the third one is prepared (an empty file on disk)
        while s.commitlog.max_offset < SEG + SEG // 2 + 5000:
            assert (await _put(s, acked)).status is PutStatus.PUT_OK
            acked += 1

    asyncio.run(fill())
    assert len(_cl_files(disk)) == 3
    disk.crash("drop")  # power loss: what was not flushed is gone (SYNC_FLUSH: every acked put was flushed)
    s2 = MessageStore(_cfg(), disk=disk)
    s2.load()
    assert _bodies(s2, acked) == list(range(acked))

    async def more() -> None:
        end_before = s2.commitlog.max_offset
        r = await _put(s2, acked)
        assert r.status is PutStatus.PUT_OK and r.phys_offset == end_before  # contiguous, not in the empty file
        while len(s2.commitlog.segments) < 3:
            assert (await _put(s2, acked + 1)).status is PutStatus.PUT_OK
        await s2.shutdown()

    asyncio.run(more())
    s3 = MessageStore(_cfg(), disk=disk)
    s3.load()
    assert _bodies(s3, acked + 1) == list(range(acked + 1))
    asyncio.run(s3.shutdown())


class _FailingDisk(SimDisk):
    """SimDisk whose create() fails with ENOSPC for paths in `full` (a disk at its limit)."""

    def __init__(self) -> None:
        super().__init__()
        self.full: set[str] = set()

    def create(self, path: str, size: int):  # type: ignore[no-untyped-def]
        if os.path.basename(path) in self.full:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return super().create(path, size)


def test_enospc_creating_ahead_refuses_the_crossing_put_and_the_next_put_tries_again() -> None:
    disk = _FailingDisk()
    disk.full.add(f"{SEG:020d}")
    s = MessageStore(_cfg(), disk=disk)
    s.load()

    async def go() -> None:
        i = 0
        failed_ahead = marks.count("segment prepared ahead failed")
        r = await _put(s, i)
        while r.status is PutStatus.PUT_OK:
            i += 1
            r = await _put(s, i)
        assert r.status is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert marks.count("segment prepared ahead failed") == failed_ahead + 1  # tried ahead, then inline
        assert _cl_files(disk) == ["00000000000000000000"]  # nothing half-made left behind
        assert _bodies(s, i) == list(range(i))  # reads work
        disk.full.clear()  # space again
        assert (await _put(s, i)).status is PutStatus.PUT_OK
        assert _bodies(s, i + 1) == list(range(i + 1))
        await s.shutdown()

    asyncio.run(go())


def test_consume_queue_file_is_prepared_ahead_and_rolled_into() -> None:
    disk = SimDisk()
    seg = 20 * 4000  # 80 KB: files this size and up are created ahead
    t = ConsumeQueueTable("/cq", seg, disk)
    d = "/cq/T/0"
    for q in range(2000):
        t.dispatch(DispatchRequest("T", 0, q * 100, 100, 0, 1, q, None, None, 0, 0, {}))
    assert disk.list_files(d) == ["00000000000000000000"]
    t.dispatch(DispatchRequest("T", 0, 2000 * 100, 100, 0, 1, 2000, None, None, 0, 0, {}))
    assert disk.list_files(d) == ["00000000000000000000", f"{seg:020d}"]
    taken = marks.count("segment taken from the ahead allocator")
    for q in range(2001, 4100):
        t.dispatch(DispatchRequest("T", 0, q * 100, 100, 0, 1, q, None, None, 0, 0, {}))
    assert marks.count("segment taken from the ahead allocator") == taken + 1
    cq = t.find("T", 0)
    assert cq is not None and cq.max_offset == 4100 and cq.entry(4099) == (409_900, 100, 0)
    t.close()
    assert disk.list_files(d) == ["00000000000000000000", f"{seg:020d}"]


class _ThreadRecordingDisk(MmapDisk):
    def __init__(self) -> None:
        self.created: list[tuple[str, int]] = []

    def create(self, path: str, size: int):  # type: ignore[no-untyped-def]
        self.created.append((os.path.basename(path), threading.get_ident()))
        return super().create(path, size)


def test_real_disk_creates_the_next_segment_off_the_event_loop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On the mmap disk the prepared segment is created (fallocate, fsync, directory fsync) by the allocation
    thread; the send crossing the boundary only takes it."""
    disk = _ThreadRecordingDisk()
    s = MessageStore(_cfg(str(tmp_path / "s"), flush_disk_type="ASYNC_FLUSH"), disk=disk)
    s.load()

    async def go() -> int:
        loop_thread = threading.get_ident()
        i = 0
        while len(s.commitlog.segments) < 3:
            assert (await _put(s, i)).status is PutStatus.PUT_OK
            i += 1
        seg_creates = [(n, t) for n, t in disk.created if n in (f"{SEG:020d}", f"{2 * SEG:020d}")]
        assert [n for n, _ in seg_creates] == [f"{SEG:020d}", f"{2 * SEG:020d}"]
        assert all(t != loop_thread for _, t in seg_creates), "a CommitLog segment was created on the event loop"
        await s.shutdown()
        return i

    n = asyncio.run(go())
    s2 = MessageStore(_cfg(str(tmp_path / "s"), flush_disk_type="ASYNC_FLUSH"))
    s2.load()
    assert _bodies(s2, n) == list(range(n))
    asyncio.run(s2.shutdown())


def test_prefault_leaves_the_file_as_it_was_and_a_closed_backing_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    disk = MmapDisk()
    path = str(tmp_path / "00000000000000000000")
    b = disk.create(path, 1 << 20)
    b.prefault(1 << 16)
    b.prefault(1 << 30)  # clamped to the file
    assert bytes(b.buf[: 1 << 16]) == bytes(1 << 16)
    b.buf[0:4] = b"abcd"
    b.flush(0, 4)
    b.close()
    b.prefault(4096)  # no-op once closed
    with open(path, "rb") as f:
        assert f.read(8) == b"abcd\0\0\0\0"
    assert os.path.getsize(path) == 1 << 20
