"""IndexFile / IndexService: header and entry layout, chains, keys, time windows, file roll, reload, abnormal-exit
destruction, truncation and expiry. Runs on the real mmap Disk (tmp_path) and on SimDisk, with tiny files.
"""

from __future__ import annotations

import os
import struct
import time

import pytest

from orbitmq.base import marks
from orbitmq.base.errors import ConfigError, CorruptionError
from orbitmq.model.tags import index_key_hash, java_hash
from orbitmq.store.disk import MmapDisk
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.index_file import IndexService, index_file_name, index_file_size
from orbitmq.store.layout import INDEX_ENTRY, INDEX_HEADER
from orbitmq.testing.sim_disk import SimDisk

SLOTS = 8
MAX = 6  # entries 1..5 per file
T0 = 1_700_000_000_000


@pytest.fixture(params=["mmap", "sim"])
def env(request, tmp_path):
    if request.param == "mmap":
        disk = MmapDisk()
        root = str(tmp_path / "index")
    else:
        disk = SimDisk(seed=1)
        root = "/sim/store/index"
    services: list[IndexService] = []

    def make(slots: int = SLOTS, max_num: int = MAX) -> IndexService:
        s = IndexService(root, slots, max_num, disk)
        services.append(s)
        return s

    yield disk, root, make
    for s in services:
        s.close()


def req(phys, keys=None, uniq=None, ts=T0, topic="T", size=10, sys_flag=0) -> DispatchRequest:
    return DispatchRequest(topic, 0, phys, size, 0, ts, 0, keys, uniq, sys_flag, 0, {})


def q(svc, key, topic="T", max_num=32, begin=0, end=1 << 62):
    return svc.query(topic, key, max_num, begin, end)[0]


def test_file_geometry_header_and_entry_bytes(env):
    disk, root, make = env
    svc = make()
    svc.dispatch(req(100, keys="k1", ts=T0))
    svc.dispatch(req(200, uniq="U1", ts=T0 + 2500))
    svc.flush()
    assert svc.file_size == 40 + SLOTS * 4 + MAX * 20
    [f] = svc.files
    assert disk.file_size(f.path) == index_file_size(SLOTS, MAX)
    buf = f.buf
    assert INDEX_HEADER.unpack_from(buf, 0) == (T0, T0 + 2500, 100, 200, 2, 3)
    h1, h2 = index_key_hash("T#k1"), index_key_hash("T#U1")
    base = 40 + SLOTS * 4
    assert bytes(buf[base:base + 20]) == bytes(20)  # entry 0 is never used
    assert INDEX_ENTRY.unpack_from(buf, base + 20) == (h1, 100, 0, 0)
    assert INDEX_ENTRY.unpack_from(buf, base + 40) == (h2, 200, 2, 0)  # 2.5 s -> 2 whole seconds
    assert struct.unpack_from(">i", buf, 40 + (h1 % SLOTS) * 4)[0] == 1
    assert struct.unpack_from(">i", buf, 40 + (h2 % SLOTS) * 4)[0] == 2


def test_key_hash_is_abs_java_hash_of_topic_hash_key():
    assert index_key_hash("T#k") == abs(java_hash("T#k"))
    neg = next(s for s in (f"T#key{i}" for i in range(100)) if java_hash(s) < 0)
    assert index_key_hash(neg) == -java_hash(neg)


def test_uniq_key_and_each_keys_word_are_indexed_per_topic(env):
    _, _, make = env
    svc = make(slots=64, max_num=50)
    svc.dispatch(req(100, keys="a b  c", uniq="UNIQ1"))
    svc.dispatch(req(200, keys="b", topic="Other"))
    svc.dispatch(req(300, keys="b"))
    assert q(svc, "a") == [100]
    assert q(svc, "b") == [300, 100]  # newest first
    assert q(svc, "c") == [100] and q(svc, "UNIQ1") == [100]
    assert q(svc, "b", topic="Other") == [200]
    assert q(svc, "zz") == []
    assert svc.files[0].entry_count == 6


def test_colliding_keys_share_a_chain_and_hash_collisions_are_returned(env):
    _, _, make = env
    svc = make(slots=1, max_num=20)  # every key in one slot
    assert java_hash("T#Aa") == java_hash("T#BB")  # a real String.hashCode collision
    svc.dispatch(req(100, keys="Aa"))
    svc.dispatch(req(200, keys="x"))
    svc.dispatch(req(300, keys="BB"))
    assert q(svc, "Aa") == [300, 100]  # the reader filters by the real key
    assert q(svc, "x") == [200]
    assert svc.files[0].slot_count == 1


