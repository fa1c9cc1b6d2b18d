"""NamesrvHandlers called directly with RemotingCommands (no sockets): every name-server request code."""

from __future__ import annotations

import zlib

import pytest

from orbitmq.model.topic import TopicConfig
from orbitmq.namesrv.config import NamesrvConfig
from orbitmq.namesrv.handlers import NamesrvHandlers
from orbitmq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KvConfig
from orbitmq.namesrv.route_table import RouteTable
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.protocol.bodies import (
    ClusterInfo,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000

    def now_ms(self) -> int:
        return self.t

    def monotonic_ms(self) -> int:
        return self.t


class FakeConn:
    remote_addr = "127.0.0.1:5555"
    closed = False


def make(**cfg) -> tuple[NamesrvHandlers, RouteTable, KvConfig, FakeClock]:
    config = NamesrvConfig(kv_config_path="/nonexistent/kv.json", **cfg)
    table = RouteTable(config.broker_channel_expired_time_ms)
    kv = KvConfig(None)
    clock = FakeClock()
    return NamesrvHandlers(table, kv, config, clock), table, kv, clock


def register_cmd(name="broker-a", bid=0, addr="127.0.0.1:10911", topics=("T1",), counter=1, *,
                 compressed=False, crc=None, version=409, cluster="DefaultCluster") -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper(
        {t: TopicConfig(t, read_queue_nums=4, write_queue_nums=4) for t in topics},
        DataVersion(timestamp=111, counter=counter),
    )
    body = RegisterBrokerBody(wrapper, []).encode(compressed=compressed)
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster, "brokerId": str(bid),
           "haServerAddr": addr.rsplit(":", 1)[0] + ":10912", "compressed": "true" if compressed else "false"}
    if crc is not None:
        ext["bodyCrc32"] = str(crc(body))
    cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)
    cmd.version = version
    return cmd


def route_cmd(topic: str, version: int = 409, accept_std: bool | None = None) -> RemotingCommand:
    ext = {"topic": topic}
    if accept_std is not None:
        ext["acceptStandardJsonOnly"] = "true" if accept_std else "false"
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)
    cmd.version = version
    return cmd


def test_register_then_route_standard_json():
    h, _, _, _ = make()
    conn = FakeConn()
    resp = h(conn, register_cmd())
    assert resp.code == ResponseCode.SUCCESS and resp.is_response
    assert not (resp.ext_fields or {}).get("masterAddr")
    resp = h(conn, route_cmd("T1", version=409))
    assert resp.code == 0
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in resp.body
    assert b" " not in resp.body
    route = TopicRouteData.from_json(resp.body)
    assert route.queue_datas[0].write_queue_nums == 4 and route.broker_datas[0].broker_addrs == {0: "127.0.0.1:10911"}
    assert route.order_topic_conf is None


def test_route_non_standard_json_for_old_clients_unless_asked():
    h, _, _, _ = make()
    h(FakeConn(), register_cmd())
    old = h(FakeConn(), route_cmd("T1", version=317)).body
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old
    assert TopicRouteData.from_json(old).broker_datas[0].broker_addrs == {0: "127.0.0.1:10911"}
    asked = h(FakeConn(), route_cmd("T1", version=317, accept_std=True)).body
    assert b'{"0":"127.0.0.1:10911"}' in asked


