"""Store side of replication: a slave store fed by append_raw mirrors the master byte for byte and builds its
own ConsumeQueue; the SYNC_MASTER replica gate (visibility + waits) — driven by the sans-IO HA cores, no sockets."""

import asyncio

import pytest

from orbitmq.base.errors import StoreError
from orbitmq.replication import EpochCache, HAMaster, HASlave, Verdict
from orbitmq.replication.frames import DataDecoder, encode_data
from orbitmq.store import GetStatus, MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.testing.sim_disk import SimDisk

SEG = 16 * 1024


class Clock:
    def __init__(self):
        self.t = 1_700_000_000_000

    def now_ms(self):
        self.t += 1
        return self.t

    def monotonic_ms(self):
        return 0


def make(root):
    s = MessageStore(StoreConfig(root, mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 100,
                                 max_message_size=4096, max_hash_slot_num=64, max_index_num=512),
                     disk=SimDisk(), clock=Clock())
    s.load()
    return s


def put_n(store, n, topic="T", start=0):
    for i in range(start, start + n):
        r, _ = store.put_messages_nowait([MessageInner(topic, i % 2, b"m%05d" % i + b"." * 150, {"KEYS": f"k{i}"})])
        assert r.status is PutStatus.PUT_OK


def pump(master_store, slave_store, batch=700, epoch=1):
    """Run HAMaster -> frames -> HASlave -> append_raw until the slave caught up; returns the HAMaster."""
    m = HAMaster(epoch, SEG, batch_size=batch)
    sl = HASlave(EpochCache(slave_store.epochs.entries))
    sid = m.on_connect("slave", 0)
    m.on_report(sid, slave_store.max_phys_offset, master_store.max_phys_offset, 0)
    dec = DataDecoder()
    while (chunk := m.next_chunk(sid, master_store.max_phys_offset, 0)) is not None:
        start, size = chunk
        data = master_store.read_commitlog(start, size)
        m.on_sent(sid, start, len(data), 0)
        for f in dec.feed(encode_data(start, epoch, data)):
            verdict, new_epoch = sl.on_frame(f, slave_store.max_phys_offset, 0)
            assert verdict is Verdict.APPEND
            if new_epoch:
                slave_store.set_master_epoch(f.epoch, f.phys_offset)
            slave_store.append_raw(f.phys_offset, f.data)
        m.on_report(sid, slave_store.max_phys_offset, master_store.max_phys_offset, 0)
    return m


def all_bodies(store, topic="T"):
    out = []
    for q in (0, 1):
        off = 0
        while True:
            g = store.get_message("g", topic, q, off, 32)
            if g.status is not GetStatus.FOUND:
                break
            out += [bytes(b) for b in g.buffers]
            off = g.next_begin_offset
    return sorted(out)


def test_slave_mirrors_the_commitlog_across_segments_and_builds_its_own_queues():
    master, slave = make("/m"), make("/s")
    put_n(master, 1)
    pump(master, slave)  # the slave joins while the master is on its first segment
    put_n(master, 299, start=1)  # ~50 KiB: several segments with blank fillers
    pump(master, slave, batch=700)  # a new connection; 700-byte chunks split records
    assert slave.max_phys_offset == master.max_phys_offset
    for seg_m, seg_s in zip(master.commitlog.segments, slave.commitlog.segments, strict=True):
        assert bytes(seg_m.buf[: seg_m.wrote_position]) == bytes(seg_s.buf[: seg_s.wrote_position])
    assert all_bodies(slave) == all_bodies(master)
    assert slave.get_max_offset_in_queue("T", 0) == 150
    assert slave.commitlog.topic_queue_table["T-1"] == 150  # ready to take writes after a role change
    assert slave.master_epoch == 1
    assert slave.query_message("T", "k7", 4, 0, 2**62).buffers


def test_an_empty_slave_starts_at_the_masters_last_segment():
    master, slave = make("/m"), make("/s")
    put_n(master, 300)
    m = pump(master, slave)
    last_start = master.commitlog.segments.last.start_offset
    assert slave.min_phys_offset == last_start
    assert m.confirm_offset == master.max_phys_offset


def test_append_raw_refuses_a_gap_or_a_misaligned_start():
    master, slave = make("/m"), make("/s")
    put_n(master, 10)
    with pytest.raises(StoreError):
        slave.append_raw(100, master.read_commitlog(100, 50))
    data = master.read_commitlog(0, 500)
    slave.append_raw(0, data)
    with pytest.raises(StoreError):
        slave.append_raw(600, b"x")


def test_sync_master_gate_hides_unreplicated_messages_and_waits_resolve_in_one_confirm():
    async def go():
        master, slave = make("/m"), make("/s")
        put_n(master, 3)  # before the gate: visible
        hm = HAMaster(1, SEG)
        master.replica.set_policy(wait_ms=2000, gate_visibility=True, available=hm.is_slave_ok)
        sid = hm.on_connect("s", 0)
        hm.on_report(sid, 0, master.max_phys_offset, 0)
        results = []
        for i in range(5):
            r, end = master.put_messages_nowait([MessageInner("T", 0, b"x%d" % i, {})])
            assert end > 0
            results.append(asyncio.ensure_future(master.wait_put_flushed(r, end)))
        await asyncio.sleep(0)
        assert master.get_max_offset_in_queue("T", 0) == 2  # 3 old ones: queue 0 holds 0 and 2
        assert not any(f.done() for f in results)
        pump(master, slave)
        hm.on_report(sid, slave.max_phys_offset, master.max_phys_offset, 0)
        master.replica.on_replicated(hm.confirm_offset)
        done = await asyncio.gather(*results)
        assert [r.status for r in done] == [PutStatus.PUT_OK] * 5
        assert master.get_max_offset_in_queue("T", 0) == 7
        assert master.confirm_offset == master.max_phys_offset
    asyncio.run(go())


def test_sync_master_answers_slave_not_available_and_flush_slave_timeout():
    async def go():
        master = make("/m")
        hm = HAMaster(1, SEG)
        master.replica.set_policy(wait_ms=50, gate_visibility=True, available=hm.is_slave_ok)
        r = await master.put_message(MessageInner("T", 0, b"x", {}))
        assert r.status is PutStatus.SLAVE_NOT_AVAILABLE
        sid = hm.on_connect("s", 0)
        hm.on_report(sid, 0, master.max_phys_offset, 0)
        r = await master.put_message(MessageInner("T", 0, b"y", {}))
        assert r.status is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert master.get_max_offset_in_queue("T", 0) == 0  # stored but not visible
        master.replica.on_replicated(master.max_phys_offset)
        assert master.get_max_offset_in_queue("T", 0) == 2
        r = await master.put_message(MessageInner("T", 0, b"z", {"WAIT": "false"}))
        assert r.status is PutStatus.PUT_OK
    asyncio.run(go())
