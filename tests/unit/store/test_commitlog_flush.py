"""Flush modes: group commit (many puts, few flushes), sync flush timeout, WAIT=false, async flush policy,
confirm offset in "flushed" mode."""

import asyncio
import tempfile

from orbitmq.base import marks
from orbitmq.store import GetStatus, MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.testing.sim_disk import SimDisk


class Clock:
    def __init__(self):
        self.t = 1_700_000_000_000
        self.mono = 0

    def now_ms(self):
        self.t += 1
        return self.t

    def monotonic_ms(self):
        return self.mono


def cfg(root="/s", **kw):
    base = dict(mapped_file_size_commitlog=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                max_message_size=64 * 1024, max_hash_slot_num=64, max_index_num=256)
    base.update(kw)
    return StoreConfig(root, **base)


def msg(i=0, wait=True):
    props = {"TAGS": "A", "KEYS": f"k{i}"}
    if not wait:
        props["WAIT"] = "false"
    return MessageInner("T", 0, b"m%d" % i, props)


def test_sync_flush_derives_flushed_confirm_mode():
    assert cfg(flush_disk_type="SYNC_FLUSH").derive().confirm_offset_mode == "flushed"
    assert cfg().derive().confirm_offset_mode == "written"
    assert cfg(flush_disk_type="SYNC_FLUSH", confirm_offset_mode="written").derive().confirm_offset_mode == "written"


def test_group_commit_many_concurrent_puts_few_flushes_sim():
    async def main():
        disk = SimDisk()
        s = MessageStore(cfg(flush_disk_type="SYNC_FLUSH"), disk=disk, clock=Clock())
        s.load()
        before = disk.flush_count
        results = await asyncio.gather(*(s.put_message(msg(i)) for i in range(100)))
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert s.flusher.flush_count == 1
        assert disk.flush_count - before == 1  # one segment range flushed once for 100 puts
        assert disk.pending_writes("/s/commitlog") == 0 < disk.pending_writes()
        assert s.flushed_offset == s.max_phys_offset == s.confirm_offset
        await s.shutdown()

    asyncio.run(main())


def test_group_commit_with_real_mmap_disk_in_thread():
    async def main(root):
        s = MessageStore(cfg(root, flush_disk_type="SYNC_FLUSH"))
        s.load()
        await s.start()
        results = await asyncio.gather(*(s.put_message(msg(i)) for i in range(200)))
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert 1 <= s.flusher.flush_count <= 10, s.flusher.flush_count
        g = s.get_message("g", "T", 0, 0, 32)
        assert g.status is GetStatus.FOUND and g.msg_count == 32
        await s.shutdown()

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(main(d))


class SlowDisk(SimDisk):
    flush_in_thread = True

    def __init__(self):
        super().__init__()
        self.flush_delay_s = 0.3


def test_sync_flush_timeout_keeps_message():
    async def main():
        s = MessageStore(cfg(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=50,
                             confirm_offset_mode="written"), disk=SlowDisk(), clock=Clock())
        s.load()
        n = marks.count("sync flush timeout")
        r = await s.put_message(msg(1))
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert marks.count("sync flush timeout") == n + 1
        assert s.look_message_by_offset(r.phys_offset).body == b"m1"  # message stays
        await s.shutdown()

    asyncio.run(main())