def test_unknown_topic_is_topic_not_exist():
    h, _, _, _ = make()
    resp = h(FakeConn(), route_cmd("Nope"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.remark.startswith("No topic route info in name server for the topic: Nope")


def test_compressed_register_and_crc_checks():
    h, table, _, _ = make()
    masked = lambda b: zlib.crc32(b) & 0x7FFFFFFF  # noqa: E731
    resp = h(FakeConn(), register_cmd(topics=("T1", "T2"), compressed=True, crc=masked))
    assert resp.code == 0
    assert table.topics() == ["T1", "T2"]
    bad = register_cmd(name="broker-b", addr="127.0.0.1:20911", crc=lambda b: (masked(b) + 1) & 0x7FFFFFFF)
    resp = h(FakeConn(), bad)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "crc32 not match"
    assert table.group("broker-b") is None


def test_compressed_register_bomb_is_refused_without_inflating_it(monkeypatch):
    import orbitmq.protocol.bodies.register as register

    monkeypatch.setattr(register, "MAX_INFLATED_REGISTER_BODY", 1 << 20)
    h, table, _, _ = make()
    cmd = register_cmd(compressed=True)
    cmd.body = zlib.compress(b"\0" * (8 << 20), 9)  # 8 MiB of zeros in ~8 KB
    resp = h(FakeConn(), cmd)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "inflates to more than 1048576 bytes" in resp.remark
    assert table.group("broker-a") is None


def test_old_broker_version_sends_bare_wrapper():
    h, table, _, _ = make()
    cmd = register_cmd()
    wrapper = TopicConfigSerializeWrapper({"OLD": TopicConfig("OLD")}, DataVersion(1, 1))
    cmd.body = wrapper.to_json()
    cmd.version = 30
    assert h(FakeConn(), cmd).code == 0
    assert table.topics() == ["OLD"]


def test_register_without_body():
    h, table, _, _ = make()
    cmd = register_cmd()
    cmd.body = None
    assert h(FakeConn(), cmd).code == 0
    assert table.group("broker-a").addrs == {0: "127.0.0.1:10911"}


def test_slave_gets_master_and_ha_address_and_order_conf_body():
    h, _, kv, _ = make()
    kv.put(ORDER_TOPIC_CONFIG, "T1", "broker-a:4")
    h(FakeConn(), register_cmd(addr="10.0.0.1:10911"))
    resp = h(FakeConn(), register_cmd(bid=1, addr="10.0.0.2:10911"))
    assert resp.ext_fields == {"haServerAddr": "10.0.0.1:10912", "masterAddr": "10.0.0.1:10911"}
    assert KVTable.from_json(resp.body).table == {"T1": "broker-a:4"}


def test_order_topic_conf_only_when_enabled():
    for enabled in (False, True):
        h, _, kv, _ = make(order_message_enable=enabled)
        kv.put(ORDER_TOPIC_CONFIG, "T1", "broker-a:4")
        h(FakeConn(), register_cmd())
        route = TopicRouteData.from_json(h(FakeConn(), route_cmd("T1")).body)
        assert route.order_topic_conf == ("broker-a:4" if enabled else None)


def test_missing_required_header_is_system_error():
    h, _, _, _ = make()
    cmd = register_cmd()
    del cmd.ext_fields["brokerName"]
    resp = h(FakeConn(), cmd)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "brokerName" in resp.remark


def test_unknown_code_and_oneway():
    h, _, _, _ = make()
    resp = h(FakeConn(), RemotingCommand.request(9999))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark == " request type 9999 not supported"
    assert h(FakeConn(), RemotingCommand.request(9999, oneway=True)) is None
    assert h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, oneway=True)) is None


def test_query_data_version_and_touch():
    h, table, _, clock = make()
    h(FakeConn(), register_cmd(counter=5))
    ext = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster",
           "brokerId": "0"}
    clock.t = 100_000
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(ext),
                                                 DataVersion(111, 5).to_json()))
    assert resp.ext_fields == {"changed": "false"}
    assert DataVersion.from_json(resp.body) == DataVersion(111, 5)
    assert table.live_brokers()["127.0.0.1:10911"].last_update_ms == 100_000
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(ext),
                                                 DataVersion(111, 6).to_json()))
    assert resp.ext_fields == {"changed": "true"}


