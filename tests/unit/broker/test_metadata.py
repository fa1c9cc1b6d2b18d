"""Broker metadata managers: built-ins, auto-creation, persistence round trips, Java-written files, .bak fallback."""

from __future__ import annotations

import json
import os

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.metadata import (
    ConsumerOffsetManager,
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfigManager,
    validate_topic_name,
)
from orbitmq.broker.metadata.topics import validate_topic_config
from orbitmq.model.topic import TopicConfig


def _cfg(**kw: object) -> BrokerConfig:
    return BrokerConfig(broker_ip1="127.0.0.1", **kw)  # type: ignore[arg-type]


# ---- DataVersion -----------------------------------------------------------------------------------------
def test_data_version_bumps_counter_and_timestamp() -> None:
    dv = DataVersion(counter=3, timestamp=1)
    dv.next_version(now=1000)
    assert (dv.counter, dv.timestamp) == (4, 1000)
    assert DataVersion.from_json_obj(dv.to_json_obj()) == dv
    assert DataVersion.from_json_obj({"counter": 7, "timestamp": 9, "stateVersion": 0}) == DataVersion(7, 9)


# ---- topics ----------------------------------------------------------------------------------------------
def test_builtin_topics_follow_broker_config(tmp_path) -> None:
    m = TopicConfigManager(str(tmp_path), _cfg(broker_cluster_name="C1", broker_name="b1"))
    tbw = m.get("TBW102")
    assert tbw is not None and tbw.perm == 7 and tbw.write_queue_nums == 8
    assert m.get("C1") and m.get("C1").perm == 7 and m.get("C1").read_queue_nums == 16
    assert m.get("b1") and m.get("b1").perm == 7
    assert m.get("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18
    assert m.get("BenchmarkTest").write_queue_nums == 1024
    assert m.get("C1_REPLY_TOPIC") is not None
    assert m.get("RMQ_SYS_TRACE_TOPIC") is None
    for t in ("TBW102", "C1", "b1", "SELF_TEST_TOPIC", "rmq_sys_anything", "RMQ_SYS_TRANS_HALF_TOPIC"):
        assert m.is_system_topic(t), t
    assert not m.is_system_topic("OrderTopic")

    off = TopicConfigManager(
        str(tmp_path), _cfg(auto_create_topic_enable=False, cluster_topic_enable=False, trace_topic_enable=True)
    )
    assert off.get("TBW102") is None
    assert off.get("DefaultCluster").perm == 1
    assert off.get("RMQ_SYS_TRACE_TOPIC") is not None


def test_topic_create_update_delete_persist_and_bump_version(tmp_path) -> None:
    m = TopicConfigManager(str(tmp_path), _cfg())
    calls: list[int] = []
    m.on_change = lambda: calls.append(1)
    v0 = m.data_version.counter
    m.create_or_update(TopicConfig("T1", 4, 4, 6))
    assert m.data_version.counter == v0 + 1 and calls == [1]
    m.create_or_update(TopicConfig("T1", 8, 8, 4, order=True))
    assert m.data_version.counter == v0 + 2

    again = TopicConfigManager(str(tmp_path), _cfg())
    again.load()
    assert again.get("T1") == TopicConfig("T1", 8, 8, 4, order=True)
    assert again.data_version == m.data_version

    assert m.delete("T1") is True and m.delete("T1") is False
    assert m.data_version.counter == v0 + 3 and len(calls) == 3
    third = TopicConfigManager(str(tmp_path), _cfg())
    third.load()
    assert third.get("T1") is None


def test_topics_json_is_java_wrapper_shape(tmp_path) -> None:
    m = TopicConfigManager(str(tmp_path), _cfg())
    m.create_or_update(TopicConfig("T1", 2, 3, 6))
    obj = json.loads((tmp_path / "topics.json").read_bytes())
    assert set(obj) == {"dataVersion", "topicConfigTable"}
    assert set(obj["dataVersion"]) == {"counter", "timestamp"}
    assert obj["topicConfigTable"]["T1"] == {
        "order": False, "perm": 6, "readQueueNums": 2, "topicFilterType": "SINGLE_TAG",
        "topicName": "T1", "topicSysFlag": 0, "writeQueueNums": 3,
    }


def test_topics_json_written_by_java_loads(tmp_path) -> None:
    java = (
        '{\n\t"dataVersion":{\n\t\t"counter":12,\n\t\t"timestamp":1700000000000\n\t},\n'
        '\t"topicConfigTable":{\n\t\t"JT":{\n\t\t\t"order":true,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"JT",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n\t\t},\n'
        '\t\t"TBW102":{"order":false,"perm":7,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        '"topicName":"TBW102","topicSysFlag":0,"writeQueueNums":4}\n\t}\n}'
    )
    (tmp_path / "topics.json").write_text(java)
    m = TopicConfigManager(str(tmp_path), _cfg())
    m.load()
    assert m.get("JT") == TopicConfig("JT", 4, 4, 6, order=True)
    assert m.get("TBW102").write_queue_nums == 4  # file overrides the built-in
    assert m.data_version == DataVersion(12, 1700000000000)
    assert m.get("SELF_TEST_TOPIC") is not None  # built-ins not in the file stay


