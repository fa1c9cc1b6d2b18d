"""Controller bodies and headers (RIP-44, RocketMQ 5.1.1+): exact JSON shapes and ext-field names."""

import orjson
import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol.bodies import (
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntry,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from orbitmq.protocol.bodies.controller import (
    AlterSyncStateSetRequestHeader,
    broker_names_body,
    broker_names_from_body,
    parse_id_list,
)
from orbitmq.protocol.ext import HeaderError


def test_sync_state_set_shape() -> None:
    body = SyncStateSet(frozenset({2, 1}), 3)
    assert body.to_json() == b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}'
    assert SyncStateSet.from_json(b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}') == body
    assert SyncStateSet.from_json(b'{"syncStateSetEpoch":0}') == SyncStateSet(frozenset(), 0)


def test_sync_state_set_rejects_non_array() -> None:
    with pytest.raises(ProtocolError):
        SyncStateSet.from_json(b'{"syncStateSet":5,"syncStateSetEpoch":1}')


def test_elect_master_body_fastjson_and_standard() -> None:
    group = BrokerMemberGroup("c", "b", {2: "10.0.0.2:10911", 1: "10.0.0.1:10911"})
    body = ElectMasterResponseBody(group, frozenset({1}))
    java = (b'{"brokerMemberGroup":{"brokerAddrs":{1:"10.0.0.1:10911",2:"10.0.0.2:10911"},"brokerName":"b",'
            b'"cluster":"c"},"syncStateSet":[1]}')
    assert body.to_json() == java
    assert orjson.loads(body.to_json(standard=True))["brokerMemberGroup"]["brokerAddrs"] == {
        "1": "10.0.0.1:10911", "2": "10.0.0.2:10911"}
    assert ElectMasterResponseBody.from_json(java) == body
    assert ElectMasterResponseBody.from_json(body.to_json(standard=True)) == body
    assert ElectMasterResponseBody(None, frozenset({3})).to_json() == b'{"syncStateSet":[3]}'


def test_broker_replicas_info_shape() -> None:
    info = BrokerReplicasInfo({"b": ReplicasInfo(
        1, "a1", 2, 3, (ReplicaIdentity("b", 1, "a1", True),), (ReplicaIdentity("b", 2, "a2", False),))})
    d = orjson.loads(info.to_json())
    assert d == {"replicasInfoTable": {"b": {
        "inSyncReplicas": [{"alive": True, "brokerAddress": "a1", "brokerId": 1, "brokerName": "b"}],
        "masterAddress": "a1", "masterBrokerId": 1, "masterEpoch": 2,
        "notInSyncReplicas": [{"alive": False, "brokerAddress": "a2", "brokerId": 2, "brokerName": "b"}],
        "syncStateSetEpoch": 3}}}
    assert BrokerReplicasInfo.from_json(info.to_json()) == info
    masterless = BrokerReplicasInfo({"b": ReplicasInfo(None, None, 1, 1)})
    assert "masterBrokerId" not in orjson.loads(masterless.to_json())["replicasInfoTable"]["b"]
    assert BrokerReplicasInfo.from_json(masterless.to_json()) == masterless


def test_epoch_entry_cache_shape() -> None:
    cache = EpochEntryCache("c", "b", 1, (EpochEntry(1, 0, 100), EpochEntry(2, 100)), 150)
    d = orjson.loads(cache.to_json())
    assert d == {"brokerId": 1, "brokerName": "b", "clusterName": "c", "maxOffset": 150, "epochList": [
        {"endOffset": 100, "epoch": 1, "startOffset": 0},
        {"endOffset": 9223372036854775807, "epoch": 2, "startOffset": 100}]}
    assert EpochEntryCache.from_json(cache.to_json()) == cache


def test_broker_names_body() -> None:
    assert broker_names_body(["a", "b"]) == b'["a","b"]'
    assert broker_names_from_body(b'["a","b"]') == ["a", "b"]
    assert broker_names_from_body(None) == []
    with pytest.raises(ProtocolError):
        broker_names_from_body(b'{"a":1}')


