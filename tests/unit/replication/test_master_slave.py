"""Sans-IO HAMaster / HASlave: chunk planning, confirm offset, slave-OK rule, epochs, offset checks."""

import pytest

from orbitmq.replication import EpochCache, HAMaster, HASlave, Verdict
from orbitmq.replication.frames import DataFrame

SEG = 1000


def test_empty_slave_starts_at_the_beginning_of_the_masters_last_segment():
    m = HAMaster(1, SEG, batch_size=300)
    sid = m.on_connect("s1", 0)
    assert m.next_chunk(sid, 2500, 0) is None  # nothing before the first report
    m.on_report(sid, 0, 2500, 0)
    assert m.next_chunk(sid, 2500, 0) == (2000, 300)


def test_chunks_never_cross_a_segment_end_and_follow_what_was_sent():
    m = HAMaster(1, SEG, batch_size=300)
    sid = m.on_connect("s1", 0)
    m.on_report(sid, 900, 1500, 0)
    assert m.next_chunk(sid, 1500, 0) == (900, 100)  # stops at the segment end (1000)
    m.on_sent(sid, 900, 100, 0)
    assert m.next_chunk(sid, 1500, 0) == (1000, 300)
    m.on_sent(sid, 1000, 300, 0)
    assert m.next_chunk(sid, 1300, 1) is None  # caught up, heartbeat not due
    assert m.next_chunk(sid, 1300, m.heartbeat_ms) == (1300, 0)


def test_confirm_offset_is_the_best_slave_ack_and_never_goes_back():
    m = HAMaster(1, SEG)
    a, b = m.on_connect("a", 0), m.on_connect("b", 0)
    assert m.on_report(a, 100, 500, 0) is True
    assert m.on_report(b, 300, 500, 0) is True
    assert m.on_report(a, 200, 500, 0) is False
    assert m.confirm_offset == 300
    m.on_disconnect(b)
    assert m.confirm_offset == 300
    assert m.lag_bytes(500) == {"a": 300}


def test_a_slave_never_confirms_beyond_the_masters_end_and_is_flagged_diverged():
    m = HAMaster(1, SEG)
    sid = m.on_connect("a", 0)
    m.on_report(sid, 900, 500, 0)
    assert m.confirm_offset == 500
    assert m.diverged(sid, 500)


def test_slave_ok_needs_a_reporting_slave_within_the_fallbehind_limit():
    m = HAMaster(1, SEG, fallbehind_max=1000)
    assert not m.is_slave_ok(10)
    sid = m.on_connect("a", 0)
    assert not m.is_slave_ok(10)  # connected but silent
    m.on_report(sid, 0, 10, 0)
    assert m.is_slave_ok(10)
    assert not m.is_slave_ok(5000)


def test_housekeeping_expires_silent_slaves():
    m = HAMaster(1, SEG, housekeeping_ms=100)
    sid = m.on_connect("a", 0)
    assert m.expired(100) == []
    assert m.expired(101) == [sid]


def test_slave_appends_only_frames_that_continue_its_log():
    s = HASlave(EpochCache())
    assert s.on_frame(DataFrame(2000, 1, b"x"), 0, 0) == (Verdict.APPEND, True)  # empty log adopts any start
    assert s.on_frame(DataFrame(2001, 1, b"y"), 2001, 0) == (Verdict.APPEND, False)
    assert s.on_frame(DataFrame(1990, 1, b"z"), 2002, 0)[0] is Verdict.OFFSET_MISMATCH
    assert s.on_frame(DataFrame(2002, 1, b""), 2002, 0)[0] is Verdict.HEARTBEAT


def test_slave_refuses_frames_from_a_stale_epoch_and_adopts_newer_ones():
    cache = EpochCache([(1, 0), (3, 500)])
    s = HASlave(cache)
    assert s.on_frame(DataFrame(900, 2, b"x"), 900, 0)[0] is Verdict.STALE_EPOCH
    assert s.on_frame(DataFrame(900, 2, b""), 900, 0)[0] is Verdict.STALE_EPOCH  # heartbeats too
    assert s.refused == 2
    assert s.on_frame(DataFrame(900, 4, b"x"), 900, 0) == (Verdict.APPEND, True)
    assert cache.entries[-1] == (4, 900)
    assert cache.epoch_at(600) == 3 and cache.epoch_at(950) == 4


def test_epoch_cache_refuses_to_go_backwards():
    cache = EpochCache([(2, 0)])
    with pytest.raises(ValueError):
        cache.observe(1, 10)
    assert cache.observe(2, 10) is False


def test_slave_reports_when_its_offset_moved_or_the_heartbeat_is_due():
    s = HASlave(EpochCache(), heartbeat_ms=100)
    s.on_connected(0)
    assert s.report_due(0, 0)
    s.on_reported(0, 0)
    assert not s.report_due(0, 50)
    assert s.report_due(10, 50)
    assert s.report_due(0, 100)
