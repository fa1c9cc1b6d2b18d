"""SEND_MESSAGE_V2 headers (single-letter keys) are read directly, without a renamed V1 copy: every header shape must
give the same stored message and the same response as its V1 form (SEND_MESSAGE with long names)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.model.properties import encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, to_send_v2
from tests.unit.broker.test_send_fast_path import FakeConn, answer_of, make_ctx


class Recorder:
    """Send hook keeping what the handler asks the store to append."""

    def __init__(self) -> None:
        self.msgs: list[Any] = []

    def before_put(self, conn: Any, req: RemotingCommand, msgs: list[Any]) -> None:
        self.msgs.extend(msgs)

    def after_put(self, conn: Any, req: RemotingCommand, msgs: list[Any], result: Any) -> None:
        pass


BASE = {"producerGroup": "PG", "topic": "T1", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "3",
        "properties": encode_properties({"UNIQ_KEY": "K1", "TAGS": "TagA"}), "reconsumeTimes": "0",
        "unitMode": "false", "batch": "false"}

CASES: dict[str, dict[str, str | None]] = {
    "plain": {},
    "minimal": {"defaultTopic": None, "defaultTopicQueueNums": None, "reconsumeTimes": None, "unitMode": None,
                "batch": None, "properties": None},
    "auto-created topic, unit mode": {"topic": "NewTopic", "unitMode": "true", "defaultTopicQueueNums": "2",
                                      "queueId": "3"},
    "queue -1 round robin": {"queueId": "-1"},
    "queue out of range": {"queueId": "99"},
    "delay level": {"properties": encode_properties({"UNIQ_KEY": "K2", "DELAY": "3"})},
    "retry under max": {"topic": "%RETRY%G1", "reconsumeTimes": "2"},
    "retry to DLQ by header max": {"topic": "%RETRY%G1", "reconsumeTimes": "3", "maxReconsumeTimes": "3"},
    "forbidden topic": {"topic": "SCHEDULE_TOPIC_XXXX"},
    "bad topic name": {"topic": "bad topic"},
    "transaction half refused": {"properties": encode_properties({"UNIQ_KEY": "K3", "TRAN_MSG": "true"}),
                                 "sysFlag": "4"},
    "non-numeric reconsumeTimes": {"reconsumeTimes": "x"},
    "missing topic": {"topic": None},
    "bad flag": {"flag": "1.5"},
    "batch flag empty": {"batch": ""},
    "batch flag 1": {"batch": "1", "topic": "T1"},
    "batch flag TRUE": {"batch": "TRUE"},
    "bname (5.x clients)": {"bname": "broker-a"},
    "flag beyond int32": {"flag": str(2**31)},
    "bornTimestamp beyond int64": {"bornTimestamp": str(2**63)},
}


def _ext(case: dict[str, str | None]) -> dict[str, str]:
    ext = dict(BASE)
    for k, v in case.items():
        if v is None:
            ext.pop(k, None)
        else:
            ext[k] = v
    return ext


def _run(tmp_path, name: str, code: RequestCode, ext: dict[str, Any]) -> tuple[Any, list[Any]]:
    ctx = make_ctx(tmp_path / name, "ASYNC_FLUSH")
    rec = Recorder()
    ctx.send_hooks.append(rec)
    try:
        r = answer_of(SendProcessor(ctx).dispatch(FakeConn(), RemotingCommand.request(code, ext, b"body")))
        return (r.code, r.remark, r.ext_fields, r.flag), rec.msgs
    finally:
        asyncio.run(ctx.store.shutdown())


@pytest.mark.parametrize("case", list(CASES))
def test_v2_header_gives_what_its_v1_form_gives(tmp_path, case):
    ext = _ext(CASES[case])
    want = _run(tmp_path, "v1", RequestCode.SEND_MESSAGE, ext)
    got = _run(tmp_path, "v2", RequestCode.SEND_MESSAGE_V2, to_send_v2(ext))
    assert got == want


@pytest.mark.parametrize("extra", [{"someKey": "x"}, {"topic": "Other"}, {"TOPIC": "T1"}])
def test_v2_header_with_other_keys_keeps_the_renaming_rules(tmp_path, extra):
    """A V2 header mixed with other keys: renamed as before (a V1 name and its letter: the later one wins)."""
    v2 = to_send_v2(_ext({}))
    mixed = {**v2, **extra}
    renamed = {_long(k): v for k, v in mixed.items()}
    want = _run(tmp_path, "v1", RequestCode.SEND_MESSAGE, renamed)
    got = _run(tmp_path, "v2", RequestCode.SEND_MESSAGE_V2, mixed)
    assert got == want
    assert got[1][0].topic == renamed["topic"]


def _long(k: str) -> str:
    from orbitmq.protocol.ext import SEND_V2_TO_V1

    return SEND_V2_TO_V1.get(k, k)


def test_v2_header_with_non_string_values_in_process(tmp_path):
    """Commands built in-process may carry ints/bools: same answer as the V1 form."""
    ext: dict[str, Any] = {**_ext({}), "queueId": 2, "sysFlag": 0, "bornTimestamp": 1700000000000, "flag": 0,
                           "batch": False}
    want = _run(tmp_path, "v1", RequestCode.SEND_MESSAGE, ext)
    got = _run(tmp_path, "v2", RequestCode.SEND_MESSAGE_V2, to_send_v2(ext))
    assert got == want and got[1][0].queue_id == 2


@pytest.mark.parametrize("key,value", [("flag", str(2**31)), ("queueId", str(-2**31 - 1)),
                                       ("bornTimestamp", str(2**63))])
def test_header_out_of_java_range_is_answered_with_a_remark(tmp_path, key, value):
    """Range checks at header decode: SYSTEM_ERROR naming the field, nothing handed to the store."""
    (code, remark, _fields, _flag), msgs = _run(tmp_path, "v2", RequestCode.SEND_MESSAGE_V2,
                                             to_send_v2(_ext({key: value})))
    assert code == ResponseCode.SYSTEM_ERROR and f"<{key}> is out of range" in remark and msgs == []