def test_topics_bak_fallback_and_both_corrupt(tmp_path) -> None:
    m = TopicConfigManager(str(tmp_path), _cfg())
    m.create_or_update(TopicConfig("A", 1, 1, 6))
    m.create_or_update(TopicConfig("B", 1, 1, 6))  # .bak now holds the version with A only
    (tmp_path / "topics.json").write_bytes(b'{"dataVersion":{"coun')  # torn main file
    again = TopicConfigManager(str(tmp_path), _cfg())
    again.load()
    assert again.get("A") is not None and again.get("B") is None

    (tmp_path / "topics.json.bak").write_bytes(b"\x00garbage")
    with pytest.raises(ConfigError, match="topics.json"):
        TopicConfigManager(str(tmp_path), _cfg()).load()


def test_topics_missing_main_file_uses_bak_and_empty_dir_is_fresh(tmp_path) -> None:
    fresh = TopicConfigManager(str(tmp_path), _cfg())
    fresh.load()
    assert fresh.get("TBW102") is not None
    m = TopicConfigManager(str(tmp_path), _cfg())
    m.create_or_update(TopicConfig("A", 1, 1, 6))
    m.create_or_update(TopicConfig("B", 1, 1, 6))
    os.remove(tmp_path / "topics.json")
    again = TopicConfigManager(str(tmp_path), _cfg())
    again.load()
    assert again.get("A") is not None


def test_create_on_send_inherits_from_template(tmp_path) -> None:
    m = TopicConfigManager(str(tmp_path), _cfg(default_topic_queue_nums=8))
    v0 = m.data_version.counter
    tc = m.create_on_send("NewT", "TBW102", 4)
    assert tc == TopicConfig("NewT", 4, 4, 6)
    assert m.data_version.counter == v0 + 1
    assert m.create_on_send("NewT", "TBW102", 2) is tc  # existing: unchanged, no bump
    assert m.data_version.counter == v0 + 1
    assert m.create_on_send("Big", "TBW102", 100).write_queue_nums == 8  # capped by template
    assert m.create_on_send("X", "NoSuchTemplate", 4) is None
    assert m.create_on_send("Y", "SELF_TEST_TOPIC", 4) is None  # template without INHERIT
    reloaded = TopicConfigManager(str(tmp_path), _cfg())
    reloaded.load()
    assert reloaded.get("NewT") == tc


def test_create_on_send_refused_when_auto_create_disabled(tmp_path) -> None:
    (tmp_path / "topics.json").write_text(
        '{"dataVersion":{"counter":1,"timestamp":1},"topicConfigTable":{"TBW102":{"perm":7,"readQueueNums":8,'
        '"writeQueueNums":8,"topicName":"TBW102","topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}}}'
    )
    m = TopicConfigManager(str(tmp_path), _cfg(auto_create_topic_enable=False))
    m.load()
    assert m.get("TBW102") is not None
    assert m.create_on_send("NewT", "TBW102", 4) is None