def test_time_window_and_max_num(env):
    _, _, make = env
    svc = make(slots=4, max_num=30)
    for i in range(10):
        svc.dispatch(req(100 * (i + 1), keys="k", ts=T0 + 1000 * i))
    assert q(svc, "k", begin=T0 + 3000, end=T0 + 5000) == [600, 500, 400]
    assert q(svc, "k", max_num=2) == [1000, 900]
    assert len(q(svc, "k", max_num=1000)) == 10
    phys, last_ts, last_phy = svc.query("T", "k", 5, 0, T0 - 1)
    assert phys == [] and (last_ts, last_phy) == (T0 + 9000, 1000)


def test_query_never_returns_more_than_64(env):
    _, _, make = env
    svc = make(slots=4, max_num=100)
    for i in range(70):
        svc.dispatch(req(10 * (i + 1), keys="k"))
    assert len(q(svc, "k", max_num=1000)) == 64


def test_full_file_rolls_and_the_new_one_starts_at_the_previous_end(env):
    disk, root, make = env
    svc = make()
    for i in range(7):
        svc.dispatch(req(100 * (i + 1), keys="k", ts=T0 + 1000 * i))
    a, b = svc.files
    assert a.is_full and a.entry_count == 5 and b.entry_count == 2
    assert a.name < b.name and disk.list_files(root) == [a.name, b.name]
    assert (b.begin_phys, b.begin_ts) == (600, T0 + 5000)
    assert q(svc, "k") == [700, 600, 500, 400, 300, 200, 100]
    assert q(svc, "k", begin=T0 + 4000, end=T0 + 5000) == [600, 500]


def test_roll_with_empty_file_keeps_previous_end_and_names_stay_ordered(env):
    _, _, make = env
    svc = make(max_num=2)  # one entry per file
    svc.dispatch(req(100, keys="a b", ts=T0))  # two keys, same millisecond: two files, distinct names
    f1, f2 = svc.files
    assert f1.name < f2.name and f1.end_phys == 100
    assert (f2.begin_phys, f2.end_phys, f2.begin_ts) == (100, 100, T0)
    assert q(svc, "a") == [100] and q(svc, "b") == [100]


def test_rollback_is_not_indexed_but_prepared_is(env):
    _, _, make = env
    svc = make()
    svc.dispatch(req(100, keys="r", sys_flag=12))
    svc.dispatch(req(200, keys="p", sys_flag=4))
    assert q(svc, "r") == [] and q(svc, "p") == [200]


def test_records_below_the_dispatched_end_are_skipped_also_after_reload(env):
    _, _, make = env
    svc = make(slots=16, max_num=50)
    svc.dispatch(req(100, keys="k"))
    svc.dispatch(req(200, keys="k"))
    svc.dispatch(req(150, keys="k"))
    svc.dispatch(req(300, size=50))  # no keys: only moves the dispatched end
    assert svc.max_phys_offset == 350 and q(svc, "k") == [200, 100]
    svc.flush()
    svc.close()
    svc2 = make(slots=16, max_num=50)
    svc2.load(True, 0)
    assert svc2.max_phys_offset == 200  # the newest indexed record: a record boundary
    before = marks.count("index duplicate dispatch skipped")
    svc2.dispatch(req(200, keys="k"))  # re-dispatch after restart
    svc2.dispatch(req(100, keys="k"))
    assert marks.count("index duplicate dispatch skipped") == before + 2
    svc2.dispatch(req(300, size=50))
    svc2.dispatch(req(400, keys="k"))
    assert q(svc2, "k") == [400, 200, 100]


def test_abnormal_exit_destroys_files_newer_than_the_checkpoint(env):
    disk, root, make = env
    svc = make()
    for i in range(12):  # files: 5, 5, 2 entries
        svc.dispatch(req(100 * (i + 1), keys="k", ts=T0 + 1000 * i))
    ends = [f.end_ts for f in svc.files]
    svc.flush()
    svc.close()
    normal = make()
    normal.load(True, 0)
    assert len(normal.files) == 3
    normal.close()
    crashed = make()
    crashed.load(False, ends[0])
    assert len(crashed.files) == 1 and len(disk.list_files(root)) == 1
    assert crashed.files[0].end_ts == ends[0] - 1000  # its newest record (500) was dropped
    assert crashed.max_phys_offset == crashed.redispatch_from == 500  # its other keys may have been in file 2
    assert q(crashed, "k") == [400, 300, 200, 100]
    for i in range(4, 12):
        crashed.dispatch(req(100 * (i + 1), keys="k", ts=T0 + 1000 * i))
    assert q(crashed, "k", max_num=64) == [100 * (i + 1) for i in range(11, -1, -1)]