def test_heartbeat_header_java_field_names() -> None:
    h = BrokerHeartbeatRequestHeader("c", "1.2.3.4:10911", "b", 2, 3, 400, 300, 10000, 5)
    assert h.to_ext() == {"clusterName": "c", "brokerAddr": "1.2.3.4:10911", "brokerName": "b", "brokerId": "2",
                          "epoch": "3", "maxOffset": "400", "confirmOffset": "300",
                          "heartbeatTimeoutMills": "10000", "electionPriority": "5"}
    assert BrokerHeartbeatRequestHeader.from_ext(h.to_ext()) == h
    bare = BrokerHeartbeatRequestHeader.from_ext({"clusterName": "c", "brokerAddr": "x", "brokerName": "b"})
    assert bare.broker_id is None and "brokerId" not in bare.to_ext()
    with pytest.raises(HeaderError, match="brokerAddr"):
        BrokerHeartbeatRequestHeader.from_ext({"clusterName": "c", "brokerName": "b"})


def test_elect_master_header_defaults_and_booleans() -> None:
    h = ElectMasterRequestHeader.from_ext({"clusterName": "c", "brokerName": "b"})
    assert h.broker_id == -1 and h.designate_elect is False
    h = ElectMasterRequestHeader.from_ext({"clusterName": "c", "brokerName": "b", "brokerId": "3",
                                           "designateElect": "TRUE", "invokeTime": "17"})
    assert (h.broker_id, h.designate_elect, h.invoke_time) == (3, True, 17)
    assert h.to_ext()["designateElect"] == "true"
    r = ElectMasterResponseHeader(1, "a:1", 2, 3)
    assert r.to_ext() == {"masterBrokerId": "1", "masterAddress": "a:1", "masterEpoch": "2", "syncStateSetEpoch": "3"}
    assert ElectMasterResponseHeader().to_ext() == {}


def test_other_headers_keys() -> None:
    assert AlterSyncStateSetRequestHeader("b", 1, 2).to_ext() == {"brokerName": "b", "masterBrokerId": "1",
                                                                 "masterEpoch": "2"}
    assert RegisterBrokerToControllerRequestHeader("c", "b", 1, "a:1", 5).to_ext() == {
        "clusterName": "c", "brokerName": "b", "brokerId": "1", "brokerAddress": "a:1", "invokeTime": "5"}
    meta = GetMetaDataResponseHeader("g", "n0", "127.0.0.1:9878", True, "n0:127.0.0.1:9878")
    assert meta.to_ext() == {"group": "g", "controllerLeaderId": "n0", "controllerLeaderAddress": "127.0.0.1:9878",
                             "isLeader": "true", "peers": "n0:127.0.0.1:9878"}
    assert GetMetaDataResponseHeader.from_ext(meta.to_ext()) == meta
    clean = CleanControllerBrokerDataRequestHeader.from_ext(
        {"brokerName": "b", "brokerControllerIdsToClean": "1;2", "isCleanLivingBroker": "true"})
    assert clean.is_clean_living_broker and parse_id_list(clean.broker_controller_ids_to_clean) == {1, 2}
    apply = ApplyBrokerIdRequestHeader.from_ext({"clusterName": "c", "brokerName": "b", "appliedBrokerId": "1",
                                                 "registerCheckCode": "10.0.0.1:10911;1700000000000"})
    assert apply.broker_address == "10.0.0.1:10911"
    assert NotifyBrokerRoleChangedRequestHeader("a:1", 2, 3, 1).to_ext() == {
        "masterAddress": "a:1", "masterEpoch": "2", "syncStateSetEpoch": "3", "masterBrokerId": "1"}


def test_parse_id_list() -> None:
    assert parse_id_list(None) == frozenset() and parse_id_list(" ") == frozenset()
    assert parse_id_list("3;1;") == {1, 3}
    with pytest.raises(HeaderError):
        parse_id_list("1;x")


def test_required_int_not_a_number() -> None:
    with pytest.raises(HeaderError, match="not a number"):
        AlterSyncStateSetRequestHeader.from_ext({"brokerName": "b", "masterBrokerId": "x", "masterEpoch": "1"})
