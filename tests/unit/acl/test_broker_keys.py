"""broker.conf keys of the ACL and of bindAddress: parsed, paths resolved against the conf's folder, defaults."""

from __future__ import annotations

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.config_file import build_configs


def test_acl_and_bind_keys(tmp_path) -> None:
    b, _, warnings = build_configs({"aclEnable": "true", "aclFilePath": "acl/plain_acl.yml", "rocketmqHome": "rmq",
                                    "bindAddress": "127.0.0.1", "storePathRootDir": str(tmp_path / "store")},
                                   base_dir=str(tmp_path))
    assert warnings == []  # aclEnable and rocketmqHome are real keys now, not "ignored"
    assert b.acl_enable and b.bind_address == "127.0.0.1"
    assert b.acl_file_path == str(tmp_path / "acl" / "plain_acl.yml")
    assert b.rocketmq_home == str(tmp_path / "rmq")


def test_defaults() -> None:
    b = BrokerConfig()
    assert not b.acl_enable and b.acl_file_path == "" and b.rocketmq_home == "" and b.bind_address == "0.0.0.0"
