"""broker.conf parsing: Java properties syntax, aliases (incl. legacy spellings), coercion, warnings, errors."""

from __future__ import annotations

import os

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.config_file import apply_updates, load_broker_conf, parse_properties, to_properties

GOOD = """\
# a typical RocketMQ 4.x broker.conf
brokerClusterName = DefaultCluster
brokerName=broker-b
brokerId=0
deleteWhen=04
fileReservedTime=48
brokerRole=SYNC_MASTER
flushDiskType=SYNC_FLUSH
namesrvAddr=127.0.0.1:9876;127.0.0.2:9876
listenPort=20911
brokerIP1=10.1.2.3
autoCreateTopicEnable=false
mapedFileSizeCommitLog=10485760
storePathRootDir=data/store
! bang comment
sendMessageThreadPoolNums=16
longPollingEnable:true
notifyConsumerIdsChangedEnable   false
"""


def write(tmp_path, text: str) -> str:
    p = tmp_path / "broker.conf"
    p.write_text(text)
    return str(p)


def test_good_file_builds_both_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    broker, store, warnings = load_broker_conf(write(tmp_path, GOOD))
    assert broker.broker_name == "broker-b" and broker.broker_role == "SYNC_MASTER"
    assert broker.listen_port == 20911 and broker.ha_listen_port == 20912 and broker.vip_listen_port == 20909
    assert broker.namesrv_addrs == ["127.0.0.1:9876", "127.0.0.2:9876"]
    assert broker.broker_ip1 == "10.1.2.3" and broker.broker_ip2 == "10.1.2.3"
    assert broker.auto_create_topic_enable is False and broker.long_polling_enable is True
    assert broker.notify_consumer_ids_changed_enable is False
    assert store.mapped_file_size_commitlog == 10485760  # legacy "maped" spelling
    assert store.file_reserved_time_hours == 48 and store.delete_when == "04"
    assert store.flush_disk_type == "SYNC_FLUSH" and store.confirm_offset_mode == "flushed"
    assert store.store_path_root_dir == os.path.join(str(tmp_path), "data", "store")  # relative to cwd
    assert warnings == ["broker.conf: sendMessageThreadPoolNums is a RocketMQ setting that OrbitMQ ignores"]


def test_defaults_and_home_store_dir(tmp_path):
    broker, store, warnings = load_broker_conf(write(tmp_path, "brokerName=b\n"))
    assert store.store_path_root_dir == os.path.expanduser(os.path.join("~", "store"))
    assert store.confirm_offset_mode is None  # derived by the store: ASYNC_FLUSH -> "written"
    assert broker.listen_port == 10911 and broker.default_topic_queue_nums == 8
    assert broker.broker_ver_version == 409 and warnings == []


def test_unknown_key_is_a_warning_not_an_error(tmp_path):
    _, _, warnings = load_broker_conf(write(tmp_path, "brokerName=b\nlistenPrt=1\n"))
    assert warnings == ["broker.conf: unknown key 'listenPrt' ignored"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("listenPort=abc", "broker.conf: listenPort: 'abc' is not an integer"),
        ("autoCreateTopicEnable=yes", "broker.conf: autoCreateTopicEnable: 'yes' is not a boolean (true/false)"),
        ("brokerRole=LEADER", "brokerRole: 'LEADER' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
        ("flushDiskType=SOMETIMES", "flushDiskType must be one of"),
        ("namesrvAddr=localhost", "namesrvAddr: 'localhost' is not host:port"),
        ("listenPort=70000", "listenPort: 70000 is not a valid TCP port"),
    ],
)
def test_bad_values_raise_one_line_config_errors(tmp_path, line, message):
    with pytest.raises(ConfigError) as e:
        load_broker_conf(write(tmp_path, f"brokerName=b\n{line}\n"))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read broker config"):
        load_broker_conf(str(tmp_path / "nope.conf"))


def test_slave_needs_positive_broker_id_and_master_id_is_forced_to_zero(tmp_path):
    with pytest.raises(ConfigError, match="SLAVE broker needs brokerId > 0"):
        load_broker_conf(write(tmp_path, "brokerRole=SLAVE\nbrokerId=0\n"))
    broker, _, warnings = load_broker_conf(write(tmp_path, "brokerRole=ASYNC_MASTER\nbrokerId=3\n"))
    assert broker.broker_id == 0 and "brokerId 3 ignored" in warnings[0]
    broker, _, _ = load_broker_conf(write(tmp_path, "brokerRole=slave\nbrokerId=1\n"))
    assert broker.is_slave and broker.broker_id == 1


def test_properties_syntax_continuations_escapes_and_trailing_spaces():
    props = parse_properties("a = x  \nb=one \\\n   two\nc\\=d=e\n#x=y\n  \nu=\\u0041\\tB\n")
    assert props == {"a": "x", "b": "one two", "c=d": "e", "u": "A\tB"}


def test_store_path_commitlog_is_honoured(tmp_path):
    conf = f"storePathRootDir={tmp_path}/s\nstorePathCommitLog={tmp_path}/s/commitlog\n"
    _, store, warnings = load_broker_conf(write(tmp_path, conf))
    assert warnings == [] and store.commitlog_dir == f"{tmp_path}/s/commitlog"
    assert not store.commitlog_dir_is_separate
    conf = f"storePathRootDir={tmp_path}/s\nstorePathCommitLog=/elsewhere/commitlog/\n"
    _, store, warnings = load_broker_conf(write(tmp_path, conf))
    assert warnings == [] and store.commitlog_dir == "/elsewhere/commitlog" and store.commitlog_dir_is_separate
    conf = "storePathRootDir=s\nstorePathCommitLog=disk2/cl\n"  # a relative path is resolved as the root's is
    _, store, _ = load_broker_conf(write(tmp_path, conf))
    base = os.path.dirname(store.store_path_root_dir)
    assert os.path.isabs(store.commitlog_dir) and store.commitlog_dir == os.path.join(base, "disk2", "cl")
    with pytest.raises(ConfigError, match="storePathCommitLog"):
        load_broker_conf(write(tmp_path, f"storePathRootDir={tmp_path}/s\nstorePathCommitLog={tmp_path}/s\n"))


def test_round_trip_properties_and_hot_updates():
    cfg = BrokerConfig(broker_ip1="127.0.0.1")
    props = to_properties(cfg)
    assert props["listenPort"] == "10911" and props["autoCreateTopicEnable"] == "true"
    new, warnings = apply_updates(cfg, {"autoCreateTopicEnable": "false", "listenPort": "1"})
    assert new.auto_create_topic_enable is False and new.listen_port == 10911
    assert warnings == ["UPDATE_BROKER_CONFIG: listenPort needs a broker restart"]
