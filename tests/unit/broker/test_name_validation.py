"""Every broker entry point refuses illegal topic/group names with SYSTEM_ERROR (or MESSAGE_ILLEGAL for a long
batch topic) and a remark, and stores nothing: no message, topic, group, offset, client or lock."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers import admin, consumer, heartbeat, offsets, pull, query
from orbitmq.broker.handlers.guard import guarded, request_name_error
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.properties import encode_properties
from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, to_send_v2
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, LockBatchBody, ProducerData, SubscriptionData
from orbitmq.store import MessageStore, StoreConfig

BAD_TOPICS = ["T\n", "../x", "a/../../b", "T\x00", "", "t" * 128, "a.b", "%RETRY%", "%RETRY%" + "g" * 121]
BAD_GROUPS = ["G\n", "../g", "G\x00x", "", "g" * 256, "g/h"]
BAD_CONSUMER_GROUPS = [*BAD_GROUPS, "g" * 121]  # %RETRY%<group> must be a legal topic


class FakeConn:
    def __init__(self) -> None:
        self.remote_addr = "127.0.0.1:5555"
        self.closed = False
        self.attrs: dict[str, Any] = {}
        self.sent: list[RemotingCommand] = []

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


@pytest.fixture
def ctx(tmp_path: Any) -> Iterator[BrokerContext]:
    store = MessageStore(StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024, max_message_size=1024 * 1024,
                                     mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=100,
                                     max_index_num=400))
    store.load()
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    config_dir = str(tmp_path / "store" / "config")
    c = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                      ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
    yield c
    asyncio.run(store.shutdown())


class Snapshot:
    """What an entry point could have stored; equal before and after a refused request."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.state = (ctx.store.max_phys_offset, sorted(ctx.topics.all()), sorted(ctx.groups.all()),
                      json.dumps(ctx.offsets.table(), sort_keys=True), ctx.clients.consumer_group("G"),
                      sorted(os.listdir(ctx.store.root_dir)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Snapshot) and self.state == other.state


def assert_refused(resp: RemotingCommand | None, code: int = ResponseCode.SYSTEM_ERROR) -> None:
    assert resp is not None and resp.code == code, (resp.code if resp else None, resp.remark if resp else None)
    assert resp.remark and len(resp.remark) < 1000


