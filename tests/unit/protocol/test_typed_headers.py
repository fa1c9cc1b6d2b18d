"""Typed request headers (protocol/headers.py): decoded once, V1 and V2 send keys alike, Java ranges enforced,
errors in the order of the required fields."""

from __future__ import annotations

import pytest

from orbitmq.protocol import HeaderError, to_send_v2
from orbitmq.protocol.headers import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

SEND = {"producerGroup": "PG", "topic": "T1", "defaultTopic": "TBW102", "defaultTopicQueueNums": "8",
        "queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "3", "properties": "a\x01b",
        "reconsumeTimes": "2", "unitMode": "TRUE", "maxReconsumeTimes": "5", "batch": "false", "bname": "b-a"}


def _fields(h: SendMessageRequestHeader) -> tuple:
    return tuple(getattr(h, s) for s in SendMessageRequestHeader.__slots__)


def test_send_header_v1_and_v2_decode_to_the_same_fields():
    h = SendMessageRequestHeader.decode(SEND)
    assert _fields(h) == ("T1", "PG", 1, 0, 1700000000000, 3, "a\x01b", 2, "TBW102", 8, True, 5, False, "b-a")
    assert _fields(SendMessageRequestHeader.decode(to_send_v2(SEND))) == _fields(h)


def test_send_header_defaults_for_a_minimal_header():
    ext = {k: SEND[k] for k in ("producerGroup", "topic", "queueId", "sysFlag", "bornTimestamp", "flag")}
    h = SendMessageRequestHeader.decode(ext)
    assert (h.properties, h.reconsume_times, h.default_topic, h.default_topic_queue_nums, h.unit_mode,
            h.max_reconsume_times, h.batch, h.bname) == (None, 0, "TBW102", 4, False, None, False, None)


@pytest.mark.parametrize("value,want", [("true", True), ("TRUE", True), ("1", True), ("false", False),
                                        ("", False), ("yes", False), (True, True), (False, False)])
def test_send_header_batch_flag(value, want):
    assert SendMessageRequestHeader.decode({**SEND, "batch": value}).batch is want
    assert SendMessageRequestHeader.decode(to_send_v2({**SEND, "batch": value})).batch is want


@pytest.mark.parametrize("key,lo,hi", [("queueId", INT_MIN, INT_MAX), ("sysFlag", INT_MIN, INT_MAX),
                                       ("flag", INT_MIN, INT_MAX), ("bornTimestamp", LONG_MIN, LONG_MAX),
                                       ("reconsumeTimes", INT_MIN, INT_MAX),
                                       ("maxReconsumeTimes", INT_MIN, INT_MAX),
                                       ("defaultTopicQueueNums", INT_MIN, INT_MAX)])
def test_send_header_ranges(key, lo, hi):
    for ok in (lo, hi):
        h = SendMessageRequestHeader.decode({**SEND, key: str(ok)})
        assert ok in _fields(h)
    for bad in (lo - 1, hi + 1):
        for ext in ({**SEND, key: str(bad)}, to_send_v2({**SEND, key: str(bad)})):
            with pytest.raises(HeaderError, match=f"<{key}> is out of range"):
                SendMessageRequestHeader.decode(ext)


@pytest.mark.parametrize("v2", [False, True])
def test_send_header_errors_name_the_first_bad_required_field(v2):
    conv = to_send_v2 if v2 else dict
    bad = {k: v for k, v in SEND.items() if k != "topic"} | {"queueId": "x"}
    with pytest.raises(HeaderError, match="<topic> is null"):
        SendMessageRequestHeader.decode(conv(bad))
    with pytest.raises(HeaderError, match=r"<queueId> is not a number: 'x'"):
        SendMessageRequestHeader.decode(conv({**SEND, "queueId": "x", "flag": "y"}))
    with pytest.raises(HeaderError, match="<topic> is null"):
        SendMessageRequestHeader.decode(None)
    # an optional field that does not parse keeps its default, as before
    assert SendMessageRequestHeader.decode(conv({**SEND, "reconsumeTimes": "x"})).reconsume_times == 0


def test_mixed_v1_v2_keys_follow_the_renaming_rules():
    mixed = {**to_send_v2(SEND), "topic": "Other"}
    assert SendMessageRequestHeader.decode(mixed).topic == "Other"


