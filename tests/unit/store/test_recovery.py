"""Store recovery: clean shutdown, crash (drop/tear) on SimDisk, corruption handling, derived-store rebuild,
abort and lock files."""

import asyncio
import re
import tempfile

import pytest

from orbitmq.base import marks
from orbitmq.base.errors import CorruptionError
from orbitmq.model.record import iter_records
from orbitmq.store import GetStatus, MessageInner, MessageStore, StoreConfig, StoreInUseError
from orbitmq.store.recovery import ScanStart, TailAction
from orbitmq.testing.sim_disk import SimDisk

SEG = 16 * 1024
ROOT = "/s"
CL = "/s/commitlog/"


class Clock:
    def __init__(self):
        self.t = 1_700_000_000_000
        self.mono = 0

    def now_ms(self):
        self.t += 1000
        return self.t

    def monotonic_ms(self):
        return self.mono


def cfg(**kw):
    base = dict(mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 50,
                max_message_size=4096, max_hash_slot_num=64, max_index_num=512)
    base.update(kw)
    return StoreConfig(ROOT, **base)


def open_store(disk, clock=None, **kw):
    s = MessageStore(cfg(**kw), disk=disk, clock=clock or Clock())
    s.load()
    return s


def put(s, n, start=0, qid=None, size=200):
    async def go():
        out = []
        for i in range(start, start + n):
            body = (b"%06d" % i) * (size // 6)
            r = await s.put_message(MessageInner("T", i % 2 if qid is None else qid, body,
                                                 {"TAGS": "A", "KEYS": f"k{i}"}))
            assert r.ok
            out.append(r)
        return out

    return asyncio.run(go())


def bodies(s, qid):
    out = []
    off = s.get_min_offset_in_queue("T", qid)
    while True:
        g = s.get_message("g", "T", qid, off, 32)
        if g.status is not GetStatus.FOUND:
            return out
        out += [m.body[:6] for m in iter_records(b"".join(bytes(b) for b in g.buffers))]
        off = g.next_begin_offset


def all_bodies(s):
    return sorted(bodies(s, 0) + bodies(s, 1))


def shutdown(s):
    asyncio.run(s.shutdown())


def flush(s):
    asyncio.run(s.flusher.flush())


def test_clean_shutdown_recovery_keeps_everything_and_continues_offsets():
    disk = SimDisk()
    s = open_store(disk)
    assert disk.exists("/s/abort")
    put(s, 200)  # several segments
    assert len(s.commitlog.segments) > 3
    shutdown(s)
    assert not disk.exists("/s/abort")
    s2 = open_store(disk)
    d = s2.recovery_decision
    assert d.scan_start is ScanStart.THIRD_LAST_FILE and d.tail_action is TailAction.ACCEPT
    assert all_bodies(s2) == sorted(b"%06d" % i for i in range(200))
    assert s2.commitlog.topic_queue_table == {"T-0": 100, "T-1": 100}
    r = put(s2, 1, start=200)[0]
    assert r.queue_offset == 100
    shutdown(s2)


def test_crash_drop_loses_only_unflushed_and_rebuilds_cq():
    disk = SimDisk()
    s = open_store(disk)
    put(s, 50)
    flush(s)
    flushed_end = s.flushed_offset
    put(s, 10, start=50)
    disk.crash("drop")
    s2 = open_store(disk)
    assert s2.recovery_decision.scan_start is ScanStart.CHECKPOINT_FILE
    assert s2.max_phys_offset == flushed_end
    assert all_bodies(s2) == sorted(b"%06d" % i for i in range(50))
    assert s2.get_max_offset_in_queue("T", 0) == 25 and s2.get_max_offset_in_queue("T", 1) == 25
    # index rebuilt too
    assert len(s2.query_message("T", "k7", 10, 0, 1 << 62).buffers) == 1
    assert put(s2, 1, start=60, qid=0)[0].queue_offset == 25
    shutdown(s2)


def test_crash_tear_truncates_torn_tail_and_zeroes_it():
    disk = SimDisk(seed=3)
    s = open_store(disk)
    put(s, 20)
    flush(s)
    end = s.flushed_offset
    disk.arm_crash(at_write=disk.write_count + 1, mode="tear")  # right after the CommitLog write
    put(s, 1, start=20, size=3000)  # one big unflushed record, torn at a 512-byte boundary
    before = marks.count("truncated torn tail")
    disk = SimDisk.from_image(disk.crash_image)
    seg_path = CL + f"{end - end % SEG:020d}"
    assert disk.durable_bytes(seg_path)[end % SEG:end % SEG + 8] != bytes(8)  # a torn prefix survived
    s2 = open_store(disk)
    assert s2.max_phys_offset == end
    seg = s2.commitlog.segments.find(end)
    pos = end - seg.start_offset
    assert bytes(seg.buf[pos:]) == bytes(SEG - pos)  # stale torn bytes zeroed
    if disk.durable_bytes(seg.path)[pos:pos + 8] != bytes(8):
        pytest.fail("zeroing must be durable")
    assert marks.count("truncated torn tail") == before + 1
    assert all_bodies(s2) == sorted(b"%06d" % i for i in range(20))
    shutdown(s2)


def test_stale_records_after_truncation_do_not_come_back():
    disk = SimDisk()
    s = open_store(disk)
    put(s, 10)
    flush(s)
    put(s, 5, start=10)
    disk.crash("subset")  # some of the 5 may survive, in any pattern
    s2 = open_store(disk)
    n = len(all_bodies(s2))
    assert n >= 10
    put(s2, 1, start=100)
    flush(s2)
    disk.crash("drop")
    s3 = open_store(disk)
    got = all_bodies(s3)
    assert got[-1] == b"000100" and len(got) == n + 1
    shutdown(s3)


def _record_body_position(s, phys):
    msg = s.look_message_by_offset(phys)
    return phys + msg.store_size - 2 - len("TAGS\x01A\x02KEYS\x01k0") - 1 - 1 - 5  # inside the body


def test_corruption_in_middle_of_flushed_data_refuses_to_start():
    disk = SimDisk()
    s = open_store(disk)
    rs = put(s, 30)
    shutdown(s)
    victim = rs[10].phys_offset
    seg_start = victim - victim % SEG
    disk.corrupt(CL + f"{seg_start:020d}", victim - seg_start + 100)  # a body byte
    with pytest.raises(CorruptionError) as e:
        open_store(disk)
    assert "refusing" in str(e.value)
    # the lock was released on failure: an operator can retry
    disk.corrupt(CL + f"{seg_start:020d}", victim - seg_start + 100)  # repaired
    s2 = open_store(disk)
    assert len(all_bodies(s2)) == 30
    shutdown(s2)


def test_corruption_of_last_flushed_record_is_truncated():
    disk = SimDisk()
    s = open_store(disk)
    rs = put(s, 5, qid=0)
    shutdown(s)
    victim = rs[-1].phys_offset
    disk.corrupt(CL + "00000000000000000000", victim + 100)
    s2 = open_store(disk)
    assert s2.recovery_decision.tail_action is TailAction.TRUNCATE
    assert s2.max_phys_offset == victim
    assert len(bodies(s2, 0)) == 4
    shutdown(s2)


def test_crc_check_can_be_disabled():
    disk = SimDisk()
    s = open_store(disk)
    rs = put(s, 5, qid=0)
    shutdown(s)
    disk.corrupt(CL + "00000000000000000000", rs[-1].phys_offset + 100)
    s2 = open_store(disk, check_crc_on_recover=False)
    assert s2.max_phys_offset == rs[-1].phys_offset + rs[-1].wrote_bytes
    shutdown(s2)


def test_missing_consume_queue_and_index_are_rebuilt():
    disk = SimDisk()
    s = open_store(disk)
    put(s, 40)
    shutdown(s)
    disk.remove_tree("/s/consumequeue")
    disk.remove_tree("/s/index")
    s2 = open_store(disk)
    assert all_bodies(s2) == sorted(b"%06d" % i for i in range(40))
    assert len(s2.query_message("T", "k39", 10, 0, 1 << 62).buffers) == 1
    assert marks.count("recovery redispatched records") > 0
    shutdown(s2)


def test_missing_checkpoint_scans_from_first_file():
    disk = SimDisk()
    s = open_store(disk)
    put(s, 120)
    shutdown(s)
    disk.delete("/s/checkpoint")
    disk.delete("/s/checkpoint.bak")
    s2 = open_store(disk)
    assert s2.recovery_decision.scan_start is ScanStart.FIRST_FILE
    assert len(all_bodies(s2)) == 120
    shutdown(s2)


def test_crash_recovery_uses_checkpoint_file_across_segments():
    disk = SimDisk()
    clock = Clock()

    async def go():
        s = MessageStore(cfg(), disk=disk, clock=clock)
        s.load()
        for i in range(150):
            await s.put_message(MessageInner("T", i % 2, b"%06d" % i * 30, {"KEYS": f"k{i}"}))
        await s.flusher.flush()
        s._flush_derived_and_checkpoint()
        for i in range(150, 160):
            await s.put_message(MessageInner("T", i % 2, b"%06d" % i * 30, {"KEYS": f"k{i}"}))
        await s.flusher.flush()
        return s.max_phys_offset, s.checkpoint.state

    end, cp = asyncio.run(go())
    assert cp.physic_msg_timestamp > 0 and cp.logics_msg_timestamp > 0
    disk.crash("drop")  # CQ/index entries after the checkpoint are lost, the CommitLog is durable
    s2 = open_store(disk, clock=clock)
    assert s2.recovery_decision.scan_start is ScanStart.CHECKPOINT_FILE
    assert s2.max_phys_offset == end
    assert len(all_bodies(s2)) == 160
    assert len(s2.query_message("T", "k155", 10, 0, 1 << 62).buffers) == 1
    shutdown(s2)


def test_crash_recovery_re_dispatches_only_the_tail_after_the_derived_checkpoint(caplog):
    """The checkpoint records the phys offset every ConsumeQueue/index entry below which was durable: a crash in
    the middle of a dispatch tail re-dispatches from there, not from the checkpoint segment's start, and loses
    nothing (CQ and index entries past it were dropped by the crash and come back)."""
    disk = SimDisk()
    clock = Clock()

    async def go():
        s = MessageStore(cfg(), disk=disk, clock=clock)
        s.load()
        for i in range(150):
            await s.put_message(MessageInner("T", i % 2, b"%06d" % i * 30, {"KEYS": f"k{i}"}))
        await s.flusher.flush()
        s._flush_derived_and_checkpoint()
        mark = s.checkpoint.state.logics_flushed_phys
        for i in range(150, 160):
            await s.put_message(MessageInner("T", i % 2, b"%06d" % i * 30, {"KEYS": f"k{i}"}))
        await s.flusher.flush()
        return s.max_phys_offset, mark

    end, mark = asyncio.run(go())
    seg_start = mark - mark % SEG
    assert seg_start < mark < end  # the mark is inside a segment: the old start (segment) was further back
    disk.crash("drop")
    caplog.clear()  # only the reopen's lines: the first open's "re-dispatched 0 records" may be captured too
    with caplog.at_level("INFO", logger="orbitmq.store.message_store"):
        s2 = open_store(disk, clock=clock)
    found = re.findall(r"re-dispatched (\d+) records from (\d+) to (\d+)", caplog.text)
    assert len(found) == 1, caplog.text
    n, begin, stop = map(int, found[0])
    # the 10 records after the mark, and at most the newest record below it (the index re-indexes a record
    # indexed in the checkpoint's last second: its keys may be partly on disk)
    assert mark - 400 < begin <= mark and seg_start < begin and n in (10, 11) and stop == end
    assert s2.checkpoint.state.logics_flushed_phys == mark
    assert f"validated from phys {mark} (the derived checkpoint), {end - mark} bytes" in caplog.text
    assert all_bodies(s2) == sorted(b"%06d" % i for i in range(160))
    assert len(s2.query_message("T", "k155", 10, 0, 1 << 62).buffers) == 1
    assert len(s2.query_message("T", "k149", 10, 0, 1 << 62).buffers) == 1
    shutdown(s2)


def test_checkpoint_logics_flushed_phys_round_trips_and_java_pages_read_as_unknown():
    from orbitmq.store.checkpoint import Checkpoint

    cp = Checkpoint(1, 2, 3, 4, 5, logics_flushed_phys=123456)
    assert Checkpoint.decode(cp.encode()) == cp
    java = bytearray(Checkpoint(1, 2, 3, 4, 5).encode())
    java[44:] = bytes(len(java) - 44)  # a Java page: zeros past RocketMQ's fields
    assert Checkpoint.decode(bytes(java)).logics_flushed_phys == 0
    torn = bytearray(cp.encode())
    torn[50] ^= 0xFF  # the extension's own CRC catches a damaged value: unknown, not wrong
    assert Checkpoint.decode(bytes(torn)).logics_flushed_phys == 0


def test_lock_file_refuses_second_store_sim_and_real():
    disk = SimDisk()
    s = open_store(disk)
    with pytest.raises(StoreInUseError, match="already in use"):
        open_store(disk)
    shutdown(s)
    open_store(disk)

    with tempfile.TemporaryDirectory() as d:
        c = StoreConfig(d, mapped_file_size_commitlog=SEG, max_message_size=4096, max_hash_slot_num=64,
                        max_index_num=512)
        a = MessageStore(c)
        a.load()
        with pytest.raises(StoreInUseError):
            MessageStore(c).load()
        asyncio.run(a.shutdown())


def test_real_disk_crash_without_shutdown_recovers():
    with tempfile.TemporaryDirectory() as d:
        c = StoreConfig(d, mapped_file_size_commitlog=SEG, max_message_size=4096, max_hash_slot_num=64,
                        max_index_num=512)
        a = MessageStore(c)
        a.load()
        put(a, 30)
        a._close_files()  # process dies: no shutdown, abort file stays
        b = MessageStore(c)
        b.load()
        assert b.recovery_decision.scan_start is ScanStart.CHECKPOINT_FILE
        assert len(all_bodies(b)) == 30
        asyncio.run(b.shutdown())


def test_truncate_dirty_drops_tail_everywhere():
    disk = SimDisk()
    s = open_store(disk)
    rs = put(s, 20, qid=0)
    s.set_master_epoch(1, 0)
    s.set_master_epoch(2, rs[15].phys_offset + 1)
    s.truncate_dirty(rs[10].phys_offset)
    assert s.max_phys_offset == rs[10].phys_offset == s.confirm_offset
    assert s.get_max_offset_in_queue("T", 0) == 10
    assert s.master_epoch == 1
    assert s.look_message_by_offset(rs[12].phys_offset) is None
    assert put(s, 1, start=50, qid=0)[0].queue_offset == 10
    assert len(s.query_message("T", "k12", 10, 0, 1 << 62).buffers) == 0
    shutdown(s)
    s2 = open_store(disk)
    assert len(bodies(s2, 0)) == 11 and s2.master_epoch == 1
    shutdown(s2)


def test_truncate_dirty_then_reappend_then_crash_is_not_mistaken_for_corruption():
    for seed in range(8):
        disk = SimDisk(seed)
        s = open_store(disk)
        rs = put(s, 20, qid=0)
        flush(s)
        s._flush_derived_and_checkpoint()  # checkpoint says: flushed up to rs[-1]
        s.truncate_dirty(rs[10].phys_offset)
        put(s, 5, start=100, qid=0)  # re-appended, unflushed: any subset may survive
        disk.crash("subset")
        s2 = open_store(disk)
        got = bodies(s2, 0)
        assert got[:10] == [b"%06d" % i for i in range(10)] and len(got) <= 15
        assert s2.recovery_decision.tail_action is not TailAction.REFUSE
