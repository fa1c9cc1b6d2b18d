"""The Disk contract, checked on both implementations (MmapDisk and SimDisk), plus SimDisk's crash model."""

import os
import tempfile

import pytest

from orbitmq.store.disk import MmapDisk, tracks_writes
from orbitmq.store.errors import StoreInUseError
from orbitmq.testing.sim_disk import SimDisk


@pytest.fixture(params=["mmap", "sim"])
def disk_root(request):
    if request.param == "sim":
        yield SimDisk(), "/root"
    else:
        with tempfile.TemporaryDirectory() as d:
            yield MmapDisk(), d


def test_segment_files_round_trip(disk_root):
    disk, root = disk_root
    path = os.path.join(root, "cl", "00000000000000000000")
    b = disk.create(path, 8192)
    assert b.size == 8192 and len(b.buf) == 8192 and bytes(b.buf[:4]) == bytes(4)
    b.write(10, b"hello")
    b.buf[100:103] = b"abc"
    b.mark_written(100, 103)
    b.flush(0, 8192)
    b.close()
    with pytest.raises(FileExistsError):
        disk.create(path, 8192)
    assert disk.exists(path) and disk.file_size(path) == 8192
    assert disk.list_files(os.path.join(root, "cl")) == ["00000000000000000000"]
    assert disk.list_dirs(root) == ["cl"]
    assert isinstance(disk.mtime_ms(path), int)
    b2 = disk.open(path, 8192)
    assert bytes(b2.buf[10:15]) == b"hello" and bytes(b2.buf[100:103]) == b"abc"
    b2.close()
    disk.delete(path)
    disk.delete(path)  # missing is fine
    assert not disk.exists(path) and disk.list_files(os.path.join(root, "cl")) == []
    assert disk.list_files(os.path.join(root, "nothing")) == []


def test_small_files_and_tree_removal(disk_root):
    disk, root = disk_root
    p = os.path.join(root, "meta", "checkpoint")
    assert disk.read_small(p) is None
    disk.write_small_atomic(p, b"one")
    disk.write_small_atomic(p, b"two")
    assert disk.read_small(p) == b"two"
    assert disk.read_small_with_backup(p) == [b"two", b"one"]
    disk.touch(os.path.join(root, "abort"))
    assert disk.exists(os.path.join(root, "abort"))
    disk.makedirs(os.path.join(root, "cq", "T", "0"))
    disk.create(os.path.join(root, "cq", "T", "0", "00000000000000000000"), 100).close()
    disk.remove_tree(os.path.join(root, "cq", "T"))
    assert disk.list_dirs(os.path.join(root, "cq")) == []
    assert 0.0 <= disk.usage_ratio(root) <= 1.0


def test_lock_is_exclusive_until_released(disk_root):
    disk, root = disk_root
    lock = disk.lock(os.path.join(root, "lock"))
    with pytest.raises(StoreInUseError, match="already in use"):
        disk.lock(os.path.join(root, "lock"))
    lock.release()
    disk.lock(os.path.join(root, "lock")).release()


def test_mmap_close_with_live_slice_is_safe():
    with tempfile.TemporaryDirectory() as d:
        b = MmapDisk().create(os.path.join(d, "f"), 8192)
        b.write(0, b"xyz")
        view = b.buf[0:3]
        b.close()  # a pull response still holds `view`
        assert bytes(view) == b"xyz"
        b.flush(0, 10)  # flushing a closed backing is a no-op


def test_sim_crash_modes():
    for mode in ("drop", "tear", "subset"):
        disk = SimDisk(seed=1)
        b = disk.create("/r/f", 4096)
        b.write(0, b"AAAA")
        b.flush(0, 4)
        b.write(0, b"BBBB")
        b.write(512, b"C" * 1024)
        disk.crash(mode)
        data = disk.durable_bytes("/r/f")
        if mode == "drop":
            assert data[:4] == b"AAAA" and data[512:1536] == bytes(1024)
        elif mode == "tear":
            assert data[:4] == b"BBBB"  # all pending but the last survive
            kept = data[512:1536]
            cut = len(kept.rstrip(b"\0"))
            assert cut % 512 == 0 and kept[:cut] == b"C" * cut
        else:
            assert data[:4] in (b"AAAA", b"BBBB") and data[512:1536] in (bytes(1024), b"C" * 1024)


def test_sim_arm_crash_captures_image_at_kth_write():
    disk = SimDisk()
    b = disk.create("/r/f", 1024)
    disk.arm_crash(at_write=2, mode="drop")
    b.write(0, b"1")
    b.flush(0, 1)
    b.write(1, b"2")  # 2nd write: image taken now (drops it, keeps the flushed one)
    b.flush(0, 2)
    image = disk.crash_image
    restored = SimDisk.from_image(image)
    assert restored.durable_bytes("/r/f")[:2] == b"1\0"
    assert disk.durable_bytes("/r/f")[:2] == b"12"


def test_sim_corrupt_flips_one_bit():
    disk = SimDisk()
    b = disk.create("/r/f", 64)
    b.write(0, b"\x00")
    b.flush(0, 1)
    disk.corrupt("/r/f", 0, bit=3)
    assert disk.durable_bytes("/r/f")[0] == 8 and b.buf[0] == 8


def test_only_mapped_files_skip_mark_written(tmp_path):
    """Hot paths skip mark_written only where it does nothing; SimDisk keeps seeing every write."""
    mapped = MmapDisk().create(str(tmp_path / "f"), 4096)
    assert tracks_writes(mapped) is False
    mapped.close()
    sim = SimDisk()
    sim.makedirs("/x")
    assert tracks_writes(sim.create("/x/f", 4096)) is True