def test_truncate_dirty_undoes_chains_and_drops_empty_files(env):
    disk, root, make = env
    svc = make(slots=2)
    for i in range(8):
        svc.dispatch(req(100 * (i + 1), keys=f"k{i % 3}", ts=T0 + 1000 * i))
    assert len(svc.files) == 2
    svc.truncate_dirty(450)  # keeps phys 100..400
    [f] = svc.files
    assert f.entry_count == 4 and f.end_phys == 400 and f.end_ts == T0 + 3000
    assert svc.max_phys_offset == 450
    assert q(svc, "k0") == [400, 100] and q(svc, "k1") == [200] and q(svc, "k2") == [300]
    assert len(disk.list_files(root)) == 1
    svc.dispatch(req(500, keys="k1", ts=T0 + 9000))
    assert q(svc, "k1") == [500, 200]
    svc.flush()
    svc.close()
    again = make(slots=2)
    again.load(True, 0)
    assert q(again, "k1") == [500, 200] and q(again, "k0") == [400, 100]
    again.truncate_dirty(0)
    assert again.files == [] and disk.list_files(root) == []


def test_delete_expired_never_deletes_the_newest_file(env):
    disk, root, make = env
    svc = make()
    for i in range(12):
        svc.dispatch(req(100 * (i + 1), keys="k"))
    assert svc.delete_expired(501) == 1  # first file ends at phys 500
    assert svc.delete_expired(10_000) == 1 and len(svc.files) == 1
    assert q(svc, "k") == [1200, 1100]


def test_flush_returns_end_timestamp_and_sim_crash_keeps_flushed_entries():
    disk = SimDisk(seed=5)
    root = "/s/index"
    svc = IndexService(root, SLOTS, MAX, disk)
    assert svc.flush() == 0
    svc.dispatch(req(100, keys="k", ts=T0))
    svc.dispatch(req(200, keys="k", ts=T0 + 1000))
    assert svc.flush() == T0 + 1000
    svc.dispatch(req(300, keys="k", ts=T0 + 2000))
    disk.crash("drop")
    svc2 = IndexService(root, SLOTS, MAX, disk)
    svc2.load(True, 0)
    assert q(svc2, "k") == [200, 100]


def test_wrong_geometry_and_bad_header_are_refused(env):
    disk, root, make = env
    with pytest.raises(ConfigError):
        IndexService(root, 0, 10, disk)
    svc = make()
    svc.dispatch(req(100, keys="k"))
    svc.flush()
    path = svc.files[0].path
    svc.close()
    with pytest.raises(CorruptionError, match="max_hash_slot_num"):
        make(slots=SLOTS + 1).load(True, 0)
    b = disk.open(path, index_file_size(SLOTS, MAX))
    struct.pack_into(">i", b.buf, 36, MAX + 5)  # indexCount beyond the file
    b.mark_written(36, 40)
    b.flush(0, 40)
    b.close()
    with pytest.raises(CorruptionError, match="bad index header"):
        make().load(True, 0)


