"""Failure semantics of the store (issue 12 item 4): a failed fsync makes the store read-only (never a success
after it), segments are allocated before they are mapped (ENOSPC is a refusal, never SIGBUS), directory fsyncs on
segment create/delete, admission control (SYSTEM_BUSY remarks), the test-only no-fsync switch."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import time

import pytest

from orbitmq.base import fsio
from orbitmq.store import GetStatus, MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.store import disk as disk_mod
from orbitmq.store import flush as flush_mod
from orbitmq.store.flush import FlushFailedError
from orbitmq.testing.sim_disk import SimBacking, SimDisk


def cfg(root: str, **kw: object) -> StoreConfig:
    base: dict[str, object] = dict(mapped_file_size_commitlog=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                                   max_message_size=64 * 1024, max_hash_slot_num=64, max_index_num=256)
    base.update(kw)
    return StoreConfig(root, **base)  # type: ignore[arg-type]


def msg(i: int = 0, body: bytes | None = None) -> MessageInner:
    return MessageInner("T", 0, body if body is not None else b"m%d" % i, {"TAGS": "A", "KEYS": f"k{i}"})


def _eio(*_a: object, **_k: object) -> None:
    raise OSError(errno.EIO, "Input/output error (injected)")


def _fail_commitlog_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    real = SimBacking.flush

    def flush(self: SimBacking, start: int, end: int) -> None:
        if "/commitlog/" in self.path:
            _eio()
        real(self, start, end)

    monkeypatch.setattr(SimBacking, "flush", flush)


async def _until(cond, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# ---- a failed fsync makes the store read-only -------------------------------------------------------------
def test_sync_flush_fsync_error_refuses_waiters_and_every_later_write(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        disk = SimDisk()
        s = MessageStore(cfg("/s", flush_disk_type="SYNC_FLUSH"), disk=disk)
        s.load()
        ok = await s.put_message(msg(0))
        assert ok.status is PutStatus.PUT_OK
        _fail_commitlog_flushes(monkeypatch)
        results = await asyncio.gather(*(s.put_message(msg(i)) for i in range(1, 20)))
        assert [r.status for r in results] == [PutStatus.SERVICE_NOT_AVAILABLE] * 19  # the failed round's waiters
        monkeypatch.undo()  # the disk "works" again: fsyncgate — a later fsync may say fine, the store must not
        end = s.max_phys_offset
        later = await s.put_message(msg(99))
        assert later.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.max_phys_offset == end  # refused before anything was appended
        with pytest.raises(FlushFailedError):
            await s.flusher.flush()
        info = s.runtime_info()
        assert "CommitLog flush failed" in info["readOnly"] and "Input/output error" in info["readOnly"]
        got = s.get_message("G", "T", 0, 0, 32)  # reads keep working
        assert got.status is GetStatus.FOUND and got.msg_count == 1
        await s.shutdown()
        assert disk.exists("/s/abort")  # the next start runs crash recovery

    asyncio.run(main())


def test_async_flush_fsync_error_makes_store_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        disk = SimDisk()
        s = MessageStore(cfg("/s", flush_interval_commitlog_ms=10, flush_commitlog_least_pages=0), disk=disk)
        s.load()
        await s.start()
        _fail_commitlog_flushes(monkeypatch)
        assert (await s.put_message(msg(0))).status is PutStatus.PUT_OK  # ASYNC_FLUSH answers before the flush
        await _until(lambda: s.read_only_reason != "")  # the periodic flush failed
        assert (await s.put_message(msg(1))).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.get_message("G", "T", 0, 0, 32).msg_count == 1
        await s.shutdown()

    asyncio.run(main())


def test_real_disk_fdatasync_eio_in_worker_thread(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        s = MessageStore(cfg(str(tmp_path), flush_disk_type="SYNC_FLUSH"))
        s.load()
        assert (await s.put_message(msg(0))).status is PutStatus.PUT_OK
        monkeypatch.setattr(disk_mod.os, "fdatasync", _eio)
        results = await asyncio.gather(*(s.put_message(msg(i)) for i in range(1, 10)))
        assert all(r.status is PutStatus.SERVICE_NOT_AVAILABLE for r in results)
        monkeypatch.undo()
        assert (await s.put_message(msg(50))).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.get_message("G", "T", 0, 0, 32).status is GetStatus.FOUND
        await s.shutdown()
        assert (tmp_path / "abort").exists()

    asyncio.run(main())


# ---- the test-only switch for the FUSE power-loss harness ---------------------------------------------------
def test_unsafe_no_fsync_switch_skips_commitlog_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(flush_mod.UNSAFE_NO_FSYNC_ENV, "1")
    monkeypatch.setattr(flush_mod, "_unsafe_no_fsync", None)

    async def main() -> None:
        disk = SimDisk()
        s = MessageStore(cfg("/s", flush_disk_type="SYNC_FLUSH"), disk=disk)
        s.load()
        before = disk.flush_count
        assert (await s.put_message(msg(0))).status is PutStatus.PUT_OK
        assert disk.flush_count == before and disk.pending_writes("/s/commitlog") > 0
        await s.shutdown()

    asyncio.run(main())
    monkeypatch.setattr(flush_mod, "_unsafe_no_fsync", None)
    monkeypatch.delenv(flush_mod.UNSAFE_NO_FSYNC_ENV)
    assert flush_mod.unsafe_no_fsync() is False


# ---- allocation before mapping; directory fsync -------------------------------------------------------------
def test_fallocate_failure_refuses_put_and_leaves_no_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        s = MessageStore(cfg(str(tmp_path)))
        s.load()
        monkeypatch.setattr(disk_mod.os, "posix_fallocate", lambda *_a: _eio_nospc())
        r = await s.put_message(msg(0))
        assert r.status is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert os.listdir(tmp_path / "commitlog") == []
        monkeypatch.undo()
        assert (await s.put_message(msg(1))).status is PutStatus.PUT_OK  # space again: writes go on
        await s.shutdown()

    asyncio.run(main())


def _eio_nospc() -> None:
    raise OSError(errno.ENOSPC, "No space left on device (injected)")


def test_segment_create_and_delete_fsync_the_directory(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    synced: list[str] = []
    real = fsio.fsync_dir

    def spy(path):  # type: ignore[no-untyped-def]
        synced.append(str(path))
        real(path)

    monkeypatch.setattr(disk_mod, "fsync_dir", spy)
    d = disk_mod.MmapDisk()
    seg = str(tmp_path / "cl" / "00000000000000000000")
    b = d.create(seg, 4096)
    assert str(tmp_path / "cl") in synced and os.stat(seg).st_blocks * 512 >= 4096  # allocated, not sparse
    b.close()
    synced.clear()
    d.delete(seg)
    assert synced == [str(tmp_path / "cl")]


def test_full_tmpfs_refuses_writes_without_sigbus(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real full file system: 3 MiB of tmpfs, 1 MiB segments. Without the allocation a store into the sparse
    mapping would kill the test process with SIGBUS."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    rc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert rc.returncode == 0, f"this test needs root to mount a small tmpfs: {rc.stderr.strip()}"
    try:
        async def main() -> None:
            s = MessageStore(cfg(str(tmp_path / "root"), store_path_commitlog=str(mnt / "cl")))
            s.load()
            body = b"x" * 60_000
            statuses = []
            for i in range(200):
                r = await s.put_message(msg(i, body))
                statuses.append(r.status)
                if r.status is not PutStatus.PUT_OK:
                    break
            assert statuses[-1] is PutStatus.CREATE_MAPPED_FILE_FAILED, statuses[-3:]
            assert statuses.count(PutStatus.PUT_OK) >= 30
            n_ok = statuses.count(PutStatus.PUT_OK)
            got = s.get_message("G", "T", 0, n_ok - 1, 1)
            assert got.status is GetStatus.FOUND
            await s.shutdown()

        asyncio.run(main())
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# ---- admission control ----------------------------------------------------------------------------------------
def _slow_store(**kw: object) -> tuple[MessageStore, SimDisk]:
    disk = SimDisk()
    disk.flush_in_thread = True  # type: ignore[misc]
    disk.flush_delay_s = 0.6
    s = MessageStore(cfg("/s", flush_disk_type="SYNC_FLUSH", **kw), disk=disk)
    s.load()
    return s, disk


@pytest.mark.parametrize(("knobs", "prefix"), [
    ({"os_page_cache_busy_timeout_ms": 150, "wait_time_ms_in_send_queue": 60_000}, "[PCBUSY_CLEAN_QUEUE]"),
    ({"os_page_cache_busy_timeout_ms": 60_000, "wait_time_ms_in_send_queue": 150}, "[TIMEOUT_CLEAN_QUEUE]"),
])
def test_slow_disk_turns_on_admission_control(knobs: dict[str, int], prefix: str) -> None:
    async def main() -> None:
        s, _disk = _slow_store(**knobs)
        assert s.admission_remark() is None
        put = asyncio.ensure_future(s.put_message(msg(0)))
        await _until(lambda: s.admission_remark() is not None)
        remark = s.admission_remark()
        assert remark is not None and remark.startswith(prefix) and "broker busy" in remark
        assert (await put).status is PutStatus.PUT_OK
        await _until(lambda: s.admission_remark() is None)  # the disk caught up: sends are admitted again
        _disk.flush_delay_s = 0
        await s.shutdown()

    asyncio.run(main())


def test_admission_control_can_be_switched_off() -> None:
    async def main() -> None:
        s, _disk = _slow_store(os_page_cache_busy_timeout_ms=1, wait_time_ms_in_send_queue=1,
                               broker_fast_failure_enable=False)
        put = asyncio.ensure_future(s.put_message(msg(0)))
        await _until(lambda: s.flusher.has_waiters)
        await asyncio.sleep(0.05)
        assert s.admission_remark() is None
        await put
        _disk.flush_delay_s = 0
        await s.shutdown()

    asyncio.run(main())


def test_consume_queue_file_creation_failure_undoes_the_put(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        s = MessageStore(cfg(str(tmp_path)))
        s.load()
        assert (await s.put_message(msg(0))).status is PutStatus.PUT_OK  # CommitLog and T-0 queue files exist
        end = s.max_phys_offset
        monkeypatch.setattr(disk_mod.os, "posix_fallocate", lambda *_a: _eio_nospc())
        r = await s.put_message(MessageInner("U", 0, b"x", {}))  # a new queue: its ConsumeQueue file fails
        assert r.status is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert s.max_phys_offset == end and not s.read_only_reason  # undone; transient, the store stays writable
        assert (await s.put_message(msg(1))).status is PutStatus.PUT_OK  # an existing queue still takes writes
        monkeypatch.undo()
        r = await s.put_message(MessageInner("U", 0, b"y", {}))
        assert r.status is PutStatus.PUT_OK and r.queue_offset == 0
        assert s.get_message("G", "U", 0, 0, 32).msg_count == 1
        assert s.get_message("G", "T", 0, 0, 32).msg_count == 2
        await s.shutdown()

    asyncio.run(main())


def test_singles_run_whose_dispatch_fails_is_cut_back_and_refused_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """put_singles_nowait (the sends of one read) whose ConsumeQueue/index dispatch fails is undone as a single put
    is: the CommitLog is cut back to before the run and every message is refused CREATE_MAPPED_FILE_FAILED, each
    with its own result object (an after_put hook may rewrite one); the next run goes through."""
    s = MessageStore(cfg("/s"), disk=SimDisk())
    s.load()
    assert s.put_singles_nowait([msg(0)]) is None  # hosts seen for the first time: left to the one-by-one path
    assert s.put_messages_nowait([msg(0)])[0].status is PutStatus.PUT_OK  # which packs and remembers them
    end = s.commitlog.max_offset

    class _Failing:
        def dispatch_many(self, _requests: object) -> None:
            raise OSError(errno.EMFILE, "Too many open files (injected)")

    monkeypatch.setattr(s, "dispatcher", _Failing())
    results = s.put_singles_nowait([msg(1), msg(2), msg(3)])
    assert results is not None
    assert [r.status for r in results] == [PutStatus.CREATE_MAPPED_FILE_FAILED] * 3
    assert len({id(r) for r in results}) == 3
    assert s.commitlog.max_offset == end
    monkeypatch.undo()
    again = s.put_singles_nowait([msg(1), msg(2)])
    assert again is not None and [r.status for r in again] == [PutStatus.PUT_OK] * 2
    assert [r.queue_offset for r in again] == [1, 2]
    assert s.get_message("G", "T", 0, 0, 8).msg_count == 3