def test_create_system_topic_is_idempotent(tmp_path) -> None:
    m = TopicConfigManager(str(tmp_path), _cfg())
    a = m.create_system_topic("%RETRY%g1", 1)
    v = m.data_version.counter
    assert m.create_system_topic("%RETRY%g1", 5) is a
    assert m.data_version.counter == v
    assert a.read_queue_nums == 1 and a.perm == 6


def test_topic_validation_messages() -> None:
    assert validate_topic_name("Good_Topic-1%|x") is None
    assert "blank" in validate_topic_name("")
    assert "illegal characters" in validate_topic_name("a b")
    assert "longer than" in validate_topic_name("a" * 128)
    assert validate_topic_name("a" * 127) is None
    assert "readQueueNums 0" in validate_topic_config(TopicConfig("T", 0, 1, 6))
    assert "writeQueueNums 1025" in validate_topic_config(TopicConfig("T", 1, 1025, 6))
    assert "perm 16" in validate_topic_config(TopicConfig("T", 1, 1, 16))
    assert "topicFilterType" in validate_topic_config(TopicConfig("T", 1, 1, 6, topic_filter_type="X"))
    assert validate_topic_config(TopicConfig("T", 1024, 1, 7)) is None


# ---- subscription groups --------------------------------------------------------------------------------
def test_groups_builtin_auto_create_and_round_trip(tmp_path) -> None:
    m = SubscriptionGroupManager(str(tmp_path), _cfg())
    assert m.get("TOOLS_CONSUMER") is not None
    v0 = m.data_version.counter
    g = m.find_or_create("G1")
    assert g == SubscriptionGroupConfig("G1")
    assert m.find_or_create("G1") is g and m.data_version.counter == v0 + 1
    m.update(SubscriptionGroupConfig("G2", consume_enable=False, retry_max_times=3, broker_id=1))
    again = SubscriptionGroupManager(str(tmp_path), _cfg())
    again.load()
    assert again.get("G2") == SubscriptionGroupConfig("G2", consume_enable=False, retry_max_times=3, broker_id=1)
    assert again.data_version == m.data_version
    assert m.delete("G2") and not m.delete("G2")

    off = SubscriptionGroupManager(str(tmp_path / "x"), _cfg(auto_create_subscription_group=False))
    assert off.find_or_create("G9") is None
    assert off.find_or_create("CID_RMQ_SYS_FOO") is not None  # system groups always


def test_group_json_shape_and_unknown_keys_survive(tmp_path) -> None:
    java = {
        "dataVersion": {"counter": 2, "timestamp": 5},
        "subscriptionGroupTable": {
            "JG": {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                   "consumeFromMinEnable": True, "groupName": "JG", "notifyConsumerIdsChangedEnable": True,
                   "retryMaxTimes": 5, "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1,
                   "consumeMessageOrderly": False, "attributes": {}}
        },
    }
    (tmp_path / "subscriptionGroup.json").write_text(json.dumps(java))
    m = SubscriptionGroupManager(str(tmp_path), _cfg())
    m.load()
    jg = m.get("JG")
    assert jg.retry_max_times == 5
    assert jg.to_json_obj() == java["subscriptionGroupTable"]["JG"]
    m.update(SubscriptionGroupConfig("Z"))
    written = json.loads((tmp_path / "subscriptionGroup.json").read_bytes())
    assert written["subscriptionGroupTable"]["JG"]["consumeMessageOrderly"] is False


def test_groups_both_files_corrupt_is_config_error(tmp_path) -> None:
    (tmp_path / "subscriptionGroup.json").write_text('{"subscriptionGroupTable":{"G":{"groupName":')
    (tmp_path / "subscriptionGroup.json.bak").write_text("[1,2")
    with pytest.raises(ConfigError, match="subscriptionGroup.json"):
        SubscriptionGroupManager(str(tmp_path), _cfg()).load()


