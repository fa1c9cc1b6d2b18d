"""CommitLog append/read: offsets, blank filler and roll, batches, size limits, transaction records."""

from orbitmq.model.record import BLANK_MAGIC, decode_record, read_size_magic
from orbitmq.store.commitlog import CommitLog
from orbitmq.store.config import StoreConfig
from orbitmq.store.recovery import RecordKind
from orbitmq.store.results import MessageInner, PutStatus
from orbitmq.testing.sim_disk import SimDisk

SEG = 8192


class Clock:
    def __init__(self, t=1_700_000_000_000):
        self.t = t

    def now_ms(self):
        self.t += 1
        return self.t

    def monotonic_ms(self):
        return self.t


def make(seg=SEG, **kw):
    cfg = StoreConfig("/s", mapped_file_size_commitlog=seg, max_message_size=kw.pop("max_message_size", 1024), **kw)
    cl = CommitLog("/s", cfg.derive(), SimDisk(), Clock())
    cl.load()
    return cl


def msg(topic="T", qid=0, body=b"hello", **props):
    return MessageInner(topic, qid, body, dict(props) or {"TAGS": "A"})


def test_append_assigns_offsets_and_reads_back():
    cl = make()
    a1 = cl.append([msg()])
    a2 = cl.append([msg(qid=1)])
    a3 = cl.append([msg()])
    assert a1.result.status is PutStatus.PUT_OK
    assert a1.result.phys_offset == 0
    assert a2.result.phys_offset == a1.end_offset
    assert [a.result.queue_offset for a in (a1, a2, a3)] == [0, 0, 1]
    rec = cl.read_record(a3.result.phys_offset)
    m = decode_record(rec, check_crc=True)
    assert (m.topic, m.queue_id, m.queue_offset, m.phys_offset, m.body) == ("T", 0, 1, a3.result.phys_offset, b"hello")
    assert m.store_timestamp == a3.result.store_timestamp
    assert a1.result.msg_ids[0] == "7F00000100002A9F" + "0" * 16
    assert cl.topic_queue_table == {"T-0": 2, "T-1": 1}
    assert a3.requests[0].tags_code == 65 and a3.requests[0].queue_offset == 1


def test_store_timestamps_never_decrease():
    cl = make()
    cl.clock.t = 5000
    a = cl.append([msg()])
    cl.clock.t = 100  # clock steps back
    b = cl.append([msg()])
    assert b.result.store_timestamp >= a.result.store_timestamp


def test_roll_writes_blank_filler_and_next_file_starts_at_segment_size():
    cl = make()
    body = b"x" * 900
    ends = []
    while len(cl.segments) < 2:
        ends.append(cl.append([msg(body=body)]))
    last = ends[-1]
    assert last.result.phys_offset == SEG
    first_seg = cl.segments.segments[0]
    filler_pos = ends[-2].end_offset
    size, magic = read_size_magic(first_seg.buf, filler_pos)
    assert magic == BLANK_MAGIC and size == SEG - filler_pos
    assert cl.scan(0, True) == (RecordKind.END, last.end_offset)
    assert cl.segments.segments[1].path.endswith("00000000000000008192")
    # records iterate across the blank
    offsets = [p for p, _ in cl.iter_records(0, cl.max_offset)]
    assert offsets == [a.result.phys_offset for a in ends]


def test_batch_gets_consecutive_queue_offsets_and_one_segment():
    cl = make(max_message_size=4000)
    cl.append([msg(body=b"y" * 3000)])
    cl.append([msg(body=b"y" * 3000)])
    batch = cl.append([msg(body=b"z" * 1000) for _ in range(3)])
    r = batch.result
    assert r.status is PutStatus.PUT_OK and r.msg_count == 3 and len(r.msg_ids) == 3
    assert r.phys_offset == SEG  # did not fit: whole batch moved to the next file
    assert [q.queue_offset for q in batch.requests] == [2, 3, 4]
    assert batch.end_offset - r.phys_offset == r.wrote_bytes


def test_size_limits():
    cl = make(max_message_size=1024)
    assert cl.append([msg(body=b"x" * 1025)]).result.status is PutStatus.MESSAGE_ILLEGAL
    assert cl.append([msg(topic="t" * 128)]).result.status is PutStatus.MESSAGE_ILLEGAL
    big = {"K": "v" * 40000}
    assert cl.append([MessageInner("T", 0, b"", big)]).result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    # a batch larger than a segment can never be stored
    batch = [msg(body=b"x" * 1000) for _ in range(9)]
    assert cl.append(batch).result.status is PutStatus.MESSAGE_ILLEGAL
    assert cl.max_offset == 0 and cl.topic_queue_table == {}


