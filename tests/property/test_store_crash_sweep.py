"""Deterministic crash sweep: run a SYNC_FLUSH workload on SimDisk, crash at every k-th write boundary
(drop / tear / subset) or flip a bit, recover, and check: acknowledged (flushed) messages are present, the
visible log is a prefix of what was appended with nothing after the first invalid record, and ConsumeQueue
and index rebuild identically from the CommitLog."""

import asyncio
import random

import pytest

from orbitmq.base.errors import CorruptionError
from orbitmq.model.record import decode_record
from orbitmq.store import GetStatus, MessageInner, MessageStore, StoreConfig
from orbitmq.store.recovery import RecordKind, check_record
from orbitmq.testing.sim_disk import SimDisk

QUEUES = 3


class Clock:
    def __init__(self):
        self.t = 1_700_000_000_000

    def now_ms(self):
        self.t += 7
        return self.t

    def monotonic_ms(self):
        return 0


def config():
    return StoreConfig("/s", mapped_file_size_commitlog=4096, mapped_file_size_consume_queue=20 * 8,
                       max_message_size=2048, max_hash_slot_num=16, max_index_num=64,
                       flush_disk_type="SYNC_FLUSH")


def workload(disk, seed, n_ops=24, shutdown=False):
    """Returns (bodies in append order, [(write_count_when_acked, body)])."""
    rng = random.Random(seed)
    s = MessageStore(config(), disk=disk, clock=Clock())
    s.load()
    appended, acked = [], []

    async def one(i):
        body = b"m%04d-" % i + bytes([65 + i % 26]) * rng.randrange(20, 400)
        props = {"TAGS": f"T{i % 2}", "KEYS": f"k{i}"}
        wait = rng.random() < 0.8
        if not wait:
            props["WAIT"] = "false"
        r = await s.put_message(MessageInner("T", i % QUEUES, body, props))
        if r.ok:
            appended.append((r.phys_offset, body))
            if wait:
                acked.append((disk.write_count, body))

    async def go():
        i = 0
        while i < n_ops:
            k = rng.choice((1, 1, 3))  # sometimes concurrent puts share one group commit
            await asyncio.gather(*(one(i + j) for j in range(k)))
            i += k
            if rng.random() < 0.3:
                s._flush_derived_and_checkpoint()
        if shutdown:
            await s.shutdown()

    asyncio.run(go())
    appended.sort()
    return [b for _, b in appended], acked


def visible_records(s):
    """(phys, body, topic, queue_id, queue_offset) of every record served through the ConsumeQueues."""
    out = []
    for qid in range(QUEUES):
        off = s.get_min_offset_in_queue("T", qid)
        while True:
            g = s.get_message("g", "T", qid, off, 32)
            if g.status is not GetStatus.FOUND:
                break
            for buf in g.buffers:
                m = decode_record(bytes(buf), check_crc=True)
                out.append((m.phys_offset, m.body, m.queue_id, m.queue_offset))
            off = g.next_begin_offset
    return sorted(out)


def derived_snapshot(s):
    cq = {}
    for qid in range(QUEUES):
        q = s.cq_table.find("T", qid)
        cq[qid] = q.read(q.min_offset, 10_000) if q is not None else []
        while q is not None and len(cq[qid]) < q.max_offset - q.min_offset:
            cq[qid] += q.read(q.min_offset + len(cq[qid]), 10_000)
    keys = {}
    for body_i in range(40):
        keys[body_i] = sorted(bytes(b) for b in s.query_message("T", f"k{body_i}", 64, 0, 1 << 62).buffers)
    return cq, keys