# ---- consumer offsets -----------------------------------------------------------------------------------
def test_offsets_commit_query_and_round_trip(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    assert m.query("G", "T", 0) == -1
    m.commit("G", "T", 0, 12)
    m.commit("G", "T", 1, 7)
    m.commit("G2", "T", 0, 3)
    m.commit("G", "U", 3, 1)
    assert m.query("G", "T", 1) == 7 and m.query("G", "T", 2) == -1
    assert m.persist() is True
    raw = (tmp_path / "consumerOffset.json").read_bytes()
    assert raw.startswith(b'{"dataVersion":{"counter":')  # 5.x form (C: RIP-32 data version)
    assert b'"offsetTable":{"T@G":{0:12,1:7}' in raw  # fastjson form, unquoted keys

    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.table() == m.table()
    assert again.groups_of_topic("T") == {"G", "G2"}
    assert again.topics_of_group("G") == {"T", "U"}
    assert again.query_all("G", "T") == {0: 12, 1: 7}


def test_offsets_persist_only_when_changed(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    assert m.persist() is False and not (tmp_path / "consumerOffset.json").exists()
    m.commit("G", "T", 0, 5)
    assert m.persist() is True
    mtime = os.stat(tmp_path / "consumerOffset.json").st_mtime_ns
    m.commit("G", "T", 0, 5)  # same value: nothing moved
    assert not m.dirty and m.persist() is False
    assert os.stat(tmp_path / "consumerOffset.json").st_mtime_ns == mtime
    m.commit("G", "T", 0, 6)
    assert m.dirty and m.persist() is True
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query("G", "T", 0) == 6 and not again.dirty
    assert again.persist() is False


def test_offsets_java_file_with_unquoted_keys_loads(tmp_path) -> None:
    (tmp_path / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"%RETRY%cg@cg":{0:0\n\t\t},\n\t\t"TopicTest@cg":{0:250,1:249,2:251,3:250\n\t\t}\n\t}\n}'
    )
    m = ConsumerOffsetManager(str(tmp_path))
    m.load()
    assert m.query("cg", "TopicTest", 2) == 251
    assert m.query("cg", "%RETRY%cg", 0) == 0
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable":{"T@G":{"0":9}}}')  # quoted keys too
    m2 = ConsumerOffsetManager(str(tmp_path))
    m2.load()
    assert m2.query("G", "T", 0) == 9


def test_offsets_bak_fallback_and_both_corrupt(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.commit("G", "T", 0, 1)
    m.persist()
    m.commit("G", "T", 0, 2)
    m.persist()
    (tmp_path / "consumerOffset.json").write_bytes(b'{"offsetTable":{"T@G":{0:')
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query("G", "T", 0) == 1
    (tmp_path / "consumerOffset.json.bak").write_bytes(b"{{{{")
    with pytest.raises(ConfigError, match="consumerOffset.json"):
        ConsumerOffsetManager(str(tmp_path)).load()


def test_offsets_remove_group_and_topic(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.commit("G1", "T1", 0, 1)
    m.commit("G1", "T2", 0, 1)
    m.commit("G2", "T1", 0, 1)
    m.persist()
    assert m.remove_group("G1") is True and m.dirty
    assert m.table() == {"T1@G2": {0: 1}}
    assert m.remove_group("G1") is False
    assert m.remove_topic("T1") is True
    assert m.table() == {}
    m.persist()
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.table() == {}


def test_offsets_failed_write_stays_dirty(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    m = ConsumerOffsetManager(str(blocker))  # config dir is a regular file: the write must fail
    m.commit("G", "T", 0, 1)
    with pytest.raises(OSError):
        m.persist()
    assert m.dirty


def test_offsets_stale_snapshot_never_overwrites_newer(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.commit("G", "T", 0, 1)
    old = m.snapshot_if_dirty()
    m.commit("G", "T", 0, 2)
    new = m.snapshot_if_dirty()
    m.write_snapshot(new)
    m.write_snapshot(old)  # a slow writer thread finishing late
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query("G", "T", 0) == 2


def test_offsets_persist_writes_a_taken_but_unwritten_snapshot(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.commit("G", "T", 0, 7)
    assert m.snapshot_if_dirty() is not None and not m.dirty  # the writer never ran (e.g. cancelled)
    assert m.persist() is True
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query("G", "T", 0) == 7
    assert m.persist() is False