def test_prepared_and_rollback_records_do_not_advance_queue_offsets():
    cl = make()
    cl.append([msg()])
    prepared = MessageInner("T", 0, b"half", {}, sys_flag=0x4)
    rollback = MessageInner("T", 0, b"rb", {}, sys_flag=0xC)
    commit = MessageInner("T", 0, b"c", {}, sys_flag=0x8)
    assert cl.append([prepared]).result.queue_offset == 0
    assert cl.append([rollback]).result.queue_offset == 0
    assert cl.append([commit]).result.queue_offset == 1
    assert cl.topic_queue_table["T-0"] == 2


def test_read_bounds():
    cl = make()
    a = cl.append([msg()])
    assert cl.read(0, a.result.wrote_bytes) is not None
    assert cl.read(0, a.result.wrote_bytes + 1) is None
    assert cl.read_record(a.end_offset) is None
    assert cl.read_record(10 * SEG) is None
    assert cl.store_timestamp_at(0, a.result.wrote_bytes) == a.result.store_timestamp


def test_ipv6_hosts():
    cl = make()
    m = MessageInner("T", 0, b"v6", {}, born_host="[::1]:5000", store_host="[fe80::1]:10911")
    a = cl.append([m])
    d = decode_record(cl.read_record(0), check_crc=True)
    assert d.born_host == "[::1]:5000" and d.store_host == "[fe80::1]:10911"
    assert cl.store_timestamp_at(0, a.result.wrote_bytes) == a.result.store_timestamp
    assert cl.scan(0, True) == (RecordKind.END, a.end_offset)


def test_bad_host_is_illegal():
    cl = make()
    assert cl.append([MessageInner("T", 0, b"", {}, born_host="nohost:1")]).result.status is PutStatus.MESSAGE_ILLEGAL


def test_field_out_of_java_range_is_refused_without_taking_queue_offsets():
    cl = make()
    ok = cl.append([msg()])
    bad = MessageInner("T", 0, b"x", {"TAGS": "A"}, born_timestamp=2**63)  # beyond a Java long
    batch = [msg(), msg(), MessageInner("T", 0, b"y", {"TAGS": "A"}, flag=2**31)]  # third one beyond an int
    for refused in ([bad], batch):
        a = cl.append(refused)
        assert a.result.status is PutStatus.MESSAGE_ILLEGAL and a.requests == []
    assert cl.topic_queue_table == {"T-0": 1}  # nothing taken by the refused puts
    assert cl.max_offset == ok.end_offset  # nothing written past the last good record
    nxt = cl.append([msg()])
    assert nxt.result.queue_offset == 1 and nxt.result.phys_offset == ok.end_offset


def test_one_queue_batch_fast_path_writes_the_general_paths_bytes():
    def batch(n):
        return [MessageInner("T", 2, b"x" * (i + 1), {"TAGS": "A", "UNIQ_KEY": f"U{n}-{i}", "KEYS": "a b"}, i)
                for i in range(32)]

    fast, ref = make(seg=1 << 16), make(seg=1 << 16)
    fast.append([msg()]), ref.append([msg()])  # first sight of the hosts: packed by the general path
    for n in range(3):
        direct = fast._append_run(batch(n))
        assert direct is not None  # the batch took the fast path
        general = ref._append_general(batch(n))
        assert direct.result == general.result
        assert direct.requests == general.requests
        assert direct.result.msg_ids[5] == "7F00000100002A9F" + f"{direct.requests[5].phys_offset:016X}"
    assert fast.topic_queue_table == ref.topic_queue_table == {"T-0": 1, "T-2": 96}
    seg_f, seg_r = fast.segments.last, ref.segments.last
    assert seg_f.wrote_position == seg_r.wrote_position
    assert bytes(seg_f.buf[: seg_f.wrote_position]) == bytes(seg_r.buf[: seg_r.wrote_position])


def test_fast_path_declines_mixed_input_and_transaction_halves():
    cl = make()
    cl.append([msg()])
    assert cl._append_run([msg(), msg(qid=1)]) is None
    assert cl._append_run([msg(), msg(topic="U")]) is None
    half = msg()
    half.sys_flag = 0x4
    assert cl._append_run([half]) is None
    assert cl.topic_queue_table == {"T-0": 1} and cl.max_offset == cl.append([msg()]).result.phys_offset
