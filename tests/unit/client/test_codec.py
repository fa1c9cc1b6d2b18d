"""Client-side wire shapes: send headers (V2), batch body, message preparation (UNIQ_KEY, compression, retry
headers), send/pull response parsing, record decoding with zlib and tag re-filter, broker-initiated requests."""

from __future__ import annotations

import asyncio
import struct
import zlib

import pytest

from orbitmq.client import errors
from orbitmq.client.broker_api import (
    PULL_FLAG_SUSPEND,
    PullStatus,
    decode_messages,
    parse_pull_response,
    pull_header,
)
from orbitmq.client.instance import ClientInstance, parse_reset_offset_body
from orbitmq.client.producer import (
    Producer,
    SendStatus,
    build_send_header,
    encode_batch_body,
    header_template,
    parse_send_response,
    validate_topic,
)
from orbitmq.model import (
    Message,
    MessageQueue,
    UniqIdGenerator,
    decode_properties,
    encode_properties,
    encode_record,
    pack_host,
)
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson, normalize_send_header

MQ = MessageQueue("T", "broker-a", 2)


def record(body: bytes, props: dict[str, str], *, sys_flag: int = 0, queue_offset: int = 0) -> bytes:
    return encode_record(topic=b"T", body=body, properties=encode_properties(props).encode(), queue_id=2, flag=0,
                         sys_flag=sys_flag, born_timestamp=1, born_host=pack_host("10.0.0.1", 5),
                         store_host=pack_host("10.0.0.2", 10911), queue_offset=queue_offset, phys_offset=100)


def test_send_header_v2_has_the_java_fields_and_normalizes_to_v1():
    h = build_send_header(header_template("PG", "T", 4), 2, 1, 1700, 7, "a\x01b", 0, None, False, "broker-a")
    assert h["a"] == "PG" and h["b"] == "T" and h["c"] == "TBW102" and h["d"] == "4" and h["e"] == "2"
    assert (h["f"], h["g"], h["h"], h["i"], h["j"], h["k"], h["m"], h["n"]) == (
        "1", "1700", "7", "a\x01b", "0", "false", "false", "broker-a")
    assert "l" not in h
    v1 = normalize_send_header(h)
    assert v1["producerGroup"] == "PG" and v1["queueId"] == "2" and v1["batch"] == "false"
    t = header_template("PG", "T", 4)
    build_send_header(t, 0, 0, 0, 0, "")
    assert "e" not in t  # template never mutated


def test_batch_body_layout_is_size_magic_crc_flag_body_props():
    msgs = [Message("T", b"hello", {"UNIQ_KEY": "U1"}, flag=3), Message("T", b"", {})]
    raw = encode_batch_body(msgs, [encode_properties(m.properties) for m in msgs])
    total, magic, crc, flag, blen = struct.unpack_from(">iiiii", raw, 0)
    assert (magic, crc, flag, blen) == (0, 0, 3, 5) and raw[20:25] == b"hello"
    (plen,) = struct.unpack_from(">h", raw, 25)
    assert decode_properties(raw[27:27 + plen].decode()) == {"UNIQ_KEY": "U1"}
    assert total == 27 + plen
    assert struct.unpack_from(">i", raw, total)[0] == len(raw) - total


def fresh_producer(**kw) -> Producer:
    p = Producer("PG", "127.0.0.1:1", **kw)
    p._ids = UniqIdGenerator("10.0.0.1", seed=1)
    return p


def test_prepare_sets_uniq_key_once_and_compresses_big_bodies():
    p = fresh_producer(compress_over_bytes=100)
    m = Message("T", b"a" * 1000)
    body, sys_flag, props, _, _ = p._prepare(m)
    uid = m.properties["UNIQ_KEY"]
    assert len(uid) == 32 and sys_flag & 1 and zlib.decompress(body) == m.body
    assert decode_properties(props)["UNIQ_KEY"] == uid
    p._prepare(m)
    assert m.properties["UNIQ_KEY"] == uid  # kept across retries/resends
    body, sys_flag, _, _, _ = p._prepare(Message("T", b"small"))
    assert body == b"small" and sys_flag == 0


def test_prepare_moves_reconsume_properties_into_header_fields_for_retry_topics():
    p = fresh_producer()
    m = Message("%RETRY%G", b"x", {"RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "16", "TAGS": "A"})
    _, _, props, rt, mrt = p._prepare(m)
    assert (rt, mrt) == (2, 16)
    assert "RECONSUME_TIME" not in decode_properties(props) and decode_properties(props)["TAGS"] == "A"


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "T/1"])
def test_bad_topics_are_rejected(topic):
    with pytest.raises(errors.MessageValidationError):
        validate_topic(topic)


def test_empty_body_is_rejected():
    with pytest.raises(errors.MessageValidationError):
        fresh_producer()._prepare(Message("T", b""))


