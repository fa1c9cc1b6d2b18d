"""BrokerLiveTable: expiry by timeout, channel close, latest report wins."""

from __future__ import annotations

from orbitmq.controller.election import CandidateInfo
from orbitmq.controller.heartbeat import DEFAULT_HEARTBEAT_TIMEOUT_MS, MAX_PRIORITY, BrokerLiveTable

C, B = "c", "b"


def beat(t: BrokerLiveTable, bid: int, now: int, **kw: object) -> bool:
    return t.on_heartbeat(cluster_name=C, broker_name=B, broker_id=bid, broker_addr=f"a:{bid}", now_ms=now, **kw)


def test_alive_until_timeout_inclusive() -> None:
    t = BrokerLiveTable()
    assert beat(t, 1, 1000, timeout_ms=3000) is True
    assert beat(t, 1, 1500, timeout_ms=3000) is False
    assert t.is_alive(C, B, 1, 4500)
    assert not t.is_alive(C, B, 1, 4501)
    assert not t.is_alive(C, B, 2, 0)


def test_default_timeout() -> None:
    t = BrokerLiveTable()
    beat(t, 1, 0)
    beat(t, 2, 0, timeout_ms=0)
    assert t.get(C, B, 1).heartbeat_timeout_ms == DEFAULT_HEARTBEAT_TIMEOUT_MS
    assert t.get(C, B, 2).heartbeat_timeout_ms == DEFAULT_HEARTBEAT_TIMEOUT_MS


def test_scan_expired_removes() -> None:
    t = BrokerLiveTable()
    beat(t, 1, 0, timeout_ms=100)
    beat(t, 2, 0, timeout_ms=1000)
    gone = t.scan_expired(101)
    assert [g.broker_id for g in gone] == [1]
    assert len(t) == 1 and t.scan_expired(101) == []
    assert [i.broker_id for i in t.alive_entries(500)] == [2]


def test_channel_close_removes_at_once() -> None:
    t = BrokerLiveTable()
    ch1, ch2 = object(), object()
    beat(t, 1, 0, channel=ch1)
    beat(t, 2, 0, channel=ch2)
    assert [g.broker_id for g in t.on_channel_closed(ch1)] == [1]
    assert not t.is_alive(C, B, 1, 0) and t.is_alive(C, B, 2, 0)
    assert t.on_channel_closed(ch1) == []


def test_latest_report_wins_and_missing_fields_kept() -> None:
    t = BrokerLiveTable()
    beat(t, 1, 0, epoch=3, max_offset=500, confirm_offset=400, election_priority=2)
    beat(t, 1, 10, epoch=3, max_offset=200)  # truncated log shows up
    assert t.candidate_info(C, B, 1) == CandidateInfo(3, 200, 2)
    assert t.get(C, B, 1).confirm_offset == 400
    assert t.candidate_info(C, B, 9) is None
    beat(t, 2, 0)
    assert t.candidate_info(C, B, 2) == CandidateInfo(0, 0, MAX_PRIORITY)


def test_returning_after_expiry_counts_as_new() -> None:
    t = BrokerLiveTable()
    beat(t, 1, 0, timeout_ms=10)
    assert beat(t, 1, 100, timeout_ms=10) is True
    t.remove(C, B, 1)
    assert not t.is_alive(C, B, 1, 100)


def test_new_leader_gives_every_known_broker_a_fresh_timeout() -> None:
    t = BrokerLiveTable()
    beat(t, 1, 0, timeout_ms=1000)      # heard long ago (e.g. before a partition from this controller)
    beat(t, 2, 5000, timeout_ms=1000)   # heard recently
    assert not t.is_alive(C, B, 1, 5000)
    t.extend_all(5000)                  # this controller starts serving as leader at t=5000
    assert t.is_alive(C, B, 1, 6000) and not t.is_alive(C, B, 1, 6001)
    assert t.scan_expired(6000) == []
    beat(t, 2, 5500, timeout_ms=1000)
    t.extend_all(5200)                  # never moves a newer heartbeat back
    assert t.get(C, B, 2).last_update_ms == 5500