def send_req(topic: str, *, group: str = "PG", code: int = RequestCode.SEND_MESSAGE,
             body: bytes = b"x") -> RemotingCommand:
    ext = {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": encode_properties({})}
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        ext = to_send_v2(ext)
    return RemotingCommand.request(code, ext, body)


def send(ctx: BrokerContext, req: RemotingCommand) -> RemotingCommand:
    return asyncio.run(SendProcessor(ctx).handle(FakeConn(), req))


# ---- send -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
@pytest.mark.parametrize("topic", [*BAD_TOPICS, "TBW102", "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"])
def test_send_refuses_illegal_topics(ctx: BrokerContext, code: int, topic: str) -> None:
    before = Snapshot(ctx)
    assert_refused(send(ctx, send_req(topic, code=code)))
    assert Snapshot(ctx) == before


@pytest.mark.parametrize("group", BAD_GROUPS)
def test_send_refuses_illegal_producer_groups(ctx: BrokerContext, group: str) -> None:
    before = Snapshot(ctx)
    assert_refused(send(ctx, send_req("T", group=group, code=RequestCode.SEND_MESSAGE_V2)))
    assert Snapshot(ctx) == before


def _batch(n: int = 1) -> bytes:
    import struct
    out = b""
    for _ in range(n):
        out += struct.pack(">iiiii", 20 + 1 + 2, 0, 0, 0, 1) + b"x" + struct.pack(">h", 0)
    return out


@pytest.mark.parametrize("topic", [t for t in BAD_TOPICS if t])
def test_batch_send_refuses_illegal_topics(ctx: BrokerContext, topic: str) -> None:
    before = Snapshot(ctx)
    resp = send(ctx, send_req(topic, code=RequestCode.SEND_BATCH_MESSAGE, body=_batch()))
    long_topic = len(topic) > 127
    assert_refused(resp, ResponseCode.MESSAGE_ILLEGAL if long_topic or topic.startswith("%RETRY%")
                   else ResponseCode.SYSTEM_ERROR)
    assert Snapshot(ctx) == before


def test_legal_sends_still_work(ctx: BrokerContext) -> None:
    assert send(ctx, send_req("Good_Topic-1%|x")).code == ResponseCode.SUCCESS
    assert send(ctx, send_req("%RETRY%G", code=RequestCode.SEND_MESSAGE_V2)).code == ResponseCode.SUCCESS
    assert send(ctx, send_req("T" * 127, group="p" * 255)).code == ResponseCode.SUCCESS
    assert ctx.store.max_phys_offset > 0


# ---- pull -----------------------------------------------------------------------------------------------------
def pull_req(group: str, topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": str(0x1 | 0x4), "commitOffset": "5", "suspendTimeoutMillis": "1000", "subscription": "*"})


@pytest.mark.parametrize(("group", "topic"), [(g, "T") for g in BAD_CONSUMER_GROUPS] + [("G", t) for t in BAD_TOPICS])
def test_pull_refuses_illegal_names_and_commits_nothing(ctx: BrokerContext, group: str, topic: str) -> None:
    before = Snapshot(ctx)
    assert_refused(pull.handlers(ctx)[RequestCode.PULL_MESSAGE](FakeConn(), pull_req(group, topic)))
    assert Snapshot(ctx) == before


# ---- heartbeat -----------------------------------------------------------------------------------------------
def beat(ctx: BrokerContext, data: HeartbeatData) -> RemotingCommand:
    req = RemotingCommand.request(RequestCode.HEART_BEAT, body=data.to_json())
    return heartbeat.handlers(ctx)[RequestCode.HEART_BEAT](FakeConn(), req)


def _consumer(group: str, topic: str = "T") -> ConsumerData:
    return ConsumerData(group, subscription_data_set=[SubscriptionData.of_expression(topic, "*", 1)])


@pytest.mark.parametrize("data", [
    *[HeartbeatData("c1", [], [_consumer(g)]) for g in BAD_CONSUMER_GROUPS],
    *[HeartbeatData("c1", [], [_consumer("G", t)]) for t in BAD_TOPICS],
    *[HeartbeatData("c1", [ProducerData(g)], [_consumer("G")]) for g in BAD_GROUPS],
    HeartbeatData("c1", [], [_consumer("G"), _consumer("../evil")]),  # nothing of the good group either
])
def test_heartbeat_refuses_illegal_names_and_registers_nothing(ctx: BrokerContext, data: HeartbeatData) -> None:
    before = Snapshot(ctx)
    assert_refused(beat(ctx, data))
    assert Snapshot(ctx) == before
    assert ctx.clients.producer_channels("PG") == [] and ctx.topics.get("%RETRY%G") is None


def test_legal_heartbeat_registers(ctx: BrokerContext) -> None:
    r = beat(ctx, HeartbeatData("c1", [ProducerData("p" * 255)], [_consumer("g" * 120)]))
    assert r.code == ResponseCode.SUCCESS and ctx.topics.get("%RETRY%" + "g" * 120) is not None


def test_unregister_client_refuses_illegal_groups(ctx: BrokerContext) -> None:
    req = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "G\n"})
    assert_refused(heartbeat.handlers(ctx)[RequestCode.UNREGISTER_CLIENT](FakeConn(), req))


# ---- offsets / queries ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET])
@pytest.mark.parametrize(("group", "topic"), [("G\n", "T"), ("../g", "T"), ("G", "T\n"), ("G", "../../t")])
def test_offset_requests_refuse_illegal_names(ctx: BrokerContext, code: int, group: str, topic: str) -> None:
    before = Snapshot(ctx)
    ext = {"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "9"}
    assert_refused(offsets.handlers(ctx)[code](FakeConn(), RemotingCommand.request(code, ext)))
    oneway = RemotingCommand.request(code, dict(ext), oneway=True)
    assert offsets.handlers(ctx)[code](FakeConn(), oneway) is None  # a oneway refusal answers nothing
    assert Snapshot(ctx) == before


@pytest.mark.parametrize("code", [RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                                  RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME])
def test_queue_offset_requests_refuse_illegal_topics(ctx: BrokerContext, code: int) -> None:
    ext = {"topic": "../T", "queueId": "0", "timestamp": "0"}
    assert_refused(offsets.handlers(ctx)[code](FakeConn(), RemotingCommand.request(code, ext)))


def test_query_message_refuses_illegal_topic(ctx: BrokerContext) -> None:
    ext = {"topic": "T\n", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"}
    req = RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext)
    assert_refused(query.handlers(ctx)[RequestCode.QUERY_MESSAGE](FakeConn(), req))


# ---- lock / unlock / consumer list ---------------------------------------------------------------------------
@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
@pytest.mark.parametrize(("group", "topic"), [("G\n", "T"), ("G", "../T"), ("g" * 121, "T")])
def test_lock_requests_refuse_illegal_names(ctx: BrokerContext, code: int, group: str, topic: str) -> None:
    body = LockBatchBody(group, "c1", [MessageQueue(topic, "broker-a", 0)]).to_json()
    table = consumer.handlers(ctx)
    assert_refused(table[code](FakeConn(), RemotingCommand.request(code, body=body)))
    good = LockBatchBody("G", "c1", [MessageQueue("T", "broker-a", 0)]).to_json()
    assert table[code](FakeConn(), RemotingCommand.request(code, body=good)).code == ResponseCode.SUCCESS


def test_consumer_list_refuses_illegal_group(ctx: BrokerContext) -> None:
    req = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G\x00"})
    resp = consumer.handlers(ctx)[RequestCode.GET_CONSUMER_LIST_BY_GROUP](FakeConn(), req)
    assert_refused(resp)
    assert "illegal characters" in (resp.remark or "")


# ---- admin ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_admin_create_and_delete_topic_refuse_illegal_names(ctx: BrokerContext, topic: str) -> None:
    before = Snapshot(ctx)
    table = admin.handlers(ctx)
    ext = {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
    assert_refused(table[RequestCode.UPDATE_AND_CREATE_TOPIC](None, RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC, ext)))
    assert_refused(table[RequestCode.DELETE_TOPIC_IN_BROKER](None, RemotingCommand.request(
        RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})))
    assert Snapshot(ctx) == before