def response(code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand(code, flag=1, ext_fields=ext, body=body)


@pytest.mark.parametrize("code,status", [(0, SendStatus.SEND_OK), (10, SendStatus.FLUSH_DISK_TIMEOUT),
                                         (11, SendStatus.SLAVE_NOT_AVAILABLE), (12, SendStatus.FLUSH_SLAVE_TIMEOUT)])
def test_send_response_stored_codes(code, status):
    r = parse_send_response(response(code, {"msgId": "OFF", "queueId": "2", "queueOffset": "9",
                                            "MSG_REGION": "DefaultRegion"}), "a:1", MQ, "UNIQ")
    assert (r.status, r.msg_id, r.offset_msg_id, r.message_queue, r.queue_offset) == (status, "UNIQ", "OFF", MQ, 9)


def test_send_response_error_codes_raise_their_class():
    with pytest.raises(errors.TopicNotExistError) as ei:
        parse_send_response(response(17, None), "a:1", MQ, "U")
    assert ei.value.retriable
    with pytest.raises(errors.SystemBusyError):
        parse_send_response(response(2, None), "a:1", MQ, "U")


def test_decode_messages_inflates_zlib_and_refilters_tags():
    body = record(zlib.compress(b"payload"), {"TAGS": "A"}, sys_flag=1) + record(b"other", {"TAGS": "B"},
                                                                                   queue_offset=1)
    msgs = decode_messages(body)
    assert [m.body for m in msgs] == [b"payload", b"other"]
    assert [m.body for m in decode_messages(body, frozenset({"B"}))] == [b"other"]


def test_pull_response_statuses():
    ext = {"nextBeginOffset": "5", "minOffset": "0", "maxOffset": "5", "suggestWhichBrokerId": "0"}
    r = parse_pull_response(response(0, ext, record(b"m", {"TAGS": "A"})), "a:1", None)
    assert r.status is PullStatus.FOUND and r.next_begin_offset == 5 and r.msgs[0].properties["MAX_OFFSET"] == "5"
    assert parse_pull_response(response(19, ext), "a:1", None).status is PullStatus.NO_NEW_MSG
    assert parse_pull_response(response(20, ext), "a:1", None).status is PullStatus.NO_MATCHED_MSG
    assert parse_pull_response(response(21, ext), "a:1", None).status is PullStatus.OFFSET_ILLEGAL
    with pytest.raises(errors.SubscriptionNotLatestError):
        parse_pull_response(response(25, ext), "a:1", None)


def test_pull_header_fields():
    h = pull_header("G", MQ, 7, 32, PULL_FLAG_SUSPEND, 0, 15000, "A || B", 123)
    assert h["consumerGroup"] == "G" and h["queueId"] == "2" and h["queueOffset"] == "7"
    assert h["sysFlag"] == "2" and h["suspendTimeoutMillis"] == "15000" and h["subVersion"] == "123"
    assert h["expressionType"] == "TAG" and h["subscription"] == "A || B"


def test_reset_offset_body_both_forms():
    java = fastjson.dumps({"offsetTable": {MQ: 12}})
    assert parse_reset_offset_body(java) == {MQ: 12}
    cpp = fastjson.dumps({"offsetTable": [{"brokerName": "broker-a", "offset": 4, "queueId": 2, "topic": "T"}]})
    assert parse_reset_offset_body(cpp) == {MQ: 4}


class FakeConsumer:
    group = "G"

    def __init__(self) -> None:
        self.rebalanced = 0
        self.reset: list = []

    def trigger_rebalance(self) -> None:
        self.rebalanced += 1

    async def reset_offset(self, topic, table) -> None:
        self.reset.append((topic, table))

    def offsets_of(self, topic):
        return {MQ: 3}

    def running_info(self):
        return {"properties": {"a": "b"}}


class FakeConn:
    remote_addr = "1.2.3.4:10911"


def test_broker_initiated_requests_are_answered():
    async def main():
        inst = ClientInstance("127.0.0.1:1", "unit", client_ip="10.0.0.1")
        c = FakeConsumer()
        inst.consumers["G"] = c
        notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"},
                                         oneway=True)
        assert inst._on_request(FakeConn(), notify) is None and c.rebalanced == 1
        status = inst._on_request(FakeConn(), RemotingCommand.request(
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": "T", "group": "G"}))
        assert status.code == 0 and fastjson.loads(status.body)["messageQueueTable"] == {MQ: 3}
        info = inst._on_request(FakeConn(), RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G", "clientId": inst.client_id}))
        assert info.code == 0 and fastjson.loads(info.body) == {"properties": {"a": "b"}}
        missing = inst._on_request(FakeConn(), RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "nope", "clientId": "x"}))
        assert missing.code == ResponseCode.SYSTEM_ERROR
        reset = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                        {"topic": "T", "group": "G", "timestamp": "0", "isForce": "true"},
                                        fastjson.dumps({"offsetTable": {MQ: 0, MessageQueue("U", "b", 0): 1}}),
                                        oneway=True)
        assert inst._on_request(FakeConn(), reset) is None
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert c.reset == [("T", {MQ: 0})]
        unknown = inst._on_request(FakeConn(), RemotingCommand.request(9999))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        await inst.tasks.close()
        await inst.remoting.close()

    asyncio.run(main())
