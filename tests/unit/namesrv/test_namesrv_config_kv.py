"""namesrv.conf parsing and the persisted KV config."""

from __future__ import annotations

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.base.properties import parse_properties
from orbitmq.namesrv.config import NamesrvConfig, load_namesrv_conf
from orbitmq.namesrv.kv_config import KvConfig


def test_parse_properties_syntax():
    text = "# comment\n! other\n\n a = 1 \nb:2\nc 3\nlong=x\\\n  y\nempty=\n"
    assert [(k, v) for _, k, v in parse_properties(text)] == [
        ("a", "1"), ("b", "2"), ("c", "3"), ("long", "xy"), ("empty", "")]


def test_load_conf_known_ignored_and_unknown_keys(tmp_path):
    p = tmp_path / "namesrv.conf"
    p.write_text(
        "listenPort=19876\norderMessageEnable=TRUE\nkvConfigPath=%s\nscanNotActiveBrokerInterval=200\n"
        "brokerChannelExpiredTime=1000\nserverWorkerThreads=8\nbogusKey=1\n" % (tmp_path / "kv.json")
    )
    cfg, warnings = load_namesrv_conf(p)
    assert cfg.listen_port == 19876 and cfg.order_message_enable is True
    assert cfg.kv_config_path == str(tmp_path / "kv.json")
    assert cfg.scan_not_active_broker_interval_ms == 200 and cfg.broker_channel_expired_time_ms == 1000
    assert len(warnings) == 1 and "bogusKey" in warnings[0] and ":7:" in warnings[0]


def test_load_conf_bad_values(tmp_path):
    p = tmp_path / "namesrv.conf"
    p.write_text("listenPort=abc\n")
    with pytest.raises(ConfigError, match="listenPort: 'abc' is not an integer"):
        load_namesrv_conf(p)
    p.write_text("orderMessageEnable=yes\n")
    with pytest.raises(ConfigError, match="boolean"):
        load_namesrv_conf(p)
    p.write_text("listenPort=70000\n")
    with pytest.raises(ConfigError, match="out of range"):
        load_namesrv_conf(p)
    with pytest.raises(ConfigError, match="cannot read"):
        load_namesrv_conf(tmp_path / "missing.conf")


def test_defaults():
    cfg = NamesrvConfig()
    cfg.validate()
    assert cfg.listen_port == 9876 and cfg.broker_channel_expired_time_ms == 120_000
    assert cfg.kv_config_path.endswith("namesrv/kvConfig.json")


def test_kv_put_get_delete_persist_reload(tmp_path):
    path = tmp_path / "kv" / "kvConfig.json"
    kv = KvConfig(path)
    kv.load()
    assert kv.get("ns", "k") is None and kv.namespace("ns") is None
    kv.put("ORDER_TOPIC_CONFIG", "T1", "broker-a:4")
    kv.put("ns", "k", "v")
    assert b'"configTable"' in path.read_bytes()
    again = KvConfig(path)
    again.load()
    assert again.get("ORDER_TOPIC_CONFIG", "T1") == "broker-a:4"
    assert again.namespace("ns") == {"k": "v"}
    assert again.delete("ns", "k") and not again.delete("ns", "k")
    third = KvConfig(path)
    third.load()
    assert third.namespace("ns") is None


def test_kv_reads_java_pretty_file_and_falls_back_to_backup(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_text('{\n\t"configTable":{\n\t\t"A":{\n\t\t\t"x":"1"\n\t\t}\n\t}\n}')
    kv = KvConfig(path)
    kv.load()
    assert kv.get("A", "x") == "1"
    kv.put("A", "y", "2")  # leaves the previous file as .bak
    path.write_bytes(b'{"configTable":{"A":')  # torn
    kv2 = KvConfig(path)
    kv2.load()
    assert kv2.get("A", "x") == "1"


def test_kv_all_copies_corrupt_is_config_error(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_bytes(b"{nope")
    with pytest.raises(ConfigError, match="corrupt"):
        KvConfig(path).load()
