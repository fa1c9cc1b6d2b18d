"""Pop checkpoints: CK bitmaps, span splitting, extraInfo and record codecs, ack matching in the revive table,
revive progress, and the retry/DLQ decision for a revived message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orbitmq.broker.services.pop import PopService
from orbitmq.broker.services.pop_revive import (
    ACK_TAG,
    CK_TAG,
    MAX_CK_SPAN,
    PopCheckpoint,
    ReviveTable,
    ack_json,
    apply_record,
    bitmap_of,
    decode_extra_info,
    encode_extra_info,
    offsets_of,
    parse_ack,
    split_spans,
)
from orbitmq.model import MessageExt, TopicConfig


def _ck(start: int = 10, offsets: tuple[int, ...] = (10, 11, 13), pop_time: int = 1000, invisible: int = 500,
        rqid: int = 0, record_offset: int = 0) -> PopCheckpoint:
    ck = PopCheckpoint("g", "T", 2, start, pop_time, invisible, bitmap_of(start, list(offsets)), rqid, "b0")
    ck.record_offset = record_offset
    return ck


def test_bitmap_round_trips_offsets_and_rejects_out_of_span():
    assert bitmap_of(10, [10, 11, 13]) == 0b1011
    assert offsets_of(10, 0b1011) == [10, 11, 13]
    assert offsets_of(5, bitmap_of(5, [5, 5 + MAX_CK_SPAN])) == [5, 5 + MAX_CK_SPAN]
    with pytest.raises(ValueError):
        bitmap_of(10, [10 + MAX_CK_SPAN + 1])
    with pytest.raises(ValueError):
        bitmap_of(10, [9])


def test_split_spans_keeps_each_group_within_one_bitmap():
    offs = [0, 1, 63, 64, 200, 201]
    groups = split_spans(offs)
    assert groups == [[0, 1, 63], [64], [200, 201]]
    assert [o for g in groups for o in g] == offs
    assert split_spans([]) == []


def test_ck_ack_marks_only_its_own_offsets():
    ck = _ck()
    assert ck.pending_offsets() == [10, 11, 13]
    assert not ck.ack(12) and not ck.ack(9) and not ck.ack(10 + MAX_CK_SPAN + 5)
    assert ck.ack(11)
    assert ck.pending_offsets() == [10, 13] and not ck.done
    ck.ack(10)
    ck.ack(13)
    assert ck.done and ck.deadline_ms == 1500


def test_ck_and_ack_json_round_trip():
    ck = _ck()
    back = PopCheckpoint.from_json(ck.to_json())
    assert back.key == ck.key and back.bitmap == ck.bitmap and back.invisible_time == 500 and back.broker_name == "b0"
    key, offs = parse_ack(ack_json(ck.key, [11, 13]))
    assert key == ck.key and offs == [11, 13]


def test_extra_info_round_trip_and_optional_offset():
    s = encode_extra_info(10, 1000, 500, 3, 1, "broker-a", 2, 13)
    assert s == "10 1000 500 3 1 broker-a 2 13"
    info = decode_extra_info(s)
    assert (info.ck_offset, info.pop_time, info.invisible_time, info.revive_qid, info.retry_flag, info.broker_name,
            info.queue_id, info.queue_offset) == (10, 1000, 500, 3, 1, "broker-a", 2, 13)
    assert decode_extra_info("10 1000 500 3 0 b 2").queue_offset == -1
    with pytest.raises(ValueError):
        decode_extra_info("1 2 3")


def test_revive_table_matches_acks_and_expires_the_rest():
    t = ReviveTable()
    a, b = _ck(record_offset=0), _ck(start=20, offsets=(20,), pop_time=1200, record_offset=1)
    t.on_ck(a)
    t.on_ck(b)
    assert t.on_ack(b.key, [20]) is True  # fully acked: resolved
    assert len(t) == 1
    assert t.on_ack(a.key, [10, 13]) is False
    assert t.expired(1499) == []
    assert [c.pending_offsets() for c in t.expired(1500)] == [[11]]
    assert t.expired(9999) == []  # handed out once ...
    t.retry_later(a)
    assert t.expired(9999) == [a]  # ... and again only when the caller could not revive it
    assert t.on_ack(("g", "T", 2, 99, 1), [99]) is False  # unknown (already resolved) CK: ignored


def test_revive_table_ack_needs_the_exact_pop_time():
    t = ReviveTable()
    a = _ck()
    t.on_ck(a)
    g, topic, q, so, pt = a.key
    t.on_ack((g, topic, q, so, pt + 1), [10, 11, 13])
    assert len(t) == 1 and a.pending_offsets() == [10, 11, 13]


def test_progress_is_the_oldest_live_ck_of_the_revive_queue():
    t = ReviveTable()
    t.on_ck(_ck(record_offset=4, rqid=0))
    t.on_ck(_ck(start=30, offsets=(30,), record_offset=7, rqid=0))
    t.on_ck(_ck(start=50, offsets=(50,), record_offset=2, rqid=1))
    assert t.progress(0, 9) == 4
    assert t.progress(1, 9) == 2
    assert t.progress(2, 9) == 9
    assert t.progress_all([9, 9, 9]) == [4, 2, 9]
    t.on_ack(("g", "T", 2, 10, 1000), [10, 11, 13])
    assert t.progress(0, 9) == 7


def test_apply_record_replay_is_idempotent():
    t = ReviveTable()
    ck = _ck()
    apply_record(t, CK_TAG, ck.to_json(), 5)
    apply_record(t, ACK_TAG, ack_json(ck.key, [10]), 6)
    apply_record(t, CK_TAG, ck.to_json(), 5)  # the same CK seen again keeps its acks
    assert t.cks[ck.key].pending_offsets() == [11, 13] and t.cks[ck.key].record_offset == 5
    apply_record(t, ACK_TAG, ack_json(ck.key, [11, 13]), 7)
    assert len(t) == 0
    apply_record(t, "other", b"{}", 8)


def _msg(topic: str, reconsume_times: int) -> MessageExt:
    return MessageExt(topic, b"x", {"TAGS": "A", "UNIQ_KEY": "U1"}, 0, 1, 7, 100, 0, 1, "127.0.0.1:1", 2,
                      "127.0.0.1:2", reconsume_times, 0, 0, 0)


def _service(max_times: int) -> tuple[PopService, list[str]]:
    created: list[str] = []

    def create_system_topic(topic: str, nums: int, perm: int = 6, topic_sys_flag: int = 0) -> TopicConfig:
        created.append(topic)
        return TopicConfig(topic, nums, nums, perm)

    ctx = SimpleNamespace(groups=SimpleNamespace(find_or_create=lambda g: SimpleNamespace(
        retry_max_times=max_times, retry_queue_nums=1)), topics=SimpleNamespace(
        create_system_topic=create_system_topic), store_host="127.0.0.1:9")
    svc = PopService.__new__(PopService)
    svc.ctx = ctx  # type: ignore[assignment]
    return svc, created


def test_revived_message_goes_to_retry_with_reconsume_times_plus_one():
    svc, created = _service(2)
    inner = svc._retry_message("g", _msg("T", 0))
    assert inner.topic == "%RETRY%g" and inner.reconsume_times == 1
    assert inner.properties["RETRY_TOPIC"] == "T" and inner.properties["ORIGIN_MESSAGE_ID"] == "U1"
    retried = _msg("%RETRY%g", 1)
    retried.properties = dict(inner.properties)
    again = svc._retry_message("g", retried)
    assert again.topic == "%RETRY%g" and again.reconsume_times == 2 and again.properties["RETRY_TOPIC"] == "T"
    assert created == ["%RETRY%g", "%RETRY%g"]


def test_revived_message_past_max_reconsume_times_goes_to_dlq():
    svc, created = _service(2)
    inner = svc._retry_message("g", _msg("%RETRY%g", 2))
    assert inner.topic == "%DLQ%g" and inner.queue_id == 0 and inner.reconsume_times == 2
    assert created == ["%DLQ%g"]
