"""ConsumeQueue / ConsumeQueueTable: entry format, segments, fillers, dedup, recovery, truncation, expiry, time lookup.

Each test runs on the real mmap Disk (tmp_path) and on SimDisk. Segments hold 5 entries (100 bytes).
"""

from __future__ import annotations

import os
import struct

import pytest

from orbitmq.base import marks
from orbitmq.base.errors import ConfigError, CorruptionError
from orbitmq.store.consume_queue import FILLER_SIZE, ConsumeQueueTable
from orbitmq.store.disk import MmapDisk
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.layout import CQ_ENTRY
from orbitmq.testing.sim_disk import SimDisk

SEG = 100  # 5 entries per segment
FILLER = (0, FILLER_SIZE, 0)


@pytest.fixture(params=["mmap", "sim"])
def env(request, tmp_path):
    if request.param == "mmap":
        disk = MmapDisk()
        root = str(tmp_path / "consumequeue")
    else:
        disk = SimDisk(seed=1)
        root = "/sim/store/consumequeue"
    tables: list[ConsumeQueueTable] = []

    def make() -> ConsumeQueueTable:
        t = ConsumeQueueTable(root, SEG, disk)
        tables.append(t)
        return t

    yield disk, root, make
    for t in tables:
        t.close()


def req(topic="T", qid=0, phys=0, size=10, tags=0, qoff=0, sys_flag=0, ts=0) -> DispatchRequest:
    return DispatchRequest(topic, qid, phys, size, tags, ts, qoff, None, None, sys_flag, 0, {})


def fill(table, n, topic="T", qid=0, start_off=0, start_phys=0, size=10):
    """n entries; entry i points at phys start_phys + 100*i with the given size and tags code i."""
    for i in range(n):
        table.dispatch(req(topic, qid, start_phys + 100 * i, size, i, start_off + i))


def reopen(make):
    t = make()
    t.load()
    return t, t.recover()


def test_entry_is_20_bytes_big_endian_phys_size_tags(env):
    disk, root, make = env
    t = make()
    t.dispatch(req(phys=0x0102030405060708, size=0x11223344, tags=-2, qoff=0))
    t.flush()
    assert CQ_ENTRY.size == 20
    path = os.path.join(root, "T", "0", "00000000000000000000")
    assert disk.exists(path) and disk.file_size(path) == SEG
    b = bytes(t.find("T", 0)._segs[0].buf[:20])
    assert b == bytes.fromhex("0102030405060708") + bytes.fromhex("11223344") + struct.pack(">q", -2)


def test_reads_stop_at_segment_end_and_files_are_named_by_byte_offset(env):
    disk, root, make = env
    t = make()
    fill(t, 12)
    cq = t.find("T", 0)
    assert (cq.min_offset, cq.max_offset) == (0, 12)
    assert cq.read(0, 100) == [(100 * i, 10, i) for i in range(5)]
    assert cq.read(3, 100) == [(300, 10, 3), (400, 10, 4)]
    assert cq.read(5, 2) == [(500, 10, 5), (600, 10, 6)]
    assert cq.read(10, 100) == [(1000, 10, 10), (1100, 10, 11)]
    assert cq.read(12, 10) == [] and cq.read(11, 0) == []
    assert cq.segment_end_offset(3) == 5 and cq.segment_end_offset(5) == 10
    assert disk.list_files(os.path.join(root, "T", "0")) == [
        "00000000000000000000", "00000000000000000100", "00000000000000000200"]
    assert cq.last_entry() == (1100, 10, 11)
    assert cq.entry(7) == (700, 10, 7)


def test_first_segment_at_nonzero_offset_is_prefilled_and_min_offset_is_the_first_message(env):
    disk, root, make = env
    t = make()
    t.dispatch(req(phys=5000, qoff=7))
    cq = t.find("T", 0)
    assert (cq.min_offset, cq.max_offset) == (7, 8)
    assert disk.list_files(os.path.join(root, "T", "0")) == ["00000000000000000100"]
    seg = cq._segs[0]
    assert list(CQ_ENTRY.iter_unpack(seg.buf[:40])) == [FILLER, FILLER]
    assert cq.read(5, 10) == [] and cq.read(7, 10) == [(5000, 10, 0)]
    t.flush()
    t.close()
    t2, end = reopen(make)
    cq2 = t2.find("T", 0)
    assert end == 5010 and (cq2.min_offset, cq2.max_offset) == (7, 8)


def test_duplicate_dispatch_is_skipped_by_phys_and_by_queue_offset(env):
    _, _, make = env
    t = make()
    fill(t, 3)
    before = marks.count("cq duplicate dispatch skipped")
    t.dispatch(req(phys=100, qoff=1))  # same record again
    t.dispatch(req(phys=190, size=20, qoff=3))  # ends at 210 <= 210: still a duplicate
    assert marks.count("cq duplicate dispatch skipped") == before + 2
    t.dispatch(req(phys=5000, qoff=1))  # new phys but an offset already taken
    cq = t.find("T", 0)
    assert cq.max_offset == 3 and cq.read(0, 10) == [(0, 10, 0), (100, 10, 1), (200, 10, 2)]


