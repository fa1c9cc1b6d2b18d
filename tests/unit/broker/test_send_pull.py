"""Send and pull handlers against a real MessageStore in tmp_path (no sockets: a fake connection object)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time

import pytest

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers import pull as pull_mod
from orbitmq.broker.handlers.send import TRANSACTION_UNSUPPORTED, SendProcessor, decode_batch_body
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.stats import BrokerStats
from orbitmq.model import TopicConfig, iter_records
from orbitmq.model.properties import encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, to_send_v2
from orbitmq.protocol.bodies import SubscriptionData
from orbitmq.store import MessageStore, StoreConfig


class FakeConn:
    def __init__(self, addr: str = "127.0.0.1:5555") -> None:
        self.remote_addr = addr
        self.closed = False
        self.attrs: dict = {}
        self.sent: list[RemotingCommand] = []

    def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def ctx(tmp_path):
    store = MessageStore(StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                                     mapped_file_size_consume_queue=20 * 1000, max_message_size=1024 * 1024,
                                     max_hash_slot_num=1000, max_index_num=4000))
    store.load()
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    config_dir = str(tmp_path / "store" / "config")
    c = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                      ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
    yield c
    asyncio.run(store.shutdown())


def send_req(topic: str, body: bytes = b"x", *, queue_id: int = 0, props: dict | None = None,
             code: int = RequestCode.SEND_MESSAGE, **extra: str) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "7",
           "properties": encode_properties(props or {})}
    ext.update(extra)
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        ext = to_send_v2(ext)
    return RemotingCommand.request(code, ext, body)


def batch_body(messages: list[tuple[bytes, dict[str, str]]]) -> bytes:
    out = bytearray()
    for body, props in messages:
        p = encode_properties(props).encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return bytes(out)


def send(ctx, req: RemotingCommand, conn=None) -> RemotingCommand:
    return asyncio.run(SendProcessor(ctx).handle(conn or FakeConn(), req))


def pull_req(topic: str, offset: int, *, group: str = "G", sys_flag: int = 0x4, expression: str = "*",
             queue_id: int = 0, commit: int = 0, expression_type: str = "TAG", sub_version: int = 0):
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(sys_flag), "commitOffset": str(commit), "suspendTimeoutMillis": "1000",
        "subscription": expression, "subVersion": str(sub_version), "expressionType": expression_type})


def bodies(resp: RemotingCommand) -> list[bytes]:
    return [m.body for m in iter_records(resp.body)]


def test_send_auto_creates_topic_and_answers_offsets(ctx):
    r = send(ctx, send_req("NewTopic", b"hello", props={"TAGS": "A"}))
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields["queueId"] == "0" and r.ext_fields["queueOffset"] == "0"
    assert r.ext_fields["MSG_REGION"] == "DefaultRegion" and r.ext_fields["TRACE_ON"] == "true"
    tc = ctx.topics.get("NewTopic")
    assert tc.read_queue_nums == tc.write_queue_nums == 4 and tc.perm == 6  # min(4, TBW102's 8), no inherit
    rec = ctx.store.look_message_by_offset(0)
    assert rec.body == b"hello" and rec.flag == 7 and rec.born_host == "127.0.0.1:5555"
    assert rec.store_host == "127.0.0.1:10911" and rec.properties["CLUSTER"] == "DefaultCluster"
    assert r.ext_fields["msgId"] == rec.offset_msg_id
    assert ctx.stats.put_msgs_total == 1


def test_send_v2_negative_queue_id_round_robins_and_bad_queue_id_fails(ctx):
    ctx.topics.create_or_update(TopicConfig("T2", 2, 2))
    proc = SendProcessor(ctx)
    conn = FakeConn()
    ids = [asyncio.run(proc.handle(conn, send_req("T2", queue_id=-1, code=RequestCode.SEND_MESSAGE_V2)))
           .ext_fields["queueId"] for _ in range(4)]
    assert sorted(ids) == ["0", "0", "1", "1"]
    r = send(ctx, send_req("T2", queue_id=2))
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in r.remark


def test_send_refusals(ctx):
    r = send(ctx, send_req("bad topic!"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
    r = send(ctx, send_req("OFFSET_MOVED_EVENT"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "forbidden" in r.remark
    r = send(ctx, send_req("T", props={"TRAN_MSG": "true", "PGROUP": "PG"}))
    assert r.code == ResponseCode.NO_PERMISSION and r.remark == TRANSACTION_UNSUPPORTED
    r = send(ctx, RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in r.remark
    ctx.config = dataclasses.replace(ctx.config, auto_create_topic_enable=False)
    ctx.topics = TopicConfigManager(str(ctx.topics.path).rsplit("/", 1)[0] + "/x", ctx.config)
    r = send(ctx, send_req("Unknown"))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and "topic[Unknown] not exist" in r.remark
    ctx.config = dataclasses.replace(ctx.config, broker_role="SLAVE", broker_id=1)
    r = send(ctx, send_req("SELF_TEST_TOPIC_OK"))
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE


def test_retry_topic_past_max_reconsume_goes_to_dlq(ctx):
    r = send(ctx, send_req("%RETRY%G1", b"r0", queue_id=0, reconsumeTimes="2", maxReconsumeTimes="3"))
    assert r.code == ResponseCode.SUCCESS and ctx.topics.get("%RETRY%G1") is not None
    r = send(ctx, send_req("%RETRY%G1", b"r1", queue_id=0, reconsumeTimes="3", maxReconsumeTimes="3",
                           props={"DELAY": "5"}))
    assert r.code == ResponseCode.SUCCESS
    dlq = ctx.topics.get("%DLQ%G1")
    assert dlq is not None and dlq.write_queue_nums == 1
    got = ctx.store.get_message("G", "%DLQ%G1", 0, 0, 32)
    (msg,) = list(iter_records(b"".join(got.buffers)))
    assert msg.body == b"r1" and msg.reconsume_times == 3 and "DELAY" not in msg.properties


def test_delay_level_is_rewritten_into_schedule_topic(ctx):
    r = send(ctx, send_req("TD", b"later", queue_id=1, props={"DELAY": "3"}))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueId"] == "1"
    got = ctx.store.get_message("G", "SCHEDULE_TOPIC_XXXX", 2, 0, 32)
    (msg,) = list(iter_records(b"".join(got.buffers)))
    assert msg.properties["REAL_TOPIC"] == "TD" and msg.properties["REAL_QID"] == "1"
    assert ctx.store.get_max_offset_in_queue("TD", 1) == 0


def test_multi_tag_topic_sets_sysflag(ctx):
    ctx.topics.create_or_update(TopicConfig("TM", 1, 1, topic_filter_type="MULTI_TAG"))
    assert send(ctx, send_req("TM")).code == ResponseCode.SUCCESS
    assert ctx.store.look_message_by_offset(0).sys_flag & 0x2


def test_batch_send_appends_batch_properties_and_consecutive_offsets(ctx):
    body = batch_body([(b"a", {"TAGS": "A", "UNIQ_KEY": "K1"}), (b"b", {"UNIQ_KEY": "K2"})])
    r = send(ctx, send_req("TB", body, props={"WAIT": "true"}, code=RequestCode.SEND_BATCH_MESSAGE, batch="true"))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "0"
    assert len(r.ext_fields["msgId"].split(",")) == 2
    got = ctx.store.get_message("G", "TB", 0, 0, 32)
    msgs = list(iter_records(b"".join(got.buffers)))
    assert [m.queue_offset for m in msgs] == [0, 1]
    assert msgs[1].properties == {"UNIQ_KEY": "K2", "WAIT": "true", "CLUSTER": "DefaultCluster"}
    r = send(ctx, send_req("TB", b"\x00\x00\x00\x09garbage", code=RequestCode.SEND_BATCH_MESSAGE, batch="true"))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    r = send(ctx, send_req("TB", body, code=RequestCode.SEND_BATCH_MESSAGE, batch="true",
                           properties=encode_properties({"DELAY": "2"})))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    with pytest.raises(ValueError):
        decode_batch_body(body[:-1])


def _fill(ctx, topic: str, tags: list[str]) -> None:
    for t in tags:
        assert send(ctx, send_req(topic, t.encode(), props={"TAGS": t})).code == ResponseCode.SUCCESS


def test_pull_filters_by_tag_hash_and_reports_offsets(ctx):
    _fill(ctx, "TP", ["A", "B", "A", "C"])
    proc = pull_mod.build(ctx)
    r = proc.handle(FakeConn(), pull_req("TP", 0, expression="A || C"))
    assert r.code == ResponseCode.SUCCESS and r.remark == "FOUND"
    assert bodies(r) == [b"A", b"A", b"C"]
    assert r.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "4", "minOffset": "0", "maxOffset": "4"}
    r = proc.handle(FakeConn(), pull_req("TP", 1, expression="Z"))
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.remark == "NO_MATCHED_MESSAGE"
    assert r.ext_fields["nextBeginOffset"] == "4"
    assert ctx.stats.get_msgs_total == 3


@pytest.mark.parametrize(
    ("offset", "code", "remark", "next_begin"),
    [(4, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", "4"),
     (9, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", "0")],  # Java: min offset when it is 0
)
def test_pull_status_mapping(ctx, offset, code, remark, next_begin):
    _fill(ctx, "TS", ["A"] * 4)
    r = pull_mod.build(ctx).handle(FakeConn(), pull_req("TS", offset))
    assert (r.code, r.remark, r.ext_fields["nextBeginOffset"]) == (code, remark, next_begin)


def test_pull_on_empty_queue(ctx):
    ctx.topics.create_or_update(TopicConfig("TE", 2, 2))
    proc = pull_mod.build(ctx)
    assert proc.handle(FakeConn(), pull_req("TE", 0)).code == ResponseCode.PULL_NOT_FOUND
    assert proc.handle(FakeConn(), pull_req("TE", 3)).code == ResponseCode.PULL_OFFSET_MOVED


def test_pull_checks_in_order(ctx):
    _fill(ctx, "TC", ["A"])
    proc = pull_mod.build(ctx)
    r = proc.handle(FakeConn(), pull_req("TC", 0, queue_id=8))
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[8] is illegal" in r.remark
    r = proc.handle(FakeConn(), pull_req("Missing", 0))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = proc.handle(FakeConn(), pull_req("TC", 0, expression_type="SQL92", expression="a > 1"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in r.remark
    sgc = ctx.groups.find_or_create("Off")
    sgc.consume_enable = False
    r = proc.handle(FakeConn(), pull_req("TC", 0, group="Off"))
    assert r.code == ResponseCode.NO_PERMISSION
    # without the subscription flag: the heartbeat subscription is required and must be recent enough
    r = proc.handle(FakeConn(), pull_req("TC", 0, sys_flag=0))
    assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    conn = FakeConn()
    ctx.clients.register_consumer(conn, "c1", "G", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                                  {"TC": SubscriptionData.of_expression("TC", "A", 100)}, "JAVA", 409)
    r = proc.handle(conn, pull_req("TC", 0, sys_flag=0, sub_version=200))
    assert r.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    r = proc.handle(conn, pull_req("TC", 0, sys_flag=0, sub_version=100))
    assert r.code == ResponseCode.SUCCESS and bodies(r) == [b"A"]


def test_commit_on_pull_only_on_first_processing(ctx):
    _fill(ctx, "TO", ["A", "A"])
    proc = pull_mod.build(ctx)
    req = pull_req("TO", 2, sys_flag=0x4 | 0x1, commit=1)
    assert proc.handle(FakeConn(), req).code == ResponseCode.PULL_NOT_FOUND
    assert ctx.offsets.query("G", "TO", 0) == 1
    assert proc.rerun(FakeConn(), pull_req("TO", 0, sys_flag=0x4 | 0x1, commit=2)).code == ResponseCode.SUCCESS
    assert ctx.offsets.query("G", "TO", 0) == 1


def test_suspend_flag_parks_the_request(ctx):
    _fill(ctx, "TH", ["A"])
    proc = pull_mod.build(ctx)
    conn = FakeConn()
    assert proc.handle(conn, pull_req("TH", 1, sys_flag=0x4 | 0x2)) is None
    assert len(proc.long_poll) == 1
    proc.long_poll.notify_arriving("TH", 0, 2, None)  # no running loop: answered inline
    assert len(proc.long_poll) == 0
    assert conn.sent and conn.sent[0].code == ResponseCode.PULL_NOT_FOUND  # the store has no offset 1 yet


def test_slave_without_slave_read_answers_retry_immediately(ctx):
    _fill(ctx, "TSL", ["A"])
    ctx.config = dataclasses.replace(ctx.config, broker_role="SLAVE", broker_id=1)
    proc = pull_mod.build(ctx)
    # RIP-32, as Java 5: found messages are delivered (a retry answer carrying the next offset
    # made clients skip them), the client is still sent back to the master; nothing found -> retry at once
    r = proc.handle(FakeConn(), pull_req("TSL", 0, sys_flag=0x5, commit=1))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == "0"
    r = proc.handle(FakeConn(), pull_req("TSL", 1, sys_flag=0x5, commit=1))
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["suggestWhichBrokerId"] == "0"
    assert r.ext_fields["nextBeginOffset"] == "1"
    assert ctx.offsets.query("G", "TSL", 0) == -1
    ctx.acting_master = True  # an acting slave answers like a master
    assert proc.handle(FakeConn(), pull_req("TSL", 1, sys_flag=0x5, commit=1)).code == ResponseCode.PULL_NOT_FOUND


# ---- client registry, heartbeat handler, stats (the state send/pull depend on) ----

def test_registry_expiry_close_and_change_notifications():
    now = [0]
    reg = ClientRegistry(channel_max_idle_ms=120_000, clock_ms=lambda: now[0])
    events: list[tuple[str, bool]] = []
    reg.on_consumer_ids_changed = lambda g, by_client: events.append((g, by_client))
    a, b = FakeConn("10.0.0.1:1"), FakeConn("10.0.0.2:2")
    subs = {"T": SubscriptionData.of_expression("T", "*", 1)}
    assert reg.register_consumer(a, "ca", "G", "CONSUME_PASSIVELY", "CLUSTERING", "X", subs, "JAVA", 409)
    assert not reg.register_consumer(a, "ca", "G", "CONSUME_PASSIVELY", "CLUSTERING", "X", subs, "JAVA", 409)
    changed = {"T": SubscriptionData.of_expression("T", "A", 2)}
    assert reg.register_consumer(a, "ca", "G", "CONSUME_PASSIVELY", "CLUSTERING", "X", changed, "JAVA", 409)
    reg.register_producer(a, "ca", "PG", "JAVA", 409)
    now[0] = 60_000
    assert reg.register_consumer(b, "cb", "G", "CONSUME_PASSIVELY", "CLUSTERING", "X", changed, "JAVA", 409)
    assert sorted(reg.consumer_ids("G")) == ["ca", "cb"] and reg.producer_channels("PG") == [a]
    now[0] = 121_000  # a silent for > 120 s, b heard 61 s ago
    assert reg.scan_expired() == 2  # a's consumer and producer channels
    assert a.closed and reg.consumer_ids("G") == ["cb"] and reg.producer_channels("PG") == []
    assert events == [("G", False)]
    reg.on_connection_closed(b)
    assert reg.consumer_group("G") is None and events[-1] == ("G", False)


def test_heartbeat_creates_retry_topic_and_notifies_group_members(ctx):
    from orbitmq.broker.handlers import heartbeat as hb
    from orbitmq.protocol.bodies import ConsumerData, HeartbeatData

    notifier = hb.ConsumerIdsNotifier(ctx)
    ctx.clients.on_consumer_ids_changed = notifier.on_change
    table = hb.handlers(ctx, notifier)
    a, b = FakeConn(), FakeConn()

    def beat(conn: FakeConn, cid: str) -> RemotingCommand:
        data = HeartbeatData(cid, [], [ConsumerData("G", subscription_data_set=[
            SubscriptionData.of_expression("T", "*", 1)])])
        req = RemotingCommand.request(RequestCode.HEART_BEAT, body=data.to_json())
        req.version = 100
        return table[RequestCode.HEART_BEAT](conn, req)

    r = beat(a, "ca")
    assert r.code == ResponseCode.SUCCESS and r.version == 409
    assert ctx.topics.get("%RETRY%G").read_queue_nums == 1
    beat(b, "cb")
    notes = [c for c in a.sent if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
    assert notes and notes[-1].ext_fields == {"consumerGroup": "G"} and notes[-1].is_oneway
    a.sent.clear()
    table[RequestCode.UNREGISTER_CLIENT](b, RemotingCommand.request(
        RequestCode.UNREGISTER_CLIENT, {"clientID": "cb", "consumerGroup": "G"}))
    assert [c.code for c in a.sent] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
    sql = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=b'{"clientId":"c","group":"G",'
                                  b'"subscriptionData":{"topic":"T","subString":"a>1","expressionType":"SQL92"}}')
    r = asyncio.run(table[RequestCode.CHECK_CLIENT_CONFIG](a, sql))  # async: a SQL92 compile runs off the loop
    assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in r.remark
    tag = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=b'{"clientId":"c","group":"G",'
                                  b'"subscriptionData":{"topic":"T","subString":"*","expressionType":"TAG"}}')
    assert asyncio.run(table[RequestCode.CHECK_CLIENT_CONFIG](a, tag)).code == ResponseCode.SUCCESS


def test_stats_tps_over_completed_seconds():
    now = [10_000]
    stats = BrokerStats(clock_ms=lambda: now[0])
    for _ in range(30):
        stats.on_put(2, 100)
    stats.on_get(0, 0)
    now[0] += 1_000
    assert stats.put_tps(10) == 6.0 and stats.put_tps(60) == 1.0
    info = stats.runtime_info()
    assert info["msgPutTotalTodayNow"] == "60" and info["putTps"].split()[0] == "6.00"
    assert info["getMissTps"].split()[0] == "0.10"
    now[0] += 700_000  # the window slid past: rates fall back to zero, totals stay
    assert stats.put_tps(60) == 0.0 and stats.put_msgs_total == 60


def test_queue_locks_grant_refresh_expire_and_unlock(ctx):
    from orbitmq.broker.handlers.consumer import QueueLockTable, handlers
    from orbitmq.model import MessageQueue
    from orbitmq.protocol.bodies import LockBatchBody, LockBatchResponseBody

    now = [0]
    table = handlers(ctx, QueueLockTable(clock_ms=lambda: now[0]))
    q0, q1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)

    def lock(client: str, mqs) -> list:
        req = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=LockBatchBody("G", client, mqs).to_json())
        r = table[RequestCode.LOCK_BATCH_MQ](FakeConn(), req)
        assert r.code == ResponseCode.SUCCESS
        return sorted(LockBatchResponseBody.from_json(r.body).lock_ok_mq_set)

    assert lock("c1", [q0]) == [q0]
    assert lock("c2", [q0, q1]) == [q1]  # q0 held by a live c1
    now[0] = 30_000
    assert lock("c1", [q0]) == [q0]  # refresh by the owner
    now[0] = 89_000
    assert lock("c2", [q0]) == []  # refreshed 59 s ago: still c1's
    now[0] = 91_000
    assert lock("c2", [q0, q1]) == [q0, q1]  # q0 expired, q1 is c2's own
    unlock = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=LockBatchBody("G", "c1", [q1]).to_json())
    assert table[RequestCode.UNLOCK_BATCH_MQ](FakeConn(), unlock).code == ResponseCode.SUCCESS
    assert lock("c1", [q1]) == []  # c1 cannot unlock c2's queue
    unlock = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=LockBatchBody("G", "c2", [q1]).to_json())
    table[RequestCode.UNLOCK_BATCH_MQ](FakeConn(), unlock)
    assert lock("c1", [q1]) == [q1]


def test_router_unknown_codes_oneway_and_not_accepting():
    from orbitmq.broker.router import Router

    router = Router({RequestCode.HEART_BEAT: lambda conn, cmd: cmd.response(0, "hb")})
    r = router(FakeConn(), RemotingCommand.request(777))
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and r.remark == " request type 777 not supported"
    assert router(FakeConn(), RemotingCommand.request(777, oneway=True)) is None
    assert router(FakeConn(), RemotingCommand.request(RequestCode.HEART_BEAT)).remark == "hb"
    vip = router.without([RequestCode.HEART_BEAT])
    assert vip(FakeConn(), RemotingCommand.request(RequestCode.HEART_BEAT)).code == 3
    router.accepting = False
    assert router(FakeConn(), RemotingCommand.request(RequestCode.HEART_BEAT)).code == 14
