"""Segment.zero_from skips holes (SEEK_HOLE) but still clears every written byte, flushed or not."""

from __future__ import annotations

from orbitmq.store.disk import MmapDisk


def test_data_end_covers_unflushed_mmap_writes(tmp_path) -> None:
    disk = MmapDisk()
    b = disk.create(str(tmp_path / "seg"), 64 * 1024 * 1024)
    b.write(5_000_000, b"\x01" * 10)  # dirty page cache only: never flushed, like a process killed with -9
    assert b.data_end(0) >= 5_000_010
    assert b.data_end(5_000_000) >= 5_000_010
    b.close()


def test_zero_from_clears_stale_bytes_past_truncation(tmp_path) -> None:
    from orbitmq.store.segment import Segment

    disk = MmapDisk()
    path = str(tmp_path / "00000000000000000000")
    backing = disk.create(path, 8 * 1024 * 1024)
    seg = Segment(0, 8 * 1024 * 1024, path, backing)
    seg.write_at(100, b"\x07" * 3_000_000)
    assert seg.zero_from(200) > 0
    assert bytes(seg.buf[100:200]) == b"\x07" * 100
    assert bytes(seg.buf[200:3_000_100]).count(0) == 3_000_000 - 100
    assert seg.zero_from(200) == 0  # nothing left to clear
    seg.close()