@pytest.mark.parametrize(("sys_flag", "kept"), [(0, True), (8, True), (4, False), (12, False), (0x4 | 0x1, False)])
def test_prepared_and_rollback_records_never_reach_a_queue(env, sys_flag, kept):
    _, _, make = env
    t = make()
    t.dispatch(req(sys_flag=sys_flag))
    cq = t.find("T", 0)
    assert (cq is not None and cq.max_offset == 1) is kept


def test_gap_in_queue_offsets_is_filled_so_offsets_stay_aligned(env):
    _, _, make = env
    t = make()
    fill(t, 2)
    before = marks.count("cq gap filled")
    t.dispatch(req(phys=900, qoff=8))
    cq = t.find("T", 0)
    assert marks.count("cq gap filled") == before + 1
    assert cq.max_offset == 9
    assert cq.read(2, 10) == [FILLER] * 3 and cq.read(5, 10) == [FILLER] * 3 + [(900, 10, 0)]


def test_recover_keeps_valid_prefix_and_zeroes_torn_tail(env):
    _, _, make = env
    t = make()
    fill(t, 8)
    cq = t.find("T", 0)
    seg = cq._segs[1]
    struct.pack_into(">i", seg.buf, 20 + 8, 0)  # entry 6: size 0 -> invalid; entry 7 after it is stale
    t.flush()
    seg.backing.flush(0, SEG)
    t.close()
    t2, end = reopen(make)
    cq2 = t2.find("T", 0)
    assert (cq2.min_offset, cq2.max_offset, end) == (0, 6, 510)
    assert bytes(cq2._segs[1].buf[20:60]) == bytes(40)
    fill(t2, 1, start_off=6, start_phys=600)
    t2.flush()
    t2.close()
    t3, end3 = reopen(make)
    assert t3.find("T", 0).read(5, 10) == [(500, 10, 5), (600, 10, 0)] and end3 == 610


def test_recover_drops_entries_whose_phys_goes_backwards(env):
    _, _, make = env
    t = make()
    fill(t, 4)
    cq = t.find("T", 0)
    CQ_ENTRY.pack_into(cq._segs[0].buf, 60, 50, 10, 0)  # entry 3 points before entry 2
    t.flush()
    cq._segs[0].backing.flush(0, SEG)
    t.close()
    t2, end = reopen(make)
    assert t2.find("T", 0).max_offset == 3 and end == 210


def test_recover_deletes_segments_after_the_first_invalid_entry(env):
    disk, root, make = env
    t = make()
    fill(t, 13)
    cq = t.find("T", 0)
    CQ_ENTRY.pack_into(cq._segs[0].buf, 40, -1, 10, 0)  # third-to-last segment, entry 2: invalid
    cq._segs[0].backing.flush(0, SEG)
    t.flush()
    t.close()
    t2, end = reopen(make)
    assert t2.find("T", 0).max_offset == 2 and end == 110
    assert disk.list_files(os.path.join(root, "T", "0")) == ["00000000000000000000"]


def test_sim_crash_keeps_only_flushed_entries():
    disk = SimDisk(seed=3)
    root = "/s/consumequeue"
    t = ConsumeQueueTable(root, SEG, disk)
    fill(t, 7)
    t.flush()
    fill(t, 3, start_off=7, start_phys=700)
    disk.crash("drop")
    t2 = ConsumeQueueTable(root, SEG, disk)
    t2.load()
    assert t2.recover() == 610
    assert t2.find("T", 0).max_offset == 7
    assert t2.queue_max_offsets() == {("T", 0): 7}


def test_truncate_dirty_across_segments_then_append_continues(env):
    disk, root, make = env
    t = make()
    fill(t, 12)
    t.flush()
    t.truncate_dirty(450)  # drops entries at phys 500.. (offsets 5..11)
    cq = t.find("T", 0)
    assert (cq.min_offset, cq.max_offset) == (0, 5)
    assert disk.list_files(os.path.join(root, "T", "0")) == ["00000000000000000000"]
    t.dispatch(req(phys=460, qoff=5))
    assert cq.read(5, 10) == [(460, 10, 0)]
    t.truncate_dirty(300)
    assert cq.max_offset == 3 and bytes(cq._segs[0].buf[60:100]) == bytes(40)
    t.flush()
    t.close()
    t2, end = reopen(make)
    assert t2.find("T", 0).max_offset == 3 and end == 210


