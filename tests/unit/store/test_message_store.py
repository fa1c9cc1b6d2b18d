"""MessageStore facade: get_message status table and scan limits, lookups by offset/time/key, retention,
disk-full refusal, topic deletion, listeners."""

import asyncio

from orbitmq.model.record import iter_records
from orbitmq.model.tags import tag_code
from orbitmq.store import GetStatus, MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.store.retention import decide_clean
from orbitmq.testing.sim_disk import SimDisk

SEG = 16 * 1024
HOUR_MS = 3600 * 1000


class Clock:
    def __init__(self):
        self.t = 1_700_000_000_000
        self.step = 10
        self.mono = 0

    def now_ms(self):
        self.t += self.step
        return self.t

    def monotonic_ms(self):
        return self.mono


def make(disk=None, clock=None, **kw):
    base = dict(mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 100,
                max_message_size=4096, max_hash_slot_num=64, max_index_num=512)
    base.update(kw)
    s = MessageStore(StoreConfig("/s", **base), disk=disk or SimDisk(), clock=clock or Clock())
    s.load()
    return s


def put(s, topic="T", qid=0, body=b"b", **props):
    return asyncio.run(s.put_message(MessageInner(topic, qid, body, props)))


def put_many(s, n, topic="T", qid=0, size=100, tags=lambda i: "A"):
    async def go():
        return [await s.put_message(MessageInner(topic, qid, b"%05d" % i + b"." * (size - 5),
                                                 {"TAGS": tags(i), "KEYS": f"key{i} other{i}"}))
                for i in range(n)]
    return asyncio.run(go())


def decoded(g):
    return list(iter_records(b"".join(bytes(b) for b in g.buffers)))


def test_status_table_for_unknown_empty_and_out_of_range_offsets():
    s = make()
    g = s.get_message("g", "T", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    put_many(s, 5)
    g = s.get_message("g", "T", 0, 5, 32)
    assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5, 0, 5)
    g = s.get_message("g", "T", 0, 9, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)  # min == 0 -> min
    g = s.get_message("g", "T", 0, 2, 32)
    assert g.status is GetStatus.FOUND and g.msg_count == 3 and g.next_begin_offset == 5
    assert [m.queue_offset for m in decoded(g)] == [2, 3, 4]
    assert isinstance(g.buffers[0], memoryview)
    assert g.size_bytes == sum(len(b) for b in g.buffers)
    assert s.get_max_offset_in_queue("T", 0) == 5 and s.get_min_offset_in_queue("T", 0) == 0
    assert s.get_max_offset_in_queue("nope", 0) == 0


def test_batch_limits_max_nums_and_in_memory_caps():
    s = make()
    put_many(s, 60)
    g = s.get_message("g", "T", 0, 0, 10)
    assert g.msg_count == 10 and g.next_begin_offset == 10
    g = s.get_message("g", "T", 0, 0, 100)
    assert g.msg_count == 32 and g.next_begin_offset == 32  # in-memory count cap
    assert not g.suggest_pull_from_slave


def test_on_disk_caps_and_suggest_slave():
    s = make(physical_memory_bytes=1000)  # 40 % of 1000 bytes: everything old is "on disk"
    put_many(s, 40)
    g = s.get_message("g", "T", 0, 0, 32)
    assert g.msg_count == 8 and g.suggest_pull_from_slave
    assert not s.is_in_memory(0) and s.is_in_memory(s.max_phys_offset)


def test_tag_filter_and_no_matched_message():
    s = make()
    put_many(s, 10, tags=lambda i: "A" if i % 3 == 0 else "B")
    want = tag_code("A")
    g = s.get_message("g", "T", 0, 0, 32, tag_filter=lambda code: code == want)
    assert [m.body[:5] for m in decoded(g)] == [b"00000", b"00003", b"00006", b"00009"]
    assert g.next_begin_offset == 10
    g = s.get_message("g", "T", 0, 0, 32, tag_filter=lambda code: False)
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 10