def test_admin_delete_of_dot_dot_removes_nothing(ctx: BrokerContext) -> None:
    send(ctx, send_req("Kept"))
    ctx.store.delete_topics({".."})  # even past the handler, the store never removes a path for such a name
    assert ctx.store.get_max_offset_in_queue("Kept", 0) == 1
    assert os.path.isdir(os.path.join(ctx.store.root_dir, "consumequeue", "Kept"))


@pytest.mark.parametrize("group", BAD_CONSUMER_GROUPS)
def test_admin_subscription_group_refuses_illegal_names(ctx: BrokerContext, group: str) -> None:
    before = Snapshot(ctx)
    body = json.dumps({"groupName": group or " "}).encode()
    resp = admin.handlers(ctx)[RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP](None, RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
    assert_refused(resp)
    assert Snapshot(ctx) == before


@pytest.mark.parametrize(("code", "ext"), [
    (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G\n", "removeOffset": "true"}),
    (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "../T"}),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "T\n"}),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "../G"}),
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "P\x00"}),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": ""}),
    (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "T", "group": "G/..", "timestamp": "0", "isForce": "true"}),
])
def test_admin_requests_refuse_illegal_names(ctx: BrokerContext, code: int, ext: dict[str, str]) -> None:
    before = Snapshot(ctx)
    assert_refused(admin.handlers(ctx)[code](None, RemotingCommand.request(code, ext)))
    assert Snapshot(ctx) == before


# ---- the guard over service handlers (pop, ack, change invisible, send-back, transactions) --------------------
SERVICE_CASES = [
    (RequestCode.POP_MESSAGE, {"consumerGroup": "G\n", "topic": "T"}),
    (RequestCode.POP_MESSAGE, {"consumerGroup": "G", "topic": "../T"}),
    (RequestCode.ACK_MESSAGE, {"consumerGroup": "G\x00", "topic": "T", "extraInfo": "x"}),
    (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {"consumerGroup": "G", "topic": "T\n", "extraInfo": "x"}),
    (RequestCode.NOTIFICATION, {"consumerGroup": "g" * 121, "topic": "T"}),
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "../G", "offset": "0", "delayLevel": "0"}),
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g" * 121, "offset": "0", "delayLevel": "0"}),
    (RequestCode.END_TRANSACTION, {"producerGroup": "P\n"}),
]


@pytest.mark.parametrize(("code", "ext"), SERVICE_CASES)
def test_guard_refuses_before_the_service_handler_runs(code: int, ext: dict[str, str]) -> None:
    calls: list[int] = []

    async def service_handler(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        calls.append(cmd.code)
        return cmd.response()

    table = guarded({code: service_handler})
    resp = asyncio.run(table[code](None, RemotingCommand.request(code, ext)))
    assert_refused(resp)
    assert calls == []
    legal = {k: ("G" if k.endswith("roup") else "T" if k == "topic" else v) for k, v in ext.items()}
    assert asyncio.run(table[code](None, RemotingCommand.request(code, legal))).code == ResponseCode.SUCCESS
    assert calls == [code]


def test_guard_checks_batch_ack_bodies() -> None:
    bad = json.dumps({"acks": [{"c": "G", "t": "T"}, {"c": "G", "t": "../T"}]}).encode()
    good = json.dumps({"acks": [{"c": "G", "t": "T"}]}).encode()
    assert request_name_error(RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, body=bad)) is not None
    assert request_name_error(RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, body=good)) is None


