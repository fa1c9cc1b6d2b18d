"""Admin handlers: topic/group administration, statistics bodies, connections, runtime info, config, reset offset."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.group_stats import WINDOW_S, GroupGetStats
from orbitmq.broker.handlers import admin
from orbitmq.broker.handlers import pull as pull_mod
from orbitmq.broker.metadata import ConsumerOffsetManager, SubscriptionGroupManager, TopicConfigManager
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.topic import MessageQueue, TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    KVTable,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionData,
    TopicStatsTable,
)
from orbitmq.store import MessageInner, MessageStore, StoreConfig


@dataclass(eq=False)
class FakeConn:
    remote_addr: str
    closed: bool = False
    oneway: list[RemotingCommand] = field(default_factory=list)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.oneway.append(cmd)

    def close(self) -> None:
        self.closed = True


@dataclass
class Env:
    ctx: BrokerContext
    loop: asyncio.AbstractEventLoop
    registers: list[int]

    def put(self, topic: str, queue_id: int, body: bytes = b"x") -> Any:
        msg = MessageInner(topic, queue_id, body, {}, store_host=self.ctx.store_host, born_timestamp=1)
        r = self.loop.run_until_complete(self.ctx.store.put_message(msg))
        assert r.ok, r
        return r

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
             language: str = "JAVA") -> RemotingCommand:
        cmd = RemotingCommand.request(code, ext, body)
        cmd.language = language
        resp = admin.handlers(self.ctx)[code](None, cmd)
        assert resp is not None and resp.is_response and resp.opaque == cmd.opaque
        return resp

    def consumer(self, group: str, client_id: str, topics: list[str], language: str = "JAVA",
                 version: int = 409) -> FakeConn:
        conn = FakeConn(f"10.0.0.{len(client_id)}:{1000 + len(self.ctx.clients.consumer_ids(group))}")
        subs = {t: SubscriptionData.of_expression(t, "*") for t in topics}
        self.ctx.clients.register_consumer(conn, client_id, group, "CONSUME_PASSIVELY", "CLUSTERING",
                                           "CONSUME_FROM_LAST_OFFSET", subs, language, version)
        return conn


@pytest.fixture
def env(tmp_path: Any) -> Iterator[Env]:
    yield from _make_env(tmp_path, BrokerConfig(broker_ip1="127.0.0.1", broker_name="bk", listen_port=10911))


def _make_env(tmp_path: Any, cfg: BrokerConfig) -> Iterator[Env]:
    store_cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=128 * 1024,
        mapped_file_size_consume_queue=20 * 64, max_message_size=8 * 1024, max_hash_slot_num=64, max_index_num=256,
    )
    loop = asyncio.new_event_loop()
    store = MessageStore(store_cfg)
    store.load()
    loop.run_until_complete(store.start())
    conf_dir = str(tmp_path / "store" / "config")
    registers: list[int] = []
    ctx = BrokerContext(
        config=cfg, store=store, topics=TopicConfigManager(conf_dir, cfg),
        groups=SubscriptionGroupManager(conf_dir, cfg), offsets=ConsumerOffsetManager(conf_dir),
        clients=ClientRegistry(), stats=BrokerStats(), store_host="127.0.0.1:10911",
        request_register=lambda: registers.append(1),
    )
    try:
        yield Env(ctx, loop, registers)
    finally:
        loop.run_until_complete(store.shutdown())
        loop.close()


def _topic_ext(topic: str, r: int = 4, w: int = 4, perm: int = 6, **extra: str) -> dict[str, str]:
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(r), "writeQueueNums": str(w),
            "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false", **extra}


# ---- topics ----------------------------------------------------------------------------------------------
def test_create_topic_persists_and_requests_register(env: Env, tmp_path: Any) -> None:
    resp = env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_ext("Orders", 2, 3, 6, order="true"))
    assert resp.code == ResponseCode.SUCCESS
    assert env.ctx.topics.get("Orders") == TopicConfig("Orders", 2, 3, 6, order=True)
    assert env.registers == [1]
    on_disk = json.loads((tmp_path / "store" / "config" / "topics.json").read_bytes())
    assert on_disk["topicConfigTable"]["Orders"]["writeQueueNums"] == 3

    body = env.call(RequestCode.GET_ALL_TOPIC_CONFIG).body
    wrapper = json.loads(body)
    assert wrapper["topicConfigTable"]["Orders"]["order"] is True
    assert wrapper["dataVersion"] == env.ctx.topics.data_version.to_json_obj()


@pytest.mark.parametrize(
    ("ext", "remark"),
    [
        (_topic_ext("bad topic"), "contains illegal characters"),
        (_topic_ext("x" * 128), "longer than topic max length 127"),
        (_topic_ext("TBW102"), "conflict with system topic"),
        (_topic_ext("DefaultCluster"), "conflict with system topic"),
        (_topic_ext("rmq_sys_mine"), "conflict with system topic"),
        (_topic_ext("T", r=0), "readQueueNums 0 is out of range"),
        (_topic_ext("T", w=1025), "writeQueueNums 1025 is out of range"),
        (_topic_ext("T", perm=9), "perm 9 is invalid"),
        (_topic_ext("T", topicFilterType="REGEX"), "topicFilterType"),
    ],
)
def test_create_topic_rejects_bad_input(env: Env, ext: dict[str, str], remark: str) -> None:
    resp = env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert remark in resp.remark
    assert env.ctx.topics.get(ext["topic"]) is None or ext["topic"] in ("TBW102", "DefaultCluster")
    assert env.registers == []


def test_slave_refuses_topic_and_group_changes(tmp_path: Any) -> None:
    cfg = BrokerConfig(broker_ip1="127.0.0.1", broker_role="SLAVE", broker_id=1)
    for env in _make_env(tmp_path, cfg):
        for code, ext, body in (
            (RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_ext("T"), None),
            (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, None),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, b'{"groupName":"G"}'),
            (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"}, None),
        ):
            resp = env.call(code, ext, body)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "slave" in resp.remark
        assert env.ctx.topics.get("T") is None and env.ctx.groups.get("G") is None


def test_delete_topic_drops_config_offsets_and_store_data(env: Env) -> None:
    env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_ext("Gone", 2, 2))
    env.put("Gone", 0)
    env.put("Gone", 1)
    env.ctx.offsets.commit("G", "Gone", 0, 1)
    env.ctx.offsets.commit("G", "Kept", 0, 1)
    assert env.ctx.store.get_max_offset_in_queue("Gone", 0) == 1
    resp = env.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Gone"})
    assert resp.code == ResponseCode.SUCCESS
    assert env.ctx.topics.get("Gone") is None
    assert env.ctx.store.get_max_offset_in_queue("Gone", 0) == 0
    assert env.ctx.offsets.table() == {"Kept@G": {0: 1}}
    refused = env.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"})
    assert refused.code == ResponseCode.SYSTEM_ERROR and env.ctx.topics.get("SCHEDULE_TOPIC_XXXX") is not None


# ---- subscription groups ---------------------------------------------------------------------------------
def test_subscription_group_create_list_delete(env: Env) -> None:
    body = b'{"groupName":"GA","consumeEnable":false,"retryMaxTimes":3,"retryQueueNums":1,"brokerId":0}'
    assert env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body).code == ResponseCode.SUCCESS
    cfg = env.ctx.groups.get("GA")
    assert cfg is not None and not cfg.consume_enable and cfg.retry_max_times == 3
    wrapper = json.loads(env.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
    assert wrapper["subscriptionGroupTable"]["GA"]["consumeEnable"] is False
    assert "TOOLS_CONSUMER" in wrapper["subscriptionGroupTable"]

    env.ctx.offsets.commit("GA", "T", 0, 5)
    resp = env.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GA", "removeOffset": "false"})
    assert resp.code == ResponseCode.SUCCESS and env.ctx.groups.get("GA") is None
    assert env.ctx.offsets.query("GA", "T", 0) == 5
    env.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GA", "removeOffset": "true"})
    assert env.ctx.offsets.query("GA", "T", 0) == -1


def test_subscription_group_bad_bodies(env: Env) -> None:
    for body, remark in ((None, "empty"), (b"{not json", "bad SubscriptionGroupConfig"),
                         (b'{"consumeEnable":true}', "groupName"), (b'{"groupName":"a/b"}', "illegal characters"),
                         (b'{"groupName":"G","retryMaxTimes":-1}', "retryMaxTimes -1")):
        resp = env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        assert resp.code == ResponseCode.SYSTEM_ERROR and remark in resp.remark, (body, resp.remark)


# ---- statistics ------------------------------------------------------------------------------------------
def test_topic_stats_table_with_message_queue_keys(env: Env) -> None:
    env.ctx.topics.create_or_update(TopicConfig("S", 2, 2, 6))
    env.put("S", 0)
    last = env.put("S", 0)
    resp = env.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "S"})
    assert resp.code == ResponseCode.SUCCESS
    assert resp.body.startswith(b'{"offsetTable":{{"brokerName":"bk","queueId":0,"topic":"S"}:{')
    table = TopicStatsTable.from_json(resp.body).offset_table
    q0, q1 = table[MessageQueue("S", "bk", 0)], table[MessageQueue("S", "bk", 1)]
    assert (q0.min_offset, q0.max_offset, q0.last_update_timestamp) == (0, 2, last.store_timestamp)
    assert (q1.min_offset, q1.max_offset, q1.last_update_timestamp) == (0, 0, 0)
    missing = env.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST


def test_consume_stats(env: Env) -> None:
    env.ctx.topics.create_or_update(TopicConfig("S", 2, 2, 6))
    env.ctx.topics.create_or_update(TopicConfig("Other", 1, 1, 6))
    first = env.put("S", 0)
    env.put("S", 0)
    env.put("S", 1)
    env.ctx.offsets.commit("G", "S", 0, 1)
    env.ctx.offsets.commit("G", "Other", 0, 0)
    resp = env.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "S"})
    stats = ConsumeStats.from_json(resp.body)
    w0 = stats.offset_table[MessageQueue("S", "bk", 0)]
    w1 = stats.offset_table[MessageQueue("S", "bk", 1)]
    assert (w0.broker_offset, w0.consumer_offset, w0.last_timestamp) == (2, 1, first.store_timestamp)
    assert (w1.broker_offset, w1.consumer_offset, w1.last_timestamp) == (1, 0, 0)
    assert stats.total_diff() == 2
    assert b'"consumeTps":0.0' in resp.body  # nothing pulled yet
    # no topic header: every topic the group has offsets for
    all_topics = ConsumeStats.from_json(env.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"}).body)
    assert {mq.topic for mq in all_topics.offset_table} == {"S", "Other"}
    # an online group that no longer subscribes to "Other" does not report it
    env.consumer("G", "c1", ["S"])
    online = ConsumeStats.from_json(env.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"}).body)
    assert {mq.topic for mq in online.offset_table} == {"S"}


def test_consume_stats_tps_from_pulls(env: Env) -> None:
    clock = [5_000_000]
    env.ctx.group_stats = GroupGetStats(lambda: clock[0])
    env.ctx.topics.create_or_update(TopicConfig("S", 1, 1, 6))
    env.ctx.topics.create_or_update(TopicConfig("U", 1, 1, 6))
    for _ in range(3):
        env.put("S", 0)
    env.put("U", 0)
    env.consumer("G", "c1", ["S", "U"])
    env.consumer("Other", "c2", ["S"])
    proc = pull_mod.build(env.ctx)

    def pull(topic: str, offset: int, group: str = "G") -> RemotingCommand:
        resp = proc.handle(FakeConn("127.0.0.1:5555"), RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0"}))
        assert resp is not None
        return resp

    assert pull("S", 0).code == ResponseCode.SUCCESS  # 3 messages
    assert pull("S", 3).code != ResponseCode.SUCCESS  # nothing: not counted
    assert pull("U", 0).code == ResponseCode.SUCCESS  # 1 message
    assert pull("S", 0, group="Other").code == ResponseCode.SUCCESS  # another group: not G's rate
    env.ctx.offsets.commit("G", "S", 0, 3)
    env.ctx.offsets.commit("G", "U", 0, 1)
    clock[0] += 1000  # the pulls' second is complete
    one = ConsumeStats.from_json(env.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "S"}).body)
    assert one.consume_tps == 3 / WINDOW_S
    both = ConsumeStats.from_json(env.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"}).body)
    assert both.consume_tps == 4 / WINDOW_S


def test_consumer_and_producer_connection_lists(env: Env) -> None:
    resp = env.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE and "not online" in resp.remark
    conn = env.consumer("G", "client-1", ["T1", "T2"], language="CPP", version=333)
    body = ConsumerConnection.from_json(env.call(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                 {"consumerGroup": "G"}).body)
    (ci,) = body.connection_set
    assert (ci.client_id, ci.client_addr, ci.language, ci.version) == ("client-1", conn.remote_addr, "CPP", 333)
    assert set(body.subscription_table) == {"T1", "T2"} and body.message_model == "CLUSTERING"

    resp = env.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not exist" in resp.remark
    pconn = FakeConn("10.1.1.1:5555")
    env.ctx.clients.register_producer(pconn, "prod-1", "PG", "JAVA", 409)
    pbody = ProducerConnection.from_json(env.call(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                                  {"producerGroup": "PG"}).body)
    assert [(c.client_id, c.client_addr) for c in pbody.connection_set] == [("prod-1", "10.1.1.1:5555")]


def test_query_topic_consume_by_who(env: Env) -> None:
    env.ctx.offsets.commit("OffsetsOnly", "T", 0, 1)
    env.consumer("Online", "c1", ["T"])
    env.consumer("Elsewhere", "c2", ["U"])
    body = env.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "T"}).body
    assert GroupList.from_json(body).group_list == ["OffsetsOnly", "Online"]


# ---- broker runtime info / config ------------------------------------------------------------------------
def test_broker_runtime_info_has_the_keys_mqadmin_parses(env: Env) -> None:
    first = env.put("T", 0)
    table = KVTable.from_json(env.call(RequestCode.GET_BROKER_RUNTIME_INFO).body).table
    assert table["brokerVersionDesc"] == "V4_9_8" and table["brokerVersion"] == "409"
    for key in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgPutTotalTodayNow",
                "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning", "msgGetTotalTodayNow",
                "sendThreadPoolQueueSize", "pullThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills", "earliestMessageTimeStamp"):
        int(table[key])  # mqadmin clusterList: Long.parseLong
    for key in ("putTps", "getTransferedTps"):
        [float(x) for x in table[key].split(" ")]
    assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
    assert int(table["earliestMessageTimeStamp"]) == first.store_timestamp
    assert table["commitLogMaxOffset"] == str(env.ctx.store.max_phys_offset)
    assert table["runtime"].startswith("[ 0 days, 0 hours, 0 minutes")


def test_broker_config_is_properties_text_with_version(env: Env) -> None:
    resp = env.call(RequestCode.GET_BROKER_CONFIG)
    lines = resp.body.decode().splitlines()
    props = dict(line.split("=", 1) for line in lines)
    assert props["brokerName"] == "bk" and props["brokerClusterName"] == "DefaultCluster"
    assert props["autoCreateTopicEnable"] == "true"
    assert props["storePathRootDir"] == env.ctx.store.config.store_path_root_dir
    assert set(json.loads(resp.ext_fields["version"])) == {"counter", "timestamp"}


def test_version_desc() -> None:
    assert admin.version_desc(409) == "V4_9_8"
    assert admin.version_desc(393) == "V4_9_0"
    assert admin.version_desc(392) == "V4_9_0_SNAPSHOT"
    assert admin.version_desc(317) == "V4_5_2"
    assert admin.version_desc(213) == "V4_0_0"


# ---- reset offset ----------------------------------------------------------------------------------------
def _reset(env: Env, timestamp: int, force: bool, group: str = "G", topic: str = "R") -> RemotingCommand:
    ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true" if force else "false"}
    return env.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)


def _reset_setup(env: Env) -> tuple[FakeConn, FakeConn]:
    env.ctx.topics.create_or_update(TopicConfig("R", 2, 2, 6))
    for _ in range(3):
        env.put("R", 0)
    env.put("R", 1)
    env.ctx.offsets.commit("G", "R", 0, 1)
    env.ctx.offsets.commit("G", "R", 1, 0)
    return env.consumer("G", "java-1", ["R"]), env.consumer("G", "cpp-1", ["R"], language="CPP", version=333)


def test_reset_offset_forced_to_max_commits_and_notifies_consumers(env: Env) -> None:
    java, cpp = _reset_setup(env)
    resp = _reset(env, -1, True)
    assert resp.code == ResponseCode.SUCCESS
    expected = {MessageQueue("R", "bk", 0): 3, MessageQueue("R", "bk", 1): 1}
    assert ResetOffsetBody.from_json(resp.body).offset_table == expected
    assert env.ctx.offsets.query_all("G", "R") == {0: 3, 1: 1}

    (jreq,) = java.oneway
    assert jreq.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and jreq.is_oneway
    assert jreq.ext_fields == {"topic": "R", "group": "G", "timestamp": "-1", "isForce": "true"}
    assert jreq.body.startswith(b'{"offsetTable":{{"brokerName":"bk","queueId":0,"topic":"R"}:3,')
    assert ResetOffsetBody.from_json(jreq.body).offset_table == expected
    (creq,) = cpp.oneway
    assert json.loads(creq.body) == {"offsetTable": [
        {"brokerName": "bk", "offset": 3, "queueId": 0, "topic": "R"},
        {"brokerName": "bk", "offset": 1, "queueId": 1, "topic": "R"},
    ]}


def test_reset_offset_without_force_only_moves_backwards(env: Env) -> None:
    java, _ = _reset_setup(env)
    resp = _reset(env, -1, False)  # target = max offsets, all ahead of the committed ones: nothing moves
    assert ResetOffsetBody.from_json(resp.body).offset_table == {
        MessageQueue("R", "bk", 0): 1, MessageQueue("R", "bk", 1): 0}
    assert env.ctx.offsets.query_all("G", "R") == {0: 1, 1: 0}
    resp = _reset(env, 0, False)  # back to the beginning
    assert ResetOffsetBody.from_json(resp.body).offset_table[MessageQueue("R", "bk", 0)] == 0
    assert env.ctx.offsets.query("G", "R", 0) == 0
    assert len(java.oneway) == 2


def test_reset_offset_errors(env: Env) -> None:
    assert "no topic in this broker" in _reset(env, -1, True, topic="Nope").remark
    env.ctx.topics.create_or_update(TopicConfig("R", 1, 1, 6))
    resp = _reset(env, -1, True)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "consumer group <G> not exist" in resp.remark
    env.ctx.offsets.commit("G", "R", 0, 0)
    resp = _reset(env, -1, True)
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE and "Consumer not online" in resp.remark
    old = env.consumer("G", "ancient", ["R"], version=20)
    resp = _reset(env, -1, True)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "does not support" in resp.remark
    assert old.oneway == [] and env.ctx.offsets.query("G", "R", 0) == 0


def test_handlers_cover_the_admin_codes(env: Env) -> None:
    codes = set(admin.handlers(env.ctx))
    assert codes == {17, 215, 21, 200, 201, 207, 202, 208, 203, 204, 300, 28, 26, 222}


def test_admin_changes_are_answered_once_on_disk(env: Env, tmp_path: Path) -> None:
    """With a loop running, topic/group tables are written behind (off the loop); an admin create/update/delete is
    answered only after its table is on disk, so an acknowledged change survives a crash right after the answer."""
    topics_file = tmp_path / "store" / "config" / "topics.json"
    groups_file = tmp_path / "store" / "config" / "subscriptionGroup.json"

    async def run() -> None:
        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_ext("Durable", 2, 2))
        result = admin.handlers(env.ctx)[RequestCode.UPDATE_AND_CREATE_TOPIC](None, cmd)
        resp = await result if inspect.isawaitable(result) else result
        assert resp.code == ResponseCode.SUCCESS
        assert "Durable" in json.loads(topics_file.read_bytes())["topicConfigTable"]

        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, b'{"groupName":"GD"}')
        result = admin.handlers(env.ctx)[RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP](None, cmd)
        resp = await result if inspect.isawaitable(result) else result
        assert resp.code == ResponseCode.SUCCESS
        assert "GD" in json.loads(groups_file.read_bytes())["subscriptionGroupTable"]

        cmd = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GD"})
        result = admin.handlers(env.ctx)[RequestCode.DELETE_SUBSCRIPTIONGROUP](None, cmd)
        resp = await result if inspect.isawaitable(result) else result
        assert "GD" not in json.loads(groups_file.read_bytes())["subscriptionGroupTable"]

    asyncio.run(run())