def test_file_name_is_local_time_with_milliseconds(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert index_file_name(1_700_000_000_123) == "20231114221320123"
        assert index_file_name(5) == "19700101000000005"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_names_are_unique_when_the_clock_repeats(env):
    disk, root, make = env
    svc = make(max_num=2)
    for i in range(3):
        svc.dispatch(req(100 * (i + 1), keys="k", ts=T0))
    names = [f.name for f in svc.files]
    assert len(set(names)) == 3 and names == sorted(names) == disk.list_files(root)
    assert all(len(n) == 17 and n.isdigit() for n in names)
    assert os.path.basename(svc.files[0].path) == index_file_name(T0)


def test_abnormal_load_repairs_slots_of_puts_whose_header_was_lost(env):
    disk, root, make = env
    svc = make(slots=1, max_num=20)  # one chain
    svc.dispatch(req(100, keys="a", ts=T0))
    svc.dispatch(req(200, keys="b", ts=T0 + 1000))
    ts = svc.flush()
    f = svc.files[0]
    flushed_header = bytes(f.buf[:40])
    svc.dispatch(req(300, keys="c", ts=T0 + 1000))  # same second: the file is not newer than the checkpoint
    f.buf[:40] = flushed_header  # the header of the last put never reached the disk; its slot write did
    f.backing.mark_written(0, 40)
    f.flush()
    f.backing.flush(0, svc.file_size)
    assert struct.unpack_from(">i", f.buf, 40)[0] == 3
    svc.close()
    plain = make(slots=1, max_num=20)
    plain.load(True, 0)  # a normal load trusts the files...
    assert q(plain, "a") == [] and plain.files[0].repair_slots() == 1  # ...the chain was cut; repair restores it
    assert struct.unpack_from(">i", plain.files[0].buf, 40)[0] == 2 and q(plain, "a") == [100]
    plain.close()
    again = make(slots=1, max_num=20)
    again.load(False, ts)
    # the newest record (200) is dropped too, so re-dispatching from max_phys_offset restores everything
    assert again.max_phys_offset == again.redispatch_from == 200 and q(again, "a") == [100] and q(again, "b") == []
    for phys, key in ((200, "b"), (300, "c")):
        again.dispatch(req(phys, keys=key, ts=T0 + 1000))
    assert q(again, "a") == [100] and q(again, "b") == [200] and q(again, "c") == [300]


def test_abnormal_load_drops_a_torn_tail_written_in_the_checkpoint_millisecond(env):
    _, _, make = env
    svc = make(slots=2, max_num=20)
    for i in range(3):
        svc.dispatch(req(100 * (i + 1), keys=f"k{i}", ts=T0 + 1000 * i))
    ts = svc.flush()
    svc.dispatch(req(400, keys="k3 k4", ts=ts))  # same millisecond as the checkpoint: the file is not destroyed
    f = svc.files[0]
    base = 40 + 2 * 4
    f.buf[base + 4 * 20 : base + 5 * 20] = bytes(20)  # entry 4 (k3) never reached the disk, the header did
    f.backing.mark_written(0, svc.file_size)
    f.backing.flush(0, svc.file_size)
    svc.close()
    before = marks.count("index torn tail dropped")
    again = make(slots=2, max_num=20)
    again.load(False, ts)
    assert marks.count("index torn tail dropped") == before + 1
    assert again.max_phys_offset == again.redispatch_from == 300  # cut at the last record before the tear
    assert [q(again, f"k{i}") for i in range(5)] == [[100], [200], [], [], []]
    for i in (2, 3):
        again.dispatch(req(100 * (i + 1), keys="k2" if i == 2 else "k3 k4", ts=T0 + 1000 * i))
    assert [q(again, f"k{i}") for i in range(5)] == [[100], [200], [300], [400], [400]]


def test_abnormal_load_reindexes_a_record_split_across_a_destroyed_file(env):
    _, _, make = env
    svc = make(slots=4, max_num=3)  # two entries per file
    svc.dispatch(req(100, keys="a", ts=T0))
    svc.dispatch(req(200, keys="b", uniq="U", ts=T0 + 1000))  # U in file 1, b in file 2
    svc.dispatch(req(300, keys="c", ts=T0 + 2000))  # file 2
    assert [f.entry_count for f in svc.files] == [2, 2]
    svc.flush()
    svc.close()
    crashed = make(slots=4, max_num=3)
    crashed.load(False, T0 + 500)  # file 2 began after the checkpoint: destroyed, and b with it
    assert crashed.max_phys_offset == 200 and q(crashed, "U") == []
    crashed.dispatch(req(200, keys="b", uniq="U", ts=T0 + 1000))
    crashed.dispatch(req(300, keys="c", ts=T0 + 2000))
    assert [q(crashed, k) for k in ("a", "b", "c", "U")] == [[100], [200], [300], [200]]


def test_abnormal_load_keeps_a_newest_record_older_than_the_checkpoint_second(env):
    _, _, make = env
    svc = make(slots=4, max_num=20)
    svc.dispatch(req(100, keys="a", ts=T0))
    svc.dispatch(req(200, keys="b c", ts=T0 + 1000))
    svc.flush()
    svc.close()
    again = make(slots=4, max_num=20)
    again.load(False, T0 + 5000)  # keyless records came later: the newest indexed one is complete
    assert again.redispatch_from is None and again.max_phys_offset == 200
    assert [q(again, k) for k in "abc"] == [[100], [200], [200]]
    again.dispatch(req(200, keys="b c", ts=T0 + 1000))  # a re-dispatch from the store's own start is skipped
    assert [q(again, k) for k in "abc"] == [[100], [200], [200]]


def test_abnormal_load_drops_an_old_record_whose_other_keys_were_in_a_destroyed_file(env):
    _, _, make = env
    svc = make(slots=4, max_num=3)  # two entries per file
    svc.dispatch(req(100, keys="a", ts=T0))
    svc.dispatch(req(200, keys="b", uniq="U", ts=T0 + 1000))  # U in file 1, b in file 2
    svc.dispatch(req(300, keys="c", ts=T0 + 3000))  # file 2, flushed: the checkpoint says T0 + 3000
    checkpoint = svc.flush()
    svc.dispatch(req(400, keys="d", ts=T0 + 5000))  # file 3... and file 2 is now full with an end of T0 + 3000
    svc.dispatch(req(500, keys="e", ts=T0 + 6000))
    svc.flush()
    svc.close()
    crashed = make(slots=4, max_num=3)
    assert checkpoint == T0 + 3000
    crashed.load(False, T0 + 999)  # file 2 (begun at T0 + 1000) counts as newer: destroyed with b and c
    assert crashed.redispatch_from == crashed.max_phys_offset == 200 and q(crashed, "U") == []
    for phys, keys, uniq, ts in ((200, "b", "U", 1000), (300, "c", None, 3000), (400, "d", None, 5000),
                                 (500, "e", None, 6000)):
        crashed.dispatch(req(phys, keys=keys, uniq=uniq, ts=T0 + ts))
    assert [q(crashed, k) for k in ("a", "U", "b", "c", "d", "e")] == [[100], [200], [200], [300], [400], [500]]


def test_abnormal_load_keeps_the_file_being_written_and_re_dispatches_only_its_tail(env):
    """The file being written at the crash began before the checkpoint: kept (destroying it would force a
    re-dispatch of everything it indexed); only the newest, possibly partly written, record is re-indexed."""
    _, _, make = env
    svc = make(slots=4, max_num=20)
    for i in range(10):
        svc.dispatch(req(100 * (i + 1), keys=f"k{i}", ts=T0 + 1000 * i))
    svc.flush()
    svc.close()
    crashed = make(slots=4, max_num=20)
    crashed.load(False, T0 + 9000)  # the checkpoint covered everything up to the newest record's second
    assert crashed.redispatch_from == 1000 and crashed.max_phys_offset == 1000
    assert [q(crashed, f"k{i}") for i in range(9)] == [[100 * (i + 1)] for i in range(9)]
    crashed.dispatch(req(1000, keys="k9", ts=T0 + 9000))
    assert q(crashed, "k9") == [1000]


def test_put_key_writes_what_put_of_the_key_hash_writes(tmp_path):
    """IndexFile.put_key (native hash + write on a mapped file) == put(index_key_hash(f"{topic}#{key}"))."""
    from orbitmq.store.index_file import IndexFile

    disk = MmapDisk()
    size = index_file_size(SLOTS, 64)
    a = IndexFile(str(tmp_path / "a"), disk.create(str(tmp_path / "a"), size), SLOTS, 64)
    b = IndexFile(str(tmp_path / "b"), disk.create(str(tmp_path / "b"), size), SLOTS, 64)
    keys = [("T", "U1"), ("T", "U2"), ("Topic-é", "K"), ("T", "U1"), ("%RETRY%G", "😀x"), ("T", "")]
    for i, (topic, key) in enumerate(keys * 3):
        a.put_key(topic, key, 100 * i, T0 + 700 * i)
        b.put(index_key_hash(f"{topic}#{key}"), 100 * i, T0 + 700 * i)
    fields = ("begin_ts", "end_ts", "begin_phys", "end_phys", "slot_count", "index_count", "_dirty_hi")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert bytes(a.buf) == bytes(b.buf)
    a.close()
    b.close()


def test_slots_restored_by_an_abnormal_load_reach_the_disk():
    """A file whose header and entry reached the disk but not its slot write: the abnormal load points the slot at
    the entry again, and that repair is flushed like any put (it was kept in memory only, so a second crash lost
    the key from the index for good: found by test_cq_index_props' IndexMachine)."""
    disk = SimDisk(seed=3)
    root = "/sim/store/index"
    svc = IndexService(root, 1, 2, disk)  # one slot, one entry per file
    svc.dispatch(req(100, keys="a", ts=T0))
    ts = svc.flush()
    for phys, key in ((200, "b"), (300, "c")):  # in the checkpoint's millisecond: the files are kept
        svc.dispatch(req(phys, keys=key, ts=ts))
    svc.flush()
    lost_slot = svc.files[1].path
    svc.close()
    disk._files[os.path.normpath(lost_slot)].durable[40:44] = bytes(4)  # b's slot write never reached the disk
    disk.crash("drop")
    again = IndexService(root, 1, 2, disk)
    again.load(False, ts)
    again.dispatch(req(300, keys="c", ts=ts))  # recovery re-dispatches the newest record
    assert [q(again, k) for k in "abc"] == [[100], [200], [300]]
    again.flush()
    again.close()
    disk.crash("drop")  # nothing unflushed may matter now
    third = IndexService(root, 1, 2, disk)
    third.load(True, 0)
    assert [q(third, k) for k in "abc"] == [[100], [200], [300]]
    third.close()
