"""Send fast path: ASYNC_FLUSH (and WAIT=false) sends are answered synchronously, no task; SYNC_FLUSH returns
DEFERRED and the group commit's callback answers through conn.reply, no task either; both give the same response as
the coroutine form handle()."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time

import pytest

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.properties import encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, encode_frame, to_send_v2
from orbitmq.protocol.frame import EncodedResponse
from orbitmq.remoting.connection import DEFERRED
from orbitmq.store import MessageStore, StoreConfig


def answer_of(r: object) -> RemotingCommand:
    """dispatch()'s synchronous answer as a command: a PUT_OK comes as its encoded frame (EncodedResponse), which
    must be exactly what the encoder gives for the command it holds."""
    if type(r) is EncodedResponse:
        cmd = r.decode()
        assert r.frame == encode_frame(cmd) and r.code == cmd.code
        return cmd
    assert isinstance(r, RemotingCommand), r
    return r


class FakeConn:
    remote_addr = "127.0.0.1:5555"
    closed = False
    attrs: dict = {}

    def __init__(self) -> None:
        self.replies: list[tuple[RemotingCommand, RemotingCommand | None]] = []
        self.errors: list[tuple[RemotingCommand, BaseException]] = []

    def reply(self, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        self.replies.append((req, resp))

    def reply_error(self, req: RemotingCommand, exc: BaseException) -> None:
        self.errors.append((req, exc))


def make_ctx(tmp_path, flush: str) -> BrokerContext:
    store = MessageStore(StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                                     mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                                     max_index_num=4000, max_message_size=1024 * 1024,
                                     flush_disk_type=flush))
    store.load()
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    config_dir = str(tmp_path / "store" / "config")
    return BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                         ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")


def send_req(topic: str, props: dict[str, str] | None = None) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": encode_properties(props or {})}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, to_send_v2(ext), b"body")


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_async_flush_answers_synchronously_sync_flush_after_group_commit(tmp_path, flush):
    ctx = make_ctx(tmp_path, flush)
    proc = SendProcessor(ctx)

    async def main():
        await ctx.store.start()
        try:
            # a first send starts the lazily started background loops (group commit, derived flush, the topic
            # table's write-behind): the measured send comes after it
            warm = FakeConn()
            if proc.dispatch(warm, send_req("T1")) is DEFERRED:
                for _ in range(200):
                    if warm.replies:
                        break
                    await asyncio.sleep(0.005)
            conn = FakeConn()
            req = send_req("T1")
            tasks_before = asyncio.all_tasks()
            r = proc.dispatch(conn, req)
            if flush == "ASYNC_FLUSH":
                resp = answer_of(r)  # no coroutine, no task
            else:
                assert r is DEFERRED and not inspect.iscoroutine(r)
                assert conn.replies == []  # not before the group commit
                assert len(asyncio.all_tasks() - tasks_before) <= 1  # at most the shared group-commit loop
                for _ in range(200):
                    if conn.replies:
                        break
                    await asyncio.sleep(0.005)
                [(answered, resp)] = conn.replies
                assert answered is req and not conn.errors
                assert ctx.store.flushed_offset >= ctx.store.max_phys_offset  # answered after the flush
            assert resp.code == ResponseCode.SUCCESS
            assert resp.ext_fields["queueOffset"] == "1" and resp.ext_fields["msgId"]
            # WAIT=false never waits, even in SYNC_FLUSH
            r2 = proc.dispatch(FakeConn(), send_req("T1", {"WAIT": "false"}))
            assert answer_of(r2).ext_fields["queueOffset"] == "2"
            # the coroutine form gives the same kind of answer
            r3 = await proc.handle(FakeConn(), send_req("T1"))
            assert r3.code == ResponseCode.SUCCESS and r3.ext_fields["queueOffset"] == "3"
        finally:
            await ctx.store.shutdown()

    asyncio.run(main())


def test_refused_send_is_answered_synchronously_in_sync_flush(tmp_path):
    ctx = make_ctx(tmp_path, "SYNC_FLUSH")
    r = SendProcessor(ctx).dispatch(FakeConn(), send_req("SCHEDULE_TOPIC_XXXX"))
    assert isinstance(r, RemotingCommand) and r.code == ResponseCode.SYSTEM_ERROR
    asyncio.run(ctx.store.shutdown())


def _raw_req(ext: dict[str, str], v2: bool) -> RemotingCommand:
    code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    return RemotingCommand.request(code, to_send_v2(ext) if v2 else ext, b"body")


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize(("drop", "bad", "remark"), [
    ("topic", None, "the custom field <topic> is null"),
    ("producerGroup", None, "the custom field <producerGroup> is null"),
    ("queueId", None, "the custom field <queueId> is null"),
    ("bornTimestamp", None, "the custom field <bornTimestamp> is null"),
    (None, ("sysFlag", "x1"), "the custom field <sysFlag> is not a number: 'x1'"),
    (None, ("flag", ""), "the custom field <flag> is not a number: ''"),
    # two bad fields: the first in the header's check order is reported (topic before queueId)
    ("topic", ("queueId", "nope"), "the custom field <topic> is null"),
    ("queueId", ("sysFlag", "?"), "the custom field <queueId> is null"),
])
def test_missing_or_bad_required_field_gives_system_error_with_the_checked_remark(tmp_path, v2, drop, bad, remark):
    ctx = make_ctx(tmp_path, "ASYNC_FLUSH")
    ext = {"producerGroup": "PG", "topic": "T1", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": ""}
    if drop:
        del ext[drop]
    if bad:
        ext[bad[0]] = bad[1]
    r = SendProcessor(ctx).dispatch(FakeConn(), _raw_req(ext, v2))
    assert isinstance(r, RemotingCommand)
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    assert ctx.store.max_phys_offset == 0  # nothing stored
    asyncio.run(ctx.store.shutdown())


def test_put_ok_response_has_every_field_of_a_built_response(tmp_path):
    ctx = make_ctx(tmp_path, "ASYNC_FLUSH")
    ctx.config = dataclasses.replace(ctx.config, region_id="RegionX", trace_on=False)
    req = send_req("T1")
    req.serialize_type = 1  # ROCKETMQ binary: the answer keeps the request's serialization
    r = SendProcessor(ctx).dispatch(FakeConn(), req)
    assert isinstance(r, RemotingCommand)
    want = req.response(ResponseCode.SUCCESS, None, {"MSG_REGION": "RegionX", "TRACE_ON": "false",
                                                     "msgId": r.ext_fields["msgId"], "queueId": "0",
                                                     "queueOffset": "0"})
    assert r == want and len(r.ext_fields["msgId"]) == 32
    assert ctx.stats.put_msgs_total == 1
    asyncio.run(ctx.store.shutdown())
