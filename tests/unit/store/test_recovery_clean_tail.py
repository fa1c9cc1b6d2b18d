"""A clean restart CRC-checks a bounded tail of the CommitLog (from a record boundary the ConsumeQueues give), not
the last three segments; corruption inside that tail is still found, and recovery progress is published."""

from __future__ import annotations

import asyncio
import re

import pytest

from orbitmq.base import marks
from orbitmq.base.errors import CorruptionError
from orbitmq.store import MessageInner, MessageStore, PutResult, StoreConfig
from orbitmq.store.recovery import RecordKind, RecoveryProgress, ScanStart, TailAction, validate_forward
from orbitmq.testing.sim_disk import SimDisk

SEG = 16 * 1024
CL = "/s/commitlog/"
TAIL = 3000  # bytes of tail checked in these tests (~11 records of ~270 bytes)


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def now_ms(self) -> int:
        self.t += 1000
        return self.t

    def monotonic_ms(self) -> int:
        return 0


def _store(disk: SimDisk, tail: int = TAIL) -> MessageStore:
    s = MessageStore(StoreConfig("/s", mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 50,
                                 max_message_size=4096, max_hash_slot_num=64, max_index_num=512),
                     disk=disk, clock=Clock())
    s.clean_check_tail_bytes = tail
    s.load()
    return s


def _fill(disk: SimDisk, n: int = 200) -> list[PutResult]:
    s = _store(disk)

    async def go() -> list[PutResult]:
        out = []
        for i in range(n):
            r = await s.put_message(MessageInner("T", i % 4, b"%06d" % i * 33, {"KEYS": f"k{i}"}))
            assert r.ok
            out.append(r)
        assert len(s.commitlog.segments) > 3  # the old rule would check three whole segments
        await s.shutdown()
        return out

    rs = asyncio.run(go())
    return rs


def _corrupt_body(disk: SimDisk, r: PutResult) -> None:
    phys = r.phys_offset
    seg_start = phys - phys % SEG
    disk.corrupt(CL + f"{seg_start:020d}", phys - seg_start + 120)  # a body byte: only the CRC catches it


def _validated(text: str) -> tuple[int, int]:
    found = re.findall(r"clean exit, validated the tail from phys (\d+), (\d+) bytes", text)
    assert len(found) == 1, text
    return int(found[0][0]), int(found[0][1])


def test_clean_restart_checks_only_a_bounded_tail(caplog: pytest.LogCaptureFixture) -> None:
    disk = SimDisk()
    rs = _fill(disk)
    end = rs[-1].phys_offset + rs[-1].wrote_bytes
    caplog.clear()
    with caplog.at_level("INFO", logger="orbitmq.store.message_store"):
        s = _store(disk)
    begin, n = _validated(caplog.text)
    starts = {r.phys_offset for r in rs}
    assert begin in starts  # a record boundary
    assert end - TAIL <= begin < end - TAIL + 400 and begin + n == end  # the first record at or after the target
    d = s.recovery_decision
    assert d is not None and d.scan_start is ScanStart.THIRD_LAST_FILE and d.tail_action is TailAction.ACCEPT
    assert s.max_phys_offset == end
    p = s.recovery_progress.fields()
    assert p["recoveryPhase"] == "done" and int(p["recoveryTotalBytes"]) <= TAIL
    assert s.runtime_info()["recoveryPhase"] == "done"
    # everything is still there, and the store goes on
    r = asyncio.run(s.put_message(MessageInner("T", 0, b"after", {})))
    assert r.ok and r.queue_offset == 50
    asyncio.run(s.shutdown())


def test_tail_zero_keeps_the_three_segment_check(caplog: pytest.LogCaptureFixture) -> None:
    disk = SimDisk()
    _fill(disk)
    caplog.clear()
    with caplog.at_level("INFO", logger="orbitmq.store.message_store"):
        s = _store(disk, tail=0)
    assert "clean exit, validated the tail" not in caplog.text
    assert re.search(r"scanned from segment \d+ to offset", caplog.text)
    asyncio.run(s.shutdown())