def test_message_was_removing_then_offset_too_small_after_commitlog_deletion():
    s = make()
    put_many(s, 400, size=200)  # 4+ CommitLog segments; CQ segments hold 100 entries
    assert len(s.commitlog.segments) >= 4
    # CommitLog segments gone but the CQ not yet corrected: its entries point at removed data
    s.commitlog.segments.delete_first()
    s.commitlog.segments.delete_first()
    min_phys = s.min_phys_offset
    g = s.get_message("g", "T", 0, 0, 32)  # CQ segment 0 (entries 0..99) lies wholly in removed data
    assert (g.status, g.msg_count, g.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, 0, 100)
    g = s.get_message("g", "T", 0, 100, 32)  # skips the removed rest, serves what is left
    assert g.status is GetStatus.FOUND and decoded(g)[0].phys_offset >= min_phys
    s._on_segments_deleted(min_phys)
    new_min = s.get_min_offset_in_queue("T", 0)
    assert new_min > 100
    g = s.get_message("g", "T", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, new_min)
    g = s.get_message("g", "T", 0, 500, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 400)  # min > 0 -> max


def test_retention_deletes_expired_at_delete_hour_and_under_pressure():
    clock = Clock()
    disk = SimDisk(now_ms=lambda: clock.t)
    s = make(disk, clock, file_reserved_time_hours=1, delete_when="04")
    put_many(s, 400, size=200)
    n = len(s.commitlog.segments)
    clock.t += 2 * HOUR_MS  # everything expired; the last segment is always kept
    s.retention.hour_of = lambda ms: 10
    assert s.retention.run_once() == 0  # wrong hour, disk fine
    s.retention.hour_of = lambda ms: 4
    assert s.retention.run_once() == n - 1
    assert len(s.commitlog.segments) == 1
    assert s.get_min_offset_in_queue("T", 0) == s.get_max_offset_in_queue("T", 0) - _in_last_segment(s)
    # disk pressure outside the delete hour: expired files go too
    put_many(s, 200, size=200)
    clock.t += 2 * HOUR_MS
    s.retention.hour_of = lambda ms: 10
    disk.usage = 0.80
    assert s.retention.run_once() > 0


def _in_last_segment(s):
    last = s.commitlog.segments.last
    return sum(1 for _ in s.commitlog.iter_records(last.start_offset, last.end_offset))


def test_force_clean_and_disk_full_refuses_writes():
    clock = Clock()
    disk = SimDisk(now_ms=lambda: clock.t)
    s = make(disk, clock)
    put_many(s, 300, size=200)
    n = len(s.commitlog.segments)
    disk.usage = 0.95
    s.retention.hour_of = lambda ms: 10
    deleted = s.retention.run_once()  # nothing expired (72 h) but > 85 %: oldest go anyway
    assert deleted == min(n - 1, 10) and s.retention.disk_full
    assert put(s).status is PutStatus.SERVICE_NOT_AVAILABLE
    disk.usage = 0.5
    s.retention.run_once()
    assert put(s).status is PutStatus.PUT_OK


def test_decide_clean_thresholds():
    c = StoreConfig("/s", delete_when="04;16")
    assert decide_clean(c, 16, 0.1).time_to_delete
    d = decide_clean(c, 3, 0.76)
    assert (d.time_to_delete, d.space_to_delete, d.force, d.disk_full) == (False, True, False, False)
    d = decide_clean(c, 3, 0.91)
    assert d.force and d.disk_full


def test_offset_by_time_and_earliest_time():
    clock = Clock()
    clock.step = 1000
    s = make(clock=clock)
    rs = put_many(s, 10)
    ts = [r.store_timestamp for r in rs]
    assert s.get_earliest_message_time("T", 0) == ts[0]
    assert s.get_offset_in_queue_by_time("T", 0, ts[4]) == 4
    assert s.get_offset_in_queue_by_time("T", 0, ts[4] + 100) == 4
    assert s.get_offset_in_queue_by_time("T", 0, ts[4] + 900) == 5
    assert s.get_offset_in_queue_by_time("X", 0, ts[4]) == 0
    assert s.get_earliest_message_time("X", 0) == -1
    assert s.get_message_store_timestamp("T", 0, 3) == ts[3]


def test_look_and_select_by_offset():
    s = make()
    rs = put_many(s, 3)
    m = s.look_message_by_offset(rs[1].phys_offset)
    assert m.queue_offset == 1 and m.body.startswith(b"00001")
    raw = s.select_one_message_by_offset(rs[1].phys_offset)
    assert isinstance(raw, bytes) and len(raw) == rs[1].wrote_bytes
    assert s.look_message_by_offset(rs[1].phys_offset + 1) is None
    assert s.look_message_by_offset(s.max_phys_offset) is None
    assert rs[1].msg_ids[0].endswith(f"{rs[1].phys_offset:016X}")