def test_guard_is_idempotent_and_leaves_other_codes_alone() -> None:
    def h(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response()

    once = guarded({RequestCode.PULL_MESSAGE: h, RequestCode.GET_ALL_TOPIC_CONFIG: h})
    twice = guarded(once)
    assert twice[RequestCode.PULL_MESSAGE] is once[RequestCode.PULL_MESSAGE]
    assert once[RequestCode.GET_ALL_TOPIC_CONFIG] is h


# ---- config/*.json with illegal names ------------------------------------------------------------------------
def test_config_files_skip_entries_with_illegal_names(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "topics.json").write_text(json.dumps({"topicConfigTable": {
        "Good": {"topicName": "Good", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
        "../evil": {"topicName": "../evil"}, "T\n": {"topicName": "T\n"}}}))
    (config_dir / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {
        "GoodG": {"groupName": "GoodG"}, "bad\u0000g": {"groupName": "bad\u0000g"}}}))
    (config_dir / "consumerOffset.json").write_text(json.dumps({"offsetTable": {
        "Good@GoodG": {"0": 3}, "../evil@GoodG": {"0": 1}, "Good@../g": {"0": 1}, "noseparator": {"0": 1}}}))
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    topics, groups, offs = (TopicConfigManager(str(config_dir), cfg), SubscriptionGroupManager(str(config_dir), cfg),
                            ConsumerOffsetManager(str(config_dir)))
    with caplog.at_level("WARNING"):
        topics.load()
        groups.load()
        offs.load()
    assert topics.get("Good") is not None and topics.get("../evil") is None and topics.get("T\n") is None
    assert groups.get("GoodG") is not None and groups.get("bad\x00g") is None
    assert offs.table() == {"Good@GoodG": {0: 3}}
    assert "../evil" in caplog.text and "skipped" in caplog.text


@pytest.mark.parametrize(("key", "value"), [("broker_name", "broker.a"), ("broker_name", "../b"),
                                            ("broker_cluster_name", "C\n"), ("broker_cluster_name", "c" * 101)])
def test_broker_and_cluster_names_outside_the_safe_set_stop_start_up(tmp_path: Any, key: str, value: str) -> None:
    import dataclasses

    from orbitmq.base.errors import ConfigError

    cfg = dataclasses.replace(BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1"), **{key: value})
    with pytest.raises(ConfigError, match="illegal characters|longer than"):
        TopicConfigManager(str(tmp_path / "config"), cfg)
    assert not (tmp_path / "config").exists()


# ---- name server registration --------------------------------------------------------------------------------
def _register(name: str, cluster: str, topics: tuple[str, ...] = ("T1",)) -> RemotingCommand:
    from orbitmq.model.topic import TopicConfig
    from orbitmq.protocol.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper

    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in topics}, DataVersion(timestamp=1, counter=1))
    ext = {"brokerName": name, "brokerAddr": "127.0.0.1:10911", "clusterName": cluster, "brokerId": "0",
           "haServerAddr": "127.0.0.1:10912"}
    cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper, []).encode())
    cmd.version = 409
    return cmd


def _namesrv() -> Any:
    from orbitmq.namesrv.config import NamesrvConfig
    from orbitmq.namesrv.handlers import NamesrvHandlers
    from orbitmq.namesrv.kv_config import KvConfig
    from orbitmq.namesrv.route_table import RouteTable

    config = NamesrvConfig(kv_config_path="/nonexistent/kv.json")
    return NamesrvHandlers(RouteTable(config.broker_channel_expired_time_ms), KvConfig(None), config)


@pytest.mark.parametrize(("name", "cluster"), [("broker.a", "C"), ("../b", "C"), ("b", "C\n"), ("b", ""),
                                               ("b" * 101, "C"), ("b", "C%1")])
def test_namesrv_refuses_registration_with_illegal_names(name: str, cluster: str) -> None:
    h = _namesrv()
    resp = h(FakeConn(), _register(name, cluster))
    assert_refused(resp)
    route = h(FakeConn(), RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    assert route.code == ResponseCode.TOPIC_NOT_EXIST  # nothing was registered


def test_namesrv_routes_only_the_legal_topics_of_a_registration() -> None:
    h = _namesrv()
    assert h(FakeConn(), _register("broker-a", "C", ("T1", "../evil", "T\n"))).code == ResponseCode.SUCCESS
    ok = h(FakeConn(), RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    assert ok.code == ResponseCode.SUCCESS
    for bad in ("../evil", "T\n"):
        r = h(FakeConn(), RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": bad}))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
