"""Producer de-duplication against real broker processes: a send retried after a lost response is stored once
(identical raw frames; our SDK producer with two brokers, one behind a TCP proxy that loses a send response on the
wire), also across a kill -9 restart; hits are visible in GET_BROKER_RUNTIME_INFO (dedupHits); dedupEnable=false
stores twice."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, Producer, SendStatus
from orbitmq.client.errors import TopicNotExistError
from orbitmq.model import Message
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, encode_frame
from orbitmq.protocol.bodies import KVTable
from orbitmq.testing.procs import Standalone, blocking_request, start_broker, start_namesrv
from orbitmq.testing.tcp_proxy import TcpProxy, rewrite_addresses

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


async def _two_broker_topic(ns_addr: str, topic: str, brokers: list[str]) -> None:
    """The topic on both brokers (2 queues each), once the name server's route lists both."""
    async with Admin(ns_addr) as admin:
        for addr in brokers:
            await admin.update_topic(topic, broker_addr=addr, read_queue_nums=2, write_queue_nums=2)
        for _ in range(200):
            try:
                if len((await admin.topic_route(topic)).queue_datas) == 2:
                    return
            except TopicNotExistError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"route of {topic} never listed both brokers")


def _stored(addrs: list[str], topic: str) -> int:
    return sum(_max_offset(a, topic, q) for a in addrs for q in range(2))


def test_sdk_send_whose_response_is_lost_on_the_wire_is_stored_once_with_two_brokers(tmp_path: Path) -> None:
    """The SDK reaches broker-a through a TCP proxy that drops one SEND_MESSAGE_V2 response (the broker stored the
    message); the producer's attempt times out after half the send timeout, the retry goes to broker-a again and
    its de-duplication answers with the original result: every message is stored exactly once over both brokers.
    Then broker-a becomes unreachable (connect refused): sends move to broker-b, still once each."""
    ns = start_namesrv(tmp_path / "ns")
    ns_addr = f"127.0.0.1:{ns.ports[0]}"
    brokers = [start_broker(tmp_path / name, ns_addr, brokerName=name) for name in ("broker-a", "broker-b")]
    try:
        a_addr, b_addr = (f"127.0.0.1:{b.ports[0]}" for b in brokers)
        topic, n = "DedupTwo", 12

        async def run() -> tuple[list[Any], list[RemotingCommand]]:
            await _two_broker_topic(ns_addr, topic, [a_addr, b_addr])
            async with TcpProxy(a_addr, name="to-broker-a") as to_a:
                hook = rewrite_addresses({a_addr: to_a.addr})  # routes name broker-a by its proxy
                async with TcpProxy(ns_addr, hook=hook, name="to-namesrv") as to_ns:
                    to_a.lose_responses(RequestCode.SEND_MESSAGE_V2, 1)
                    async with Producer("PG_two", namesrv=to_ns.addr, send_timeout_ms=3000) as p:
                        results = [await p.send(Message(topic, b"m%d" % i, {})) for i in range(n)]
                        assert to_a.lost, "no send went to broker-a"
                        await to_a.block()  # broker-a unreachable: nothing can be sent to it
                        moved = [await p.send(Message(topic, b"x%d" % i, {})) for i in range(4)]
                    return results + moved, to_a.lost

        results, lost = asyncio.run(asyncio.wait_for(run(), 90))
        assert all(r.status == SendStatus.SEND_OK for r in results)
        assert len(lost) == 1
        lost_id = (lost[0].ext_fields or {})["msgId"]
        assert lost_id in {r.offset_msg_id for r in results}  # the retry was answered with the original result
        assert _stored([a_addr, b_addr], topic) == n + 4  # exactly once each, over both brokers
        assert int(_runtime(a_addr)["dedupHits"]) >= 1
        assert {r.message_queue.broker_name for r in results[n:]} == {"broker-b"}
    finally:
        for b in brokers:
            b.close()
        ns.close()


def test_a_retry_arriving_while_the_original_waits_for_sync_flush_is_stored_once(tmp_path: Path) -> None:
    """Two identical sends in one TCP write to a SYNC_FLUSH broker: the second is read while the first waits for
    its group commit; it is answered with the first one's result once that is flushed, and stored nowhere."""
    sa = Standalone(tmp_path / "sa", flushDiskType="SYNC_FLUSH").start()
    try:
        host, port = sa.broker_addr.rsplit(":", 1)
        a, b = _send_frame("DedupSync", "UNIQ-S"), _send_frame("DedupSync", "UNIQ-S")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(encode_frame(a) + encode_frame(b))
            decoder, got = FrameDecoder(), {}
            while len(got) < 2:
                data = s.recv(65536)
                assert data, "broker closed the connection"
                got.update({r.opaque: r for r in decoder.feed(data)})
        assert _result(got[a.opaque]) == _result(got[b.opaque])
        assert _max_offset(sa.broker_addr, "DedupSync", 0) == 1
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
