"""Timer wheel and timer log: slot math, delivery-time parsing, record format, per-slot lists, revolutions,
persistence round trip, crash recovery of the log tail (unwinding, torn records, pending slot update, rebuild)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orbitmq.base.fsio import atomic_write
from orbitmq.broker.services.timer_log import TimerStore
from orbitmq.broker.services.timer_wheel import (
    RECORD_SIZE,
    TimerCheckpoint,
    decode_record,
    deliver_ms_of,
    delivered_properties,
    encode_record,
    slot_of,
    unwind_tail,
)

SLOTS = 60


def _store(tmp_path: Path, slots: int = SLOTS) -> TimerStore:
    return TimerStore(tmp_path / "timerwheel", tmp_path / "config" / "timercheck.json", slots)


def test_record_is_32_bytes_and_round_trips() -> None:
    rec = encode_record(1_795_000_000_123, 987_654, 42, 300)
    assert len(rec) == RECORD_SIZE == 32
    assert decode_record(rec) == (1_795_000_000_123, 987_654, 42, 300)


def test_torn_or_zero_record_is_rejected() -> None:
    rec = bytearray(encode_record(5_000, 1, 0, 10))
    rec[3] ^= 0xFF
    assert decode_record(bytes(rec)) is None
    assert decode_record(bytes(32)) is None
    assert decode_record(encode_record(5_000, 1, 0, 10)[:20]) is None


def test_slot_is_deliver_second_modulo_slot_count() -> None:
    assert slot_of(0, SLOTS) == 0
    assert slot_of(999, SLOTS) == 0
    assert slot_of(1000, SLOTS) == 1
    assert slot_of(59_999, SLOTS) == 59
    assert slot_of(60_000, SLOTS) == 0  # one revolution later: same slot
    assert slot_of(1_795_316_294_500, 604_800) == 1_795_316_294 % 604_800


def test_deliver_time_absolute_keys_win_over_relative() -> None:
    now = 1_000_000
    assert deliver_ms_of({}, now) is None
    assert deliver_ms_of({"TIMER_DELIVER_MS": "1234567"}, now) == 1_234_567
    assert deliver_ms_of({"__STARTDELIVERTIME": "2000000"}, now) == 2_000_000
    assert deliver_ms_of({"TIMER_DELAY_SEC": "5"}, now) == now + 5000
    assert deliver_ms_of({"TIMER_DELAY_MS": "250"}, now) == now + 250
    assert deliver_ms_of({"TIMER_DELAY_SEC": "5", "TIMER_DELIVER_MS": "7"}, now) == 7
    with pytest.raises(ValueError):
        deliver_ms_of({"TIMER_DELAY_SEC": "soon"}, now)


def test_delivered_copy_restores_real_topic_and_keeps_only_timer_out_ms() -> None:
    props = {"REAL_TOPIC": "T", "REAL_QID": "3", "TIMER_DELIVER_MS": "9000", "TIMER_ENQUEUE_MS": "1",
             "TIMER_DELAY_SEC": "8", "KEYS": "k", "UNIQ_KEY": "U"}
    topic, qid, out = delivered_properties(props, 9000)
    assert (topic, qid) == ("T", 3)
    assert out == {"KEYS": "k", "UNIQ_KEY": "U", "TIMER_OUT_MS": "9000", "WAIT": "false"}
    assert "REAL_TOPIC" in props  # the stored message's properties are not touched


def test_checkpoint_json_round_trip() -> None:
    c = TimerCheckpoint(604_800, 1_795_316_294, 17, 20, 5, 19)
    assert TimerCheckpoint.from_json(c.to_json()) == c


def test_unwind_tail_restores_each_slot_head() -> None:
    heads = [0] * SLOTS
    # records 0,1 before the checkpoint; 2,3,4 after it (3 chains onto 2 in slot 1; 4 onto 0 in slot 0)
    heads[0], heads[1] = 5, 4
    tail = [(2, 1_500, 0), (3, 1_700, 3), (4, 500, 1)]
    unwind_tail(heads, tail, SLOTS)
    assert heads[0] == 1 and heads[1] == 0


def test_append_links_a_list_per_slot(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    for i in range(10):
        ts.append(5_000 + i * 100 + (i % 2) * 1000, 100 + i, 50)  # seconds 5 and 6 interleaved
    assert ts.records == 10
    five = ts.detach(5)
    assert [p for _, p, _ in five] == [108, 106, 104, 102, 100]  # newest first
    assert all(d // 1000 == 5 for d, _, _ in five)
    ts.commit(5, 10)
    assert ts.slot_empty(5) and not ts.slot_empty(6)
    assert [p for _, p, _ in ts.detach(6)] == [109, 107, 105, 103, 101]
    ts.close()


def test_revolution_entries_go_to_the_detached_slot_new_list(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(7_100, 1, 10)
    ts.append(7_200 + SLOTS * 1000, 2, 10)  # same slot, one revolution later
    entries = ts.detach(7)
    assert {p for _, p, _ in entries} == {1, 2}
    ts.append(7_200 + SLOTS * 1000, 2, 10)  # the walker re-enqueues the future one
    ts.append(7_900 + SLOTS * 1000, 3, 10)  # a new send for that second while the slot is detached
    ts.commit(7, 2)
    assert sorted(p for _, p, _ in ts.detach(7)) == [2, 3]
    ts.close()


def test_persistence_round_trip(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=10)
    for i in range(100):
        ts.append(20_000 + i * 333, 1000 + i, 64)
    ts.commit(10, 100)
    ts.close()
    again = _store(tmp_path)
    ckpt = again.open(default_delivered_sec=999)
    assert (ckpt.delivered_sec, ckpt.enqueue_offset, ckpt.log_records) == (10, 100, 100)
    got = []
    for sec in range(20, 54):
        got += [p for _, p, _ in again.detach(sec % SLOTS)]
        again.commit(sec, 100)
    assert sorted(got) == list(range(1000, 1100))
    again.close()


def test_crash_drops_records_after_checkpoint_and_unwinds_slots(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(3_100, 1, 10)
    ts.append(4_100, 2, 10)
    ts.commit(0, 2)
    ts.append(3_200, 3, 10)  # after the checkpoint: the enqueuer will read these again from the queue
    ts.append(9_000, 4, 10)
    ts.flush()  # a kill -9 keeps what reached the page cache: the wheel points at the new records
    del ts  # no close(): crash
    again = _store(tmp_path)
    ckpt = again.open(default_delivered_sec=0)
    assert ckpt.enqueue_offset == 2 and again.records == 2
    assert [p for _, p, _ in again.detach(3)] == [1]
    assert again.slot_empty(9)
    again.close()


def test_torn_log_tail_is_ignored(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(3_100, 1, 10)
    ts.commit(0, 1)
    ts.append(3_300, 2, 10)
    ts.close()
    with open(tmp_path / "timerwheel" / "timerlog", "r+b") as f:  # half of record 1 is garbage
        f.seek(RECORD_SIZE + 8)
        f.write(os.urandom(10))
    again = _store(tmp_path)
    again.open(default_delivered_sec=0)
    assert again.records == 1
    assert [p for _, p, _ in again.detach(3)] == [1]
    again.close()


def test_pending_slot_head_from_checkpoint_is_applied(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(5_100, 1, 10)
    ts.append(5_100 + SLOTS * 1000, 2, 10)
    ts.commit(0, 2)
    ts.detach(5)
    ts.append(5_100 + SLOTS * 1000, 2, 10)  # revolution entry into the detached list
    # crash after the checkpoint was written but before the wheel took the new head
    atomic_write(ts.checkpoint_path, TimerCheckpoint(SLOTS, 5, 2, ts.records, 5, ts.detached_head).to_json())
    ts.flush()
    del ts
    again = _store(tmp_path)
    again.open(default_delivered_sec=0)
    assert [p for _, p, _ in again.detach(5)] == [2]
    again.close()


def test_slot_count_change_rebuilds_pending_entries(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(2_500, 1, 10)  # delivered already (second 2 <= delivered_sec 3)
    ts.append(8_500, 2, 10)
    ts.append(70_500, 3, 10)
    ts.commit(3, 3)
    ts.close()
    bigger = _store(tmp_path, slots=120)
    ckpt = bigger.open(default_delivered_sec=0)
    assert ckpt.slot_count == 120 and bigger.records == 2
    assert [p for _, p, _ in bigger.detach(8)] == [2]
    assert [p for _, p, _ in bigger.detach(70)] == [3]
    bigger.close()


def test_missing_checkpoint_starts_fresh(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(5_100, 1, 10)
    ts.close()  # never committed
    again = _store(tmp_path)
    ckpt = again.open(default_delivered_sec=77)
    assert (ckpt.delivered_sec, ckpt.enqueue_offset, again.records) == (77, 0, 0)
    assert again.slot_empty(5)
    again.close()


def test_appends_during_a_checkpoint_write_are_kept_live_and_unwound_after_crash(tmp_path: Path) -> None:
    ts = _store(tmp_path)
    ts.open(default_delivered_sec=0)
    ts.append(5_100, 1, 10)
    ts.commit(0, 1)
    ts.detach(5)
    ts.append(5_100 + SLOTS * 1000, 2, 10)  # revolution entry, before the checkpoint
    ckpt = ts.prepare_commit(5, 1)
    ts.append(5_300 + SLOTS * 1000, 3, 10)  # a new send while the checkpoint is written by a worker thread
    ts.write_checkpoint(ckpt)
    ts.finish_commit(ckpt)
    assert sorted(p for _, p, _ in ts.detach(5)) == [2, 3]  # live: both in the slot's new list
    ts.flush()
    del ts  # crash: record 3 is past the checkpoint and is read again from the ConsumeQueue
    again = _store(tmp_path)
    c = again.open(default_delivered_sec=0)
    assert (c.delivered_sec, c.enqueue_offset, again.records) == (5, 1, 2)
    assert [p for _, p, _ in again.detach(5)] == [2]
    again.close()