def test_pull_and_offset_headers():
    pull = {"consumerGroup": "G", "topic": "T", "queueId": "2", "queueOffset": str(LONG_MAX), "maxMsgNums": "32",
            "sysFlag": "3", "commitOffset": "-1", "suspendTimeoutMillis": "15000", "subscription": "*",
            "subVersion": "7", "expressionType": "TAG"}
    h = PullMessageRequestHeader.decode(pull)
    assert (h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, h.sys_flag, h.commit_offset,
            h.suspend_timeout_millis, h.subscription, h.sub_version, h.expression_type) == (
        "G", "T", 2, LONG_MAX, 32, 3, -1, 15000, "*", 7, "TAG")
    with pytest.raises(HeaderError, match="<queueOffset> is out of range"):
        PullMessageRequestHeader.decode({**pull, "queueOffset": str(LONG_MAX + 1)})
    with pytest.raises(HeaderError, match="<maxMsgNums> is null"):
        PullMessageRequestHeader.decode({k: v for k, v in pull.items() if k != "maxMsgNums"})
    q = QueryConsumerOffsetRequestHeader.decode({"consumerGroup": "G", "topic": "T", "queueId": "1"})
    assert (q.consumer_group, q.topic, q.queue_id, q.set_zero_if_not_found) == ("G", "T", 1, True)
    assert not QueryConsumerOffsetRequestHeader.decode(
        {"consumerGroup": "G", "topic": "T", "queueId": "1", "setZeroIfNotFound": "False"}).set_zero_if_not_found
    u = UpdateConsumerOffsetRequestHeader.decode({"consumerGroup": "G", "topic": "T", "queueId": "0",
                                                  "commitOffset": "42"})
    assert (u.consumer_group, u.topic, u.queue_id, u.commit_offset) == ("G", "T", 0, 42)
    with pytest.raises(HeaderError, match="<queueId> is out of range"):
        UpdateConsumerOffsetRequestHeader.decode({"consumerGroup": "G", "topic": "T", "queueId": str(INT_MAX + 1),
                                                  "commitOffset": "1"})


def test_cpp_client_send_header_takes_the_one_call_path():
    """The C++ client's SEND_MESSAGE (V1 names, numbers made text by the JSON layer, AccessKey/Signature/
    OnsChannel, batch/unitMode "0"): taken by the one-call decoder (decode_send_v2_py, twin of the native
    decode_send_v2 used when the extension is built), with the same fields as the general path."""
    from orbitmq.protocol.headers import decode_send_v2_py as decode_send_v2

    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "9vrx=", "batch": "0",
           "bornTimestamp": "1795648937593", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "flag": "0",
           "producerGroup": "pg", "properties": "UNIQ_KEY\x01K\x02WAIT\x01true\x02", "queueId": "1",
           "reconsumeTimes": "0", "sysFlag": "0", "topic": "ProbeT", "unitMode": "0"}
    fast = decode_send_v2(SendMessageRequestHeader, ext)
    assert fast is not None
    assert _fields(fast) == ("ProbeT", "pg", 1, 0, 1795648937593, 0, "UNIQ_KEY\x01K\x02WAIT\x01true\x02", 0,
                             "TBW102", 4, False, None, False, None)
    assert _fields(SendMessageRequestHeader.decode(ext)) == _fields(fast)
    assert decode_send_v2(SendMessageRequestHeader, {**ext, "b": "T2"}) is None  # topic by both names


@pytest.mark.parametrize("cls", [GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
                                 GetEarliestMsgStoretimeRequestHeader])
def test_topic_queue_headers(cls: type[GetMaxOffsetRequestHeader]) -> None:
    h = cls.decode({"topic": "T", "queueId": str(INT_MIN), "extra": "x"})
    assert (type(h), h.topic, h.queue_id) == (cls, "T", INT_MIN)
    with pytest.raises(HeaderError, match="<topic> is null"):
        cls.decode({"queueId": "1"})
    with pytest.raises(HeaderError, match="<queueId> is not a number"):
        cls.decode({"topic": "T", "queueId": "one"})
    with pytest.raises(HeaderError, match="<queueId> is out of range"):
        cls.decode({"topic": "T", "queueId": str(INT_MIN - 1)})


def test_search_offset_and_unregister_headers() -> None:
    s = SearchOffsetRequestHeader.decode({"topic": "T", "queueId": "3", "timestamp": str(LONG_MIN)})
    assert (s.topic, s.queue_id, s.timestamp) == ("T", 3, LONG_MIN)
    with pytest.raises(HeaderError, match="<timestamp> is out of range"):
        SearchOffsetRequestHeader.decode({"topic": "T", "queueId": "3", "timestamp": str(LONG_MAX + 1)})
    u = UnregisterClientRequestHeader.decode({"clientID": "c1", "consumerGroup": "CG"})
    assert (u.client_id, u.producer_group, u.consumer_group) == ("c1", None, "CG")
    with pytest.raises(HeaderError, match="<clientID> is null"):
        UnregisterClientRequestHeader.decode({"producerGroup": "PG"})