def test_truncating_everything_empties_the_queue_and_it_restarts_with_fillers(env):
    disk, root, make = env
    t = make()
    fill(t, 7, start_phys=1000)
    t.truncate_dirty(0)
    cq = t.find("T", 0)
    assert (cq.min_offset, cq.max_offset) == (0, 0)
    t.dispatch(req(phys=0, qoff=0))
    assert cq.read(0, 5) == [(0, 10, 0)]
    t.dispatch(req(topic="V", phys=5000, qoff=7))
    t.truncate_dirty(100)  # the message goes and so do the fillers before it
    v = t.find("V", 0)
    assert (v.min_offset, v.max_offset) == (5, 5)
    t.dispatch(req(topic="V", phys=6000, qoff=6))
    assert (v.min_offset, v.max_offset) == (6, 7) and v.read(6, 5) == [(6000, 10, 0)]
    t2 = make()
    fill(t2, 7, topic="U", start_phys=1000)
    t2.truncate_dirty(1500)  # drops offsets 5, 6: the second segment
    u = t2.find("U", 0)
    assert (u.min_offset, u.max_offset) == (0, 5)
    assert disk.list_files(os.path.join(root, "U", "0")) == ["00000000000000000000"]


def test_delete_expired_removes_old_segments_and_corrects_min_offset(env):
    disk, root, make = env
    t = make()
    fill(t, 12)
    assert t.delete_expired(450) == 1  # the first segment's last entry (phys 400) is below 450
    cq = t.find("T", 0)
    assert cq.min_offset == 5 and cq.read(3, 5) == []
    assert disk.list_files(os.path.join(root, "T", "0")) == ["00000000000000000100", "00000000000000000200"]
    assert t.delete_expired(650) == 0 and cq.min_offset == 7
    assert t.delete_expired(10_000) == 1  # the last segment is never deleted
    assert cq.min_offset == cq.max_offset == 12
    fill(t, 1, start_off=12, start_phys=20_000)
    assert cq.read(cq.min_offset, 5) == [(20_000, 10, 0)]


def test_correct_min_offset_skips_fillers_even_for_phys_zero(env):
    _, _, make = env
    t = make()
    t.dispatch(req(phys=0, qoff=3))
    cq = t.find("T", 0)
    cq.correct_min_offset(0)
    assert cq.min_offset == 3


def test_offset_by_time_exact_nearest_edges_and_expired_entries(env):
    _, _, make = env
    t = make()
    fill(t, 12)  # phys 100*i stored at 1000 + 10*i (i = 0..11)
    cq = t.find("T", 0)

    def store_time(min_phys):
        return lambda phys, size: 1000 + phys // 10 if phys >= min_phys else -1

    st = store_time(0)
    assert cq.offset_by_time(1050, st) == 5
    assert cq.offset_by_time(1052, st) == 5 and cq.offset_by_time(1058, st) == 6
    assert cq.offset_by_time(1055, st) == 5  # a tie goes to the left neighbour
    assert cq.offset_by_time(0, st) == 0
    assert cq.offset_by_time(99_999, st) == 11
    assert cq.offset_by_time(1013, store_time(300)) == 3  # entries 0..2 unreadable: skipped
    assert cq.offset_by_time(1000, lambda p, s: -1) == 0
    empty = t.find_or_create("E", 1)
    assert empty.offset_by_time(5, st) == 0


def test_table_load_finds_topics_and_delete_topic_removes_files(env):
    disk, root, make = env
    t = make()
    fill(t, 3, topic="A", qid=0)
    fill(t, 6, topic="A", qid=3, start_phys=10_000)
    fill(t, 1, topic="%RETRY%g", qid=0, start_phys=50_000)
    t.flush()
    t.close()
    t2, end = reopen(make)
    assert sorted(t2.topics()) == ["%RETRY%g", "A"]
    assert t2.queue_max_offsets() == {("A", 0): 3, ("A", 3): 6, ("%RETRY%g", 0): 1}
    assert end == 50_010
    t2.delete_topic("A")
    assert t2.find("A", 0) is None and list(t2.topics()) == ["%RETRY%g"]
    assert not disk.list_files(os.path.join(root, "A", "3"))
    assert "A" not in disk.list_dirs(root)
    assert t2.find_or_create("A", 0).max_offset == 0


def test_bad_segment_size_and_foreign_file_size_are_refused(env):
    disk, root, make = env
    with pytest.raises(ConfigError):
        ConsumeQueueTable(root, 30, disk)
    t = make()
    fill(t, 1)
    t.flush()
    t.close()
    t2 = ConsumeQueueTable(root, 200, disk)
    with pytest.raises(CorruptionError, match="mapped_file_size_consume_queue"):
        t2.load()
    t2.close()


def test_an_expired_queue_restarting_past_its_tail_segment_starts_over_there(env):
    disk, root, make = env
    t = make()
    fill(t, 3)
    t.delete_expired(10_000)
    cq = t.find("T", 0)
    assert cq.min_offset == cq.max_offset == 3
    t.dispatch(req(phys=20_000, qoff=12))  # offsets 3..11 were never written to this queue
    assert disk.list_files(os.path.join(root, "T", "0")) == ["00000000000000000200"]
    assert (cq.min_offset, cq.max_offset) == (12, 13) and cq.read(12, 5) == [(20_000, 10, 0)]
    t.flush()
    t.close()
    t2, end = reopen(make)
    assert (t2.find("T", 0).min_offset, t2.find("T", 0).max_offset, end) == (12, 13, 20_010)