def test_query_message_by_key_and_uniq_key_filters_real_key_topic_time():
    s = make()
    rs = put_many(s, 5)
    put(s, topic="U", body=b"u", KEYS="key1")
    put(s, body=b"uniq", UNIQ_KEY="ABCDEF")
    q = s.query_message("T", "key1", 32, 0, 1 << 62)
    assert [m.body[:5] for m in iter_records(b"".join(q.buffers))] == [b"00001"]
    assert q.index_last_update_phyoffset > 0 and q.index_last_update_timestamp > 0
    assert [m.body for m in iter_records(b"".join(s.query_message("T", "ABCDEF", 32, 0, 1 << 62).buffers))] == [
        b"uniq"]
    assert s.query_message("T", "key1", 32, 0, rs[0].store_timestamp).buffers == []  # time window
    assert s.query_message("T", "other3", 32, 0, 1 << 62).buffers != []


def test_delete_topics_resets_queue_offsets():
    s = make()
    put_many(s, 3, topic="A")
    put_many(s, 2, topic="B")
    s.delete_topics({"A"})
    assert s.get_max_offset_in_queue("A", 0) == 0 and s.get_max_offset_in_queue("B", 0) == 2
    assert "A-0" not in s.commitlog.topic_queue_table
    assert put(s, topic="A").queue_offset == 0


def test_dispatch_listener_sees_each_visible_record_and_errors_are_contained():
    s = make()
    seen = []
    s.add_dispatch_listener(lambda r: seen.append((r.topic, r.queue_offset, r.keys)))
    s.add_dispatch_listener(lambda r: 1 / 0)
    put_many(s, 2)
    assert seen == [("T", 0, "key0 other0"), ("T", 1, "key1 other1")]


def test_transaction_half_messages_are_not_in_consume_queue():
    s = make()
    asyncio.run(s.put_message(MessageInner("T", 0, b"half", {"KEYS": "h"}, sys_flag=0x4)))
    put(s, body=b"normal")
    g = s.get_message("g", "T", 0, 0, 32)
    assert [m.body for m in decoded(g)] == [b"normal"]
    assert len(s.query_message("T", "h", 32, 0, 1 << 62).buffers) == 1  # prepared is indexed


def test_runtime_info_and_put_after_shutdown():
    s = make()
    put(s)
    info = s.runtime_info()
    assert info["commitLogMaxOffset"] == str(s.max_phys_offset) and info["flushDiskType"] == "ASYNC_FLUSH"
    asyncio.run(s.shutdown())
    assert put(s).status is PutStatus.SERVICE_NOT_AVAILABLE


def test_empty_batch_is_illegal_and_batch_is_one_append():
    s = make()
    assert asyncio.run(s.put_messages([])).status is PutStatus.MESSAGE_ILLEGAL
    r = asyncio.run(s.put_messages([MessageInner("T", 0, b"%d" % i, {}) for i in range(4)]))
    assert r.ok and r.msg_count == 4 and r.queue_offset == 0 and len(r.msg_ids) == 4
    assert s.get_max_offset_in_queue("T", 0) == 4


def test_background_task_crash_stops_writes_and_keeps_abort_file():
    async def main():
        disk = SimDisk()
        s = make(disk, clean_interval_ms=5, flush_interval_consume_queue_ms=5)
        await s.start()
        assert (await s.put_message(MessageInner("T", 0, b"a", {}))).ok

        def boom():
            raise OSError("disk went away")

        s.retention.run_once = boom
        for _ in range(100):
            if s.background_error is not None:
                break
            await asyncio.sleep(0.01)
        assert isinstance(s.background_error, OSError)
        assert "disk went away" in s.runtime_info()["backgroundError"]
        assert (await s.put_message(MessageInner("T", 0, b"b", {}))).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert disk.read_small("/s/checkpoint") is not None
        await s.shutdown()
        assert disk.exists("/s/abort")  # next start runs crash recovery

    asyncio.run(main())
