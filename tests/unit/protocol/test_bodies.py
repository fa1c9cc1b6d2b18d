"""Body dataclasses: JSON shapes clients rely on, C++ forms, and round trips."""

import orjson
import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.model import MessageQueue, TopicConfig, java_hash
from orbitmq.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    ConnectionInfo,
    ConsumerConnection,
    ConsumerData,
    ConsumerListBody,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    DataVersion,
    DelayOffsetSerializeWrapper,
    GroupList,
    HeartbeatData,
    KVTable,
    LockBatchBody,
    LockBatchResponseBody,
    OffsetWrapper,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    ResetOffsetBody,
    SubscriptionData,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    wants_standard_route_json,
)

ROUTE = TopicRouteData(
    queue_datas=[QueueData("broker-a", 4, 4, 6, 0)],
    broker_datas=[BrokerData("DefaultCluster", "broker-a", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})],
)


def test_route_standard_json_matches_reference_shape():
    raw = ROUTE.to_json(standard=True)
    d = orjson.loads(raw)  # valid standard JSON
    assert d["brokerDatas"] == [{"brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
                                 "brokerName": "broker-a", "cluster": "DefaultCluster"}]
    assert d["queueDatas"][0]["topicSysFlag"] == 0 and d["queueDatas"][0]["topicSynFlag"] == 0
    assert d["filterServerTable"] == {}
    assert b" " not in raw


def test_route_non_standard_json_has_unquoted_keys_and_no_spaces():
    raw = ROUTE.to_json(standard=False)
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in raw
    assert b" " not in raw
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    assert TopicRouteData.from_json(raw) == ROUTE
    assert TopicRouteData.from_json(ROUTE.to_json(standard=True)) == ROUTE


def test_route_order_conf_and_old_topic_syn_flag_spelling():
    d = TopicRouteData.from_json(b'{"orderTopicConf":"a:4","queueDatas":[{"brokerName":"a","perm":6,'
                                 b'"readQueueNums":2,"writeQueueNums":2,"topicSynFlag":3}],"brokerDatas":[]}')
    assert d.order_topic_conf == "a:4" and d.queue_datas[0].topic_sys_flag == 3


def test_standard_route_json_rule():
    assert wants_standard_route_json(401, False)
    assert wants_standard_route_json(333, True)
    assert not wants_standard_route_json(317, False)


def test_cluster_info_round_trip_non_standard():
    ci = ClusterInfo({"broker-a": BrokerData("C", "broker-a", {0: "1.2.3.4:10911"})}, {"C": ["broker-a"]})
    raw = ci.to_json()
    assert b'{0:"1.2.3.4:10911"}' in raw
    assert ClusterInfo.from_json(raw) == ci


JAVA_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@1234#5678","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
    b'"consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING","subscriptionDataSet":['
    b'{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"TagA || TagB",'
    b'"subVersion":1700000000000,"tagsSet":["TagA","TagB"],"topic":"T"}],"unitMode":false}],'
    b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
)

CPP_HEARTBEAT = (
    b'{"clientID":"10.0.0.6@9","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"groupName":"G",'
    b'"messageModel":0,"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[0,0],'
    b'"expressionType":"TAG","subString":"TagA || TagB","subVersion":"1700000000001",'
    b'"tagsSet":["TagA","TagB"],"topic":"T"}],"unitMode":false}],"producerDataSet":[]}'
)


def test_heartbeat_java_form():
    hb = HeartbeatData.from_json(JAVA_HEARTBEAT)
    assert hb.client_id == "10.0.0.5@1234#5678"
    assert hb.producer_data_set == [ProducerData("CLIENT_INNER_PRODUCER")]
    cd = hb.consumer_data_set[0]
    assert (cd.consume_type, cd.message_model, cd.consume_from_where) == (
        "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET")
    sd = cd.subscription_data_set[0]
    assert sorted(sd.code_set) == [2598919, 2598920] and sd.sub_version == 1700000000000


def test_heartbeat_cpp_form_ordinals_string_subversion_garbage_codes():
    cd = HeartbeatData.from_json(CPP_HEARTBEAT).consumer_data_set[0]
    assert cd.consume_type == "CONSUME_PASSIVELY"
    assert cd.message_model == "BROADCASTING"
    assert cd.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    sd = cd.subscription_data_set[0]
    assert sd.sub_version == 1700000000001
    assert sorted(sd.code_set) == sorted([java_hash("TagA"), java_hash("TagB")])
    assert sorted(sd.tags_set) == ["TagA", "TagB"]


def test_heartbeat_round_trip():
    hb = HeartbeatData("c@1", [ProducerData("P")], [ConsumerData(
        "G", subscription_data_set=[SubscriptionData.of_expression("T", "*", 5),
                                    SubscriptionData.of_expression("T2", " X || Y ", 6)])])
    back = HeartbeatData.from_json(hb.to_json())
    assert back == hb
    assert back.consumer_data_set[0].subscription_data_set[0].is_all
    assert hb.consumer_data_set[0].subscription_data_set[1].tags_set == ["X", "Y"]


def test_sql92_subscription_keeps_expression():
    sd = SubscriptionData.from_json(b'{"topic":"T","subString":"a > 1","expressionType":"SQL92",'
                                    b'"codeSet":[],"tagsSet":[],"subVersion":1}')
    assert sd.expression_type == "SQL92" and sd.sub_string == "a > 1" and not sd.is_all