def test_corruption_inside_the_checked_tail_is_refused() -> None:
    disk = SimDisk()
    rs = _fill(disk)
    end = rs[-1].phys_offset + rs[-1].wrote_bytes
    victim = next(r for r in rs if end - TAIL // 2 <= r.phys_offset)  # inside the tail, records after it
    _corrupt_body(disk, victim)
    with pytest.raises(CorruptionError) as e:
        _store(disk)
    assert "refusing" in str(e.value) and str(victim.phys_offset) in str(e.value)


def test_corrupt_boundary_record_falls_back_to_the_full_check() -> None:
    """The record the ConsumeQueues name as the tail's start is itself damaged: the boundary is rejected and the
    last three segments are checked, which finds it (acknowledged data with valid records after it: refused)."""
    disk = SimDisk()
    rs = _fill(disk)
    end = rs[-1].phys_offset + rs[-1].wrote_bytes
    boundary = min((r for r in rs if r.phys_offset >= end - TAIL), key=lambda r: r.phys_offset)
    _corrupt_body(disk, boundary)
    before = marks.count("clean recovery tail boundary rejected")
    with pytest.raises(CorruptionError):
        _store(disk)
    assert marks.count("clean recovery tail boundary rejected") == before + 1


def test_torn_last_record_in_the_tail_is_truncated() -> None:
    disk = SimDisk()
    rs = _fill(disk)
    _corrupt_body(disk, rs[-1])
    s = _store(disk)
    d = s.recovery_decision
    assert d is not None and d.tail_action is TailAction.TRUNCATE
    assert s.max_phys_offset == rs[-1].phys_offset
    asyncio.run(s.shutdown())


def test_validate_forward_reports_progress_and_matches_the_commitlog_scan() -> None:
    disk = SimDisk()
    rs = _fill(disk)
    s = _store(disk, tail=0)
    segs = [(sg.start_offset, sg.buf) for sg in s.commitlog.segments.segments]
    seen: list[int] = []
    kind, stop = validate_forward(segs, 0, 0, True, seen.append, progress_step=1000)
    assert (kind, stop) == s.commitlog.scan(0, True)
    assert stop == s.max_phys_offset == rs[-1].phys_offset + rs[-1].wrote_bytes
    assert seen == sorted(seen) and len(seen) >= 10 and seen[-1] < stop
    assert kind is RecordKind.END
    asyncio.run(s.shutdown())


def test_recovery_progress_logs_at_a_bounded_rate() -> None:
    now = [100.0]
    lines: list[str] = []
    p = RecoveryProgress(lambda: now[0], lines.append, log_interval_s=5.0)
    p.begin()
    p.set_phase("validate", 1000)
    for i in range(100):
        now[0] += 0.5  # 50 s of progress calls
        p.advance(i * 10)
    assert 9 <= len(lines) <= 10 and "validate" in lines[0] and "%" in lines[0]
    f = p.fields()
    assert f["recoveryPhase"] == "validate" and f["recoveryScannedBytes"] == "990"
    assert f["recoveryTotalBytes"] == "1000" and f["recoveryElapsedMs"] == "50000"
    p.done()
    assert p.timings() == "open 0.00 s, validate 50.00 s"
    now[0] += 10
    assert p.fields()["recoveryPhase"] == "done" and p.fields()["recoveryElapsedMs"] == "50000"


def test_consume_queue_nonzero_extent_matches_rstrip() -> None:
    """The chunked search for a ConsumeQueue segment's written extent (recovery, twice per queue) agrees with the
    plain definition on sizes around its 64 KiB chunk, with non-zero bytes anywhere or nowhere."""
    import random

    from orbitmq.store.consume_queue import _nonzero_extent

    rnd = random.Random(16)
    for _ in range(1500):
        n = rnd.choice([0, 1, 20, 65535, 65536, 65537, 200_000])
        b = bytearray(n)
        for _k in range(rnd.randint(0, 3)):
            if n:
                b[rnd.randrange(n)] = rnd.randint(1, 255)
        start = rnd.randint(0, n)
        end = rnd.randint(start, n)
        want = start + len(bytes(b[start:end]).rstrip(b"\x00"))
        assert _nonzero_extent(memoryview(b), start, end) == want, (n, start, end)


def _valid_prefix_reference(buf: bytes, size_bytes: int, prev_end: int) -> tuple[int, int]:
    """The entry-by-entry definition of ConsumeQueue recovery's valid prefix."""
    from orbitmq.store.consume_queue import FILLER_SIZE
    from orbitmq.store.layout import CQ_ENTRY

    ok = 0
    for phys, size, _tags in CQ_ENTRY.iter_unpack(buf[: size_bytes - size_bytes % 20]):
        if phys < 0 or size <= 0:
            break
        if size != FILLER_SIZE:
            if phys + size <= prev_end:
                break
            prev_end = phys + size
        ok += 20
    return ok, prev_end


def test_consume_queue_valid_prefix_matches_the_entry_by_entry_definition() -> None:
    """The column (fast) path of _valid_prefix and its entry loop agree with the definition: valid runs, fillers,
    a stale (non-increasing) entry, a negative offset, a zero size, a torn tail, an earlier prev_end."""
    import random

    from orbitmq.store.consume_queue import FILLER_SIZE, _valid_prefix
    from orbitmq.store.layout import CQ_ENTRY

    rnd = random.Random(1616)
    for _ in range(400):
        n = rnd.randint(0, 120)
        seg = 20 * (n + rnd.randint(0, 5))
        buf = bytearray(seg)
        phys = rnd.randint(0, 1000)
        for i in range(n):
            size = rnd.randint(1, 300)
            CQ_ENTRY.pack_into(buf, 20 * i, phys, size, rnd.randint(-5, 5))
            phys += size + rnd.randint(0, 50)
        what = rnd.randint(0, 6)
        if n and what == 1:
            CQ_ENTRY.pack_into(buf, 20 * rnd.randrange(n), 0, FILLER_SIZE, 0)
        elif n > 1 and what == 2:
            i = rnd.randrange(1, n)
            CQ_ENTRY.pack_into(buf, 20 * i, 0, 10, 0)  # stale: ends before the previous entry
        elif n and what == 3:
            CQ_ENTRY.pack_into(buf, 20 * rnd.randrange(n), -1, 10, 0)
        elif n and what == 4:
            CQ_ENTRY.pack_into(buf, 20 * rnd.randrange(n), 5, 0, 0)
        elif n and what == 5:
            i = rnd.randrange(n)
            buf[20 * i + rnd.randrange(20)] = 0  # a torn byte
        prev_end = rnd.choice([-1, 0, phys // 2, phys + 1])
        want = _valid_prefix_reference(bytes(buf), seg, prev_end)
        assert _valid_prefix(memoryview(buf), seg, prev_end) == want, (n, what, prev_end)


@pytest.mark.parametrize("bad", [-1, -(1 << 31), 3, 1 << 20])
def test_index_repair_slots_finds_negative_and_too_large_slots(bad: int) -> None:
    """The crash-time slot check reads slots unsigned (one max() over them): a negative slot is caught as well as
    one at or past the entry count, and both are pointed back at their chain's newest entry."""
    import struct

    from orbitmq.store.dispatch import DispatchRequest
    from orbitmq.store.index_file import IndexService

    svc = IndexService("/sim/index", 1, 20, SimDisk(seed=1))  # one slot: one chain
    for phys in (100, 200):
        svc.dispatch(DispatchRequest("T", 0, phys, 10, 0, 1_700_000_000_000, 0, "k", None, 0, 0, {}))
    f = svc.files[0]
    assert f.repair_slots() == 0  # nothing to do: the slot points at entry 2 of 3
    struct.pack_into(">i", f.buf, 40, bad)
    assert f.repair_slots() == 1
    assert struct.unpack_from(">i", f.buf, 40)[0] == 2
    svc.close()