def check_recovered(disk, appended, acked, crash_at):
    s = MessageStore(config(), disk=disk, clock=Clock())
    s.load()
    vis = visible_records(s)
    bodies = [b for _, b, _, _ in vis]
    # a prefix of the append order: nothing after a lost or invalid record is visible
    assert bodies == appended[: len(bodies)], "visible records are not a prefix of the appended ones"
    # acknowledged (flushed) before the crash point -> present
    must = [b for w, b in acked if w < crash_at]
    assert set(must) <= set(bodies), "an acknowledged message was lost"
    # per queue, queue offsets are 0..n-1 in phys order
    for qid in range(QUEUES):
        assert [qo for _, _, q, qo in vis if q == qid] == list(range(sum(1 for v in vis if v[2] == qid)))
    # the CommitLog ends exactly after the last visible record and the rest of its segment is zero
    end = s.max_phys_offset
    assert end >= (vis[-1][0] if vis else 0)
    seg = s.commitlog.segments.find(end) or s.commitlog.segments.last
    if seg is not None and end < seg.start_offset + seg.size:
        assert check_record(seg.buf, end - seg.start_offset, end, False)[0] is RecordKind.END
        assert bytes(seg.buf[end - seg.start_offset:]) == bytes(seg.start_offset + seg.size - end)
    snap = derived_snapshot(s)
    for _, body, _, _ in vis:  # every visible record is found through the index by its key
        key = "k" + str(int(body[1:5]))
        found = [decode_record(bytes(b)).body for b in s.query_message("T", key, 64, 0, 1 << 62).buffers]
        assert body in found, f"index lost key {key} after crash at write {crash_at}"
    asyncio.run(s.shutdown())
    # derived stores rebuild identically from the CommitLog alone
    disk.remove_tree("/s/consumequeue")
    disk.remove_tree("/s/index")
    r = MessageStore(config(), disk=disk, clock=Clock())
    r.load()
    cq, keys = derived_snapshot(r)
    assert cq == snap[0], "ConsumeQueues differ from a rebuild from the CommitLog"
    assert keys == snap[1], "index query results differ from a rebuild from the CommitLog"
    asyncio.run(r.shutdown())
    return len(bodies)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("mode", ["drop", "tear", "subset"])
def test_crash_at_every_kth_write_boundary(seed, mode):
    probe = SimDisk(seed)
    workload(probe, seed)
    total_writes = probe.write_count
    step = 3
    survived = []
    for crash_at in range(1, total_writes + 1, step):
        disk = SimDisk(seed)
        disk.arm_crash(crash_at, mode)
        appended, acked = workload(disk, seed)
        assert disk.crash_image is not None
        crashed = SimDisk.from_image(disk.crash_image, seed=seed)
        survived.append(check_recovered(crashed, appended, acked, crash_at))
    assert survived[-1] > survived[0]  # the sweep really covers growing amounts of data


@pytest.mark.parametrize("seed", range(6))
def test_bit_flip_in_a_record_body_truncates_or_refuses(seed):
    rng = random.Random(seed)
    disk = SimDisk(seed)
    appended, _ = workload(disk, seed, shutdown=True)
    s = MessageStore(config(), disk=disk, clock=Clock())
    s.load()
    records = [(p, len(r)) for p, r in s.commitlog.iter_records(0, s.max_phys_offset)]
    asyncio.run(s.shutdown())
    idx = len(records) - 1 if seed % 3 == 0 else rng.randrange(len(records) - 1)  # the last, or a middle one
    phys, size = records[idx]
    seg_start = phys - phys % 4096
    msg = decode_record(disk.durable_bytes(f"/s/commitlog/{seg_start:020d}")[phys - seg_start:], 0)
    body_pos = phys - seg_start + size - 2 - len(b"TAGS\x01T0\x02KEYS\x01k") - 1 - 1 - len(msg.body)
    body_pos += rng.randrange(len(msg.body) - 1)
    disk.corrupt(f"/s/commitlog/{seg_start:020d}", body_pos, bit=rng.randrange(8))
    last = idx == len(records) - 1
    try:
        s2 = MessageStore(config(), disk=disk, clock=Clock())
        s2.load()
    except CorruptionError as e:
        assert not last, "a damaged last record is truncated, not refused"
        assert f"phys offset {phys} " in str(e)
        return
    assert last, "damage in the middle of flushed data must be refused"
    assert s2.max_phys_offset == phys
    assert [b for _, b, _, _ in visible_records(s2)] == appended[:idx]
    asyncio.run(s2.shutdown())