def test_unregister_and_channel_close():
    h, table, _, _ = make()
    c1, c2 = FakeConn(), FakeConn()
    h(c1, register_cmd("broker-a", addr="a:1"))
    h(c2, register_cmd("broker-b", addr="b:1"))
    ext = {"brokerName": "broker-a", "brokerAddr": "a:1", "clusterName": "DefaultCluster", "brokerId": "0"}
    assert h(c1, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext)).code == 0
    assert table.group("broker-a") is None
    h.on_channel_closed(c2)
    assert table.group("broker-b") is None


def test_cluster_info_and_topic_lists():
    h, _, _, _ = make()
    h(FakeConn(), register_cmd("broker-a", addr="a:1", topics=("T1", "TA"), cluster="C1"))
    h(FakeConn(), register_cmd("broker-b", addr="b:1", topics=("T1",), cluster="C2"))
    body = h(FakeConn(), RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)).body
    assert b'"brokerAddrs":{0:"a:1"}' in body  # Java writes ClusterInfo in fastjson's default form
    info = ClusterInfo.from_json(body)
    assert info.cluster_addr_table == {"C1": ["broker-a"], "C2": ["broker-b"]}
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: "b:1"}
    all_topics = TopicList.from_json(h(FakeConn(), RemotingCommand.request(
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
    assert all_topics.topic_list == ["T1", "TA"]
    by_cluster = TopicList.from_json(h(FakeConn(), RemotingCommand.request(
        RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C2"})).body)
    assert by_cluster.topic_list == ["T1"]
    sys_topics = TopicList.from_json(h(FakeConn(), RemotingCommand.request(
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)).body)
    assert sys_topics.topic_list == ["C1", "broker-a", "C2", "broker-b"] and sys_topics.broker_addr == "a:1"


def test_delete_topic_and_write_perm():
    h, table, _, _ = make()
    h(FakeConn(), register_cmd(topics=("T1", "T2")))
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert resp.ext_fields == {"wipeTopicCount": "2"}
    assert table.route("T1").queue_datas[0].perm == 4
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert resp.ext_fields == {"addTopicCount": "2"}
    assert h(FakeConn(), RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"})).code == 0
    assert table.topics() == ["T2"]


def test_kv_requests():
    h, _, kv, _ = make()
    put = {"namespace": "NS", "key": "k", "value": "v"}
    assert h(FakeConn(), RemotingCommand.request(RequestCode.PUT_KV_CONFIG, put)).code == 0
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}))
    assert resp.ext_fields == {"value": "v"}
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
    assert KVTable.from_json(resp.body).table == {"k": "v"}
    assert h(FakeConn(), RemotingCommand.request(RequestCode.DELETE_KV_CONFIG,
                                                 {"namespace": "NS", "key": "k"})).code == 0
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND


def test_get_and_update_namesrv_config():
    h, table, _, _ = make()
    body = h(FakeConn(), RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG)).body.decode()
    assert "listenPort=9876\n" in body and "orderMessageEnable=false\n" in body
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG,
                                                 body=b"orderMessageEnable=true\nbrokerChannelExpiredTime=5000\n"))
    assert resp.code == 0 and h.config.order_message_enable and table.expired_time_ms == 5000
    resp = h(FakeConn(), RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"listenPort=1\n"))
    assert resp.code == ResponseCode.NO_PERMISSION and h.config.listen_port == 9876


@pytest.mark.parametrize("body", [b"{not json", b""])
def test_bad_register_body_is_system_error(body):
    h, table, _, _ = make()
    cmd = register_cmd()
    cmd.body = body or zlib.compress(b"\x00\x00")
    if not body:
        cmd.ext_fields["compressed"] = "true"
    resp = h(FakeConn(), cmd)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert table.group("broker-a") is None


def test_fastjson_route_has_both_sys_flag_spellings():
    h, _, _, _ = make()
    h(FakeConn(), register_cmd())
    obj = fastjson.loads(h(FakeConn(), route_cmd("T1")).body)
    qd = obj["queueDatas"][0]
    assert qd["topicSysFlag"] == 0 and qd["topicSynFlag"] == 0
