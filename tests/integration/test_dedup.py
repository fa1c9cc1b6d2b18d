"""Producer de-duplication against a real broker process: a send retried after a lost response is stored once
(identical raw frames, and our SDK producer whose first response is dropped), also across a kill -9 restart;
hits are visible in GET_BROKER_RUNTIME_INFO (dedupHits); dedupEnable=false stores twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orbitmq.base.errors import RemotingTimeoutError
from orbitmq.client import Producer, SendStatus
from orbitmq.model import Message
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.testing.procs import Standalone, blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _send_frame(topic: str, uniq: str, group: str = "PG_dedup", queue_id: int = 0) -> RemotingCommand:
    props = encode_properties({Prop.UNIQ_KEY: uniq, Prop.KEYS: uniq, Prop.WAIT: "true"})
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "properties": props,
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}, body=b"payload")


def _max_offset(addr: str, topic: str, queue_id: int) -> int:
    resp = blocking_request(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                          {"topic": topic, "queueId": str(queue_id)}))
    assert resp.code == 0, resp.remark
    return int(resp.ext_fields["offset"])


def _runtime(addr: str) -> dict[str, str]:
    resp = blocking_request(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert resp.code == 0
    return KVTable.from_json(resp.body).table


def _result(resp: RemotingCommand) -> tuple[str, str, str]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ext = resp.ext_fields or {}
    return ext["msgId"], ext["queueId"], ext["queueOffset"]


def test_identical_send_is_stored_once_also_across_kill9(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa").start()
    try:
        addr, topic = sa.broker_addr, "DedupT"
        first = _result(blocking_request(addr, _send_frame(topic, "UNIQ-1")))
        again = _result(blocking_request(addr, _send_frame(topic, "UNIQ-1")))
        assert again == first
        assert _max_offset(addr, topic, 0) == 1
        assert _runtime(addr)["dedupHits"] == "1"
        other = _result(blocking_request(addr, _send_frame(topic, "UNIQ-2")))  # a new key is stored
        assert other[0] != first[0] and other[2] == "1"
        # the same key from another producer group is a different message
        _result(blocking_request(addr, _send_frame(topic, "UNIQ-1", group="PG_other")))
        assert _max_offset(addr, topic, 0) == 3
        sa.kill9()
        sa.restart()
        after = _result(blocking_request(addr, _send_frame(topic, "UNIQ-1")))  # retry across the crash
        assert after == first
        assert _result(blocking_request(addr, _send_frame(topic, "UNIQ-2"))) == other
        assert _max_offset(addr, topic, 0) == 3
        assert _runtime(addr)["dedupHits"] == "2"
        # clean restart: the snapshot file carries the table (groups included)
        sa.restart()
        assert _result(blocking_request(addr, _send_frame(topic, "UNIQ-1"))) == first
        assert _max_offset(addr, topic, 0) == 3
        assert list((sa.store_dir / "config" / "dedup").glob("*.jsonl"))  # the journal
    finally:
        sa.close()


def test_sdk_send_retried_after_a_lost_response_is_stored_once(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa").start()
    try:
        async def run() -> tuple[list[str], Any]:
            originals: list[str] = []
            async with Producer("PG_sdk_dedup", namesrv=sa.namesrv_addr) as p:
                inst = p._instance()
                real_invoke = inst.invoke

                async def lossy_invoke(addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
                    resp = await real_invoke(addr, cmd, timeout_ms)
                    if cmd.code == RequestCode.SEND_MESSAGE_V2 and not originals:
                        originals.append((resp.ext_fields or {}).get("msgId", ""))
                        raise RemotingTimeoutError("response lost (test)")  # the broker did store it
                    return resp

                inst.invoke = lossy_invoke  # type: ignore[method-assign]
                r = await p.send(Message("DedupSdk", b"once", {}))
                inst.invoke = real_invoke  # type: ignore[method-assign]
                assert r.status == SendStatus.SEND_OK
                return originals, r

        originals, r = asyncio.run(run())
        assert originals and r.offset_msg_id == originals[0]
        assert sum(_max_offset(sa.broker_addr, "DedupSdk", q) for q in range(4)) == 1
        assert _runtime(sa.broker_addr)["dedupHits"] == "1"
    finally:
        sa.close()


def test_dedup_disabled_stores_twice(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa", dedupEnable="false").start()
    try:
        a = _result(blocking_request(sa.broker_addr, _send_frame("DedupOff", "UNIQ-X")))
        b = _result(blocking_request(sa.broker_addr, _send_frame("DedupOff", "UNIQ-X")))
        assert a != b
        assert _max_offset(sa.broker_addr, "DedupOff", 0) == 2
        assert "dedupHits" not in _runtime(sa.broker_addr)
    finally:
        sa.close()