def _wrapper():
    return TopicConfigSerializeWrapper(
        {"T": TopicConfig("T", 8, 8, 6, "SINGLE_TAG"), "U": TopicConfig("U", 1, 2, 4, "MULTI_TAG")},
        DataVersion(1700000000000, 3),
    )


def test_register_broker_body_json_shape_and_round_trip():
    body = RegisterBrokerBody(_wrapper(), [])
    d = orjson.loads(body.to_json())
    assert d["filterServerList"] == []
    assert d["topicConfigSerializeWrapper"]["dataVersion"] == {"counter": 3, "timestamp": 1700000000000}
    assert d["topicConfigSerializeWrapper"]["topicConfigTable"]["T"]["readQueueNums"] == 8
    assert RegisterBrokerBody.decode(body.encode(False), compressed=False) == body


def test_register_broker_body_compressed_round_trip():
    body = RegisterBrokerBody(_wrapper(), ["1.1.1.1:1"])
    raw = body.encode(compressed=True)
    back = RegisterBrokerBody.decode(raw, compressed=True)
    assert back.filter_server_list == ["1.1.1.1:1"]
    assert back.topic_config_serialize_wrapper.data_version == DataVersion(1700000000000, 3)
    assert back.topic_config_serialize_wrapper.topic_config_table == _wrapper().topic_config_table
    with pytest.raises(ProtocolError):
        RegisterBrokerBody.decode(b"not zlib", compressed=True)


def test_register_broker_body_pre_v3_0_11_is_bare_wrapper():
    raw = _wrapper().to_json()
    assert RegisterBrokerBody.decode(raw, version=30).topic_config_serialize_wrapper == _wrapper()


def test_data_version_next():
    dv = DataVersion()
    dv.next_version(5)
    assert dv == DataVersion(5, 1) and dv.copy() == dv and dv.copy() is not dv


def test_small_bodies_shapes():
    assert KVTable({"a": "1"}).to_json() == b'{"table":{"a":"1"}}'
    assert ConsumerListBody(["c1", "c2"]).to_json() == b'{"consumerIdList":["c1","c2"]}'
    assert TopicList(["T1"]).to_json() == b'{"topicList":["T1"]}'
    assert TopicList(["T1"], "a:1").to_json() == b'{"brokerAddr":"a:1","topicList":["T1"]}'
    assert GroupList(["g"]).to_json() == b'{"groupList":["g"]}'
    lb = LockBatchBody("G", "c1", [MessageQueue("T", "b", 0)])
    assert lb.to_json() == (b'{"clientId":"c1","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":0,'
                            b'"topic":"T"}]}')
    for obj in (KVTable({"a": "1"}), ConsumerListBody(["x"]), TopicList(["T"], "a:1"), GroupList(["g"]), lb,
                LockBatchResponseBody([MessageQueue("T", "b", 1)])):
        assert type(obj).from_json(obj.to_json()) == obj


def test_stats_tables_use_message_queue_object_keys():
    ts = TopicStatsTable({MessageQueue("T", "b", 0): TopicOffset(1, 9, 100)})
    raw = ts.to_json()
    assert raw == (b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
                   b'{"lastUpdateTimestamp":100,"maxOffset":9,"minOffset":1}}}')
    assert TopicStatsTable.from_json(raw) == ts
    cs = ConsumeStats({MessageQueue("T", "b", 1): OffsetWrapper(10, 4, 7)}, 2.5)
    assert ConsumeStats.from_json(cs.to_json()) == cs
    assert cs.total_diff() == 6
    # Gson-style list form is accepted too
    gson = b'{"offsetTable":[[{"brokerName":"b","queueId":1,"topic":"T"},100]]}'
    assert ResetOffsetBody.from_json(gson).offset_table == {MessageQueue("T", "b", 1): 100}


def test_reset_offset_body_both_forms():
    r = ResetOffsetBody({MessageQueue("T", "b", 0): 100})
    assert r.to_json() == b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:100}}'
    assert r.to_json_for_c() == b'{"offsetTable":[{"brokerName":"b","offset":100,"queueId":0,"topic":"T"}]}'
    assert ResetOffsetBody.from_json(r.to_json()) == r
    assert ResetOffsetBody.from_json(r.to_json_for_c()) == r


def test_consumer_connection_round_trip():
    cc = ConsumerConnection([ConnectionInfo("c1", "1.2.3.4:5", "CPP", 333)],
                            {"T": SubscriptionData.of_expression("T", "A")})
    assert ConsumerConnection.from_json(cc.to_json()) == cc


def test_offset_wrappers_accept_both_key_forms():
    java = b'{"offsetTable":{"T@G":{0:12,1:7}}}'
    w = ConsumerOffsetSerializeWrapper.from_json(java)
    assert w.offset_table == {"T@G": {0: 12, 1: 7}}
    assert w.to_json() == java
    assert ConsumerOffsetSerializeWrapper.from_json(w.to_json(standard=True)) == w
    d = DelayOffsetSerializeWrapper.from_json(b'{"offsetTable":{1:0,2:15}}')
    assert d.offset_table == {1: 0, 2: 15}
    assert DelayOffsetSerializeWrapper.from_json(b'{"offsetTable":{"1":0}}').offset_table == {1: 0}


@pytest.mark.parametrize("cls", [HeartbeatData, TopicRouteData, KVTable])
def test_bad_bodies_raise_protocol_error(cls):
    with pytest.raises(ProtocolError):
        cls.from_json(b"")
    with pytest.raises(ProtocolError):
        cls.from_json(b"{oops")
    with pytest.raises(ProtocolError):
        cls.from_json(b"[1]")