def test_wait_false_does_not_wait_for_flush():
    async def main():
        disk = SimDisk()
        s = MessageStore(cfg(flush_disk_type="SYNC_FLUSH"), disk=disk, clock=Clock())
        s.load()
        r = await s.put_message(msg(1, wait=False))
        assert r.status is PutStatus.PUT_OK
        assert s.flusher.flush_count == 0 and s.flushed_offset < s.max_phys_offset
        # not visible yet in "flushed" mode
        assert s.get_message("g", "T", 0, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        await s.flusher.flush()
        assert s.get_message("g", "T", 0, 0, 32).status is GetStatus.FOUND
        await s.shutdown()

    asyncio.run(main())


def test_async_flush_policy_least_pages_and_thorough_interval():
    async def main():
        clock = Clock()
        s = MessageStore(cfg(), disk=SimDisk(), clock=clock)
        s.load()
        await s.put_message(msg(1))
        assert not await s.flusher.flush_if_due(least_pages=4, thorough_interval_ms=10_000)
        for _i in range(200):
            await s.put_message(MessageInner("T", 0, b"x" * 100, {}))
        assert await s.flusher.flush_if_due(4, 10_000)  # >= 4 pages dirty
        await s.put_message(msg(2))
        assert not await s.flusher.flush_if_due(4, 10_000)
        clock.mono += 10_001
        assert await s.flusher.flush_if_due(4, 10_000)  # thorough interval elapsed
        assert s.flushed_offset == s.max_phys_offset
        await s.shutdown()

    asyncio.run(main())


def test_flushed_confirm_mode_hides_unflushed_records():
    async def main():
        seen = []
        s = MessageStore(cfg(confirm_offset_mode="flushed"), disk=SimDisk(), clock=Clock())
        s.load()
        s.add_dispatch_listener(lambda req: seen.append(req.queue_offset))
        r = await s.put_message(msg(1))
        assert r.ok and s.confirm_offset == 0 and seen == []
        assert s.look_message_by_offset(r.phys_offset) is None
        await s.flusher.flush()
        assert seen == [0] and s.confirm_offset == s.max_phys_offset
        assert s.look_message_by_offset(r.phys_offset).body == b"m1"
        await s.shutdown()

    asyncio.run(main())


def test_background_flush_task_runs_after_start():
    async def main():
        s = MessageStore(cfg(flush_interval_commitlog_ms=10, flush_commitlog_least_pages=0),
                         disk=SimDisk(), clock=Clock())
        s.load()
        await s.start()
        await s.put_message(msg(1))
        for _ in range(100):
            if s.flushed_offset == s.max_phys_offset:
                break
            await asyncio.sleep(0.01)
        assert s.flushed_offset == s.max_phys_offset
        await s.shutdown()

    asyncio.run(main())


def test_callback_waiters_released_once_each_by_the_covering_flush():
    """add_waiter: one call per waiter, True once a flush covers it; an out-of-order (lower) end offset is released
    by the same round; no task or timer per waiter, one expiry timer for all."""
    async def main():
        s = MessageStore(cfg(flush_disk_type="SYNC_FLUSH"), disk=SimDisk(), clock=Clock())
        s.load()
        calls: list[tuple[str, bool]] = []
        ends = []
        for i in range(5):
            r, end = s.put_messages_nowait([msg(i)])
            ends.append(end)
        for i in (4, 0, 2, 1, 3):  # arrival order not by offset
            s.flusher.add_waiter(ends[i], 5000, lambda ok, i=i: calls.append((f"w{i}", ok)))
        assert calls == [] and len(s.flusher._waiters) == 5
        for _ in range(100):
            if len(calls) == 5:
                break
            await asyncio.sleep(0.001)
        assert sorted(calls) == [(f"w{i}", True) for i in range(5)]
        assert s.flusher.flushed_offset >= ends[4] and s.flusher._waiters == []
        s.flusher.add_waiter(ends[0], 5000, lambda ok: calls.append(("covered", ok)))
        assert calls[-1] == ("covered", True)  # already covered: called at once
        await s.shutdown()

    asyncio.run(main())


def test_callback_waiters_expire_by_their_own_deadline_and_failures_release_all():
    async def main():
        s = MessageStore(cfg(flush_disk_type="SYNC_FLUSH", confirm_offset_mode="written"), disk=SlowDisk(),
                         clock=Clock())
        s.load()
        calls: list[tuple[str, bool]] = []
        _, e1 = s.put_messages_nowait([msg(1)])
        s.flusher.add_waiter(e1, 2000, lambda ok: calls.append(("long", ok)))
        _, e2 = s.put_messages_nowait([msg(2)])
        s.flusher.add_waiter(e2, 40, lambda ok: calls.append(("short", ok)))
        await asyncio.sleep(0.15)  # the 40 ms waiter expired, alone, while the 300 ms flush runs
        assert calls == [("short", False)]
        await asyncio.sleep(0.5)
        assert ("long", True) in calls and len(calls) == 2  # each called exactly once
        # a failing flush answers every waiter False (SERVICE_NOT_AVAILABLE: never a success after a failed
        # fsync), data stays written and readable, the store turns read-only
        s.disk.flush_delay_s = 0

        def boom(*_a):
            raise OSError(5, "EIO")
        orig = s.flusher._flush_once

        async def failing(loop):
            boom()
        s.flusher._flush_once = failing
        results = []
        for i in range(3):
            r, end = s.put_messages_nowait([msg(10 + i)])
            assert s.when_put_flushed(r, end, results.append)
        for _ in range(100):
            if len(results) == 3:
                break
            await asyncio.sleep(0.005)
        assert [r.status for r in results] == [PutStatus.SERVICE_NOT_AVAILABLE] * 3
        s.flusher._flush_once = orig
        assert s.read_only_reason and s.put_messages_nowait([msg(20)])[0].status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.look_message_by_offset(results[0].phys_offset).body == b"m10"
        await s.shutdown()

    asyncio.run(main())
