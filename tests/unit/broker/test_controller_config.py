"""broker.conf keys of controller mode (config.py / config_file.py): defaults, brokerId=-1, brokerRole ignored with a
warning, and the one-line refusals."""

from __future__ import annotations

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.config_file import build_configs

BASE = {"storePathRootDir": "/tmp/orbit-ctl-conf", "enableControllerMode": "true",
        "controllerAddr": "127.0.0.1:9878;127.0.0.1:9868"}


def test_defaults_and_keys() -> None:
    cfg, _, warnings = build_configs({**BASE, "brokerId": "-1"})
    assert not [w for w in warnings if "unknown" in w]
    assert cfg.enable_controller_mode and cfg.broker_id == -1 and cfg.broker_role == "SLAVE"
    assert cfg.controller_addrs == ["127.0.0.1:9878", "127.0.0.1:9868"]
    assert (cfg.sync_broker_metadata_period, cfg.check_sync_state_set_period, cfg.sync_controller_metadata_period,
            cfg.controller_heart_beat_timeout_mills, cfg.broker_election_priority) == (5000, 5000, 10000, 10000,
                                                                                     2147483647)
    assert (cfg.all_ack_in_sync_state_set, cfg.in_sync_replicas, cfg.min_in_sync_replicas,
            cfg.ha_max_time_slave_not_catchup, cfg.async_learner, cfg.sync_from_last_file) == (False, 1, 1, 15000,
                                                                                               False, False)
    cfg, _, _ = build_configs({**BASE, "allAckInSyncStateSet": "true", "inSyncReplicas": "2",
                               "minInSyncReplicas": "2", "haMaxTimeSlaveNotCatchup": "5000",
                               "storePathBrokerIdentity": "/tmp/x/id", "asyncLearner": "true",
                               "syncFromLastFile": "true", "brokerElectionPriority": "3"})
    assert cfg.all_ack_in_sync_state_set and cfg.in_sync_replicas == 2 and cfg.min_in_sync_replicas == 2
    assert cfg.store_path_broker_identity == "/tmp/x/id" and cfg.async_learner and cfg.sync_from_last_file
    assert cfg.broker_election_priority == 3 and cfg.ha_max_time_slave_not_catchup == 5000


def test_broker_role_is_ignored_with_a_warning() -> None:
    cfg, _, warnings = build_configs({**BASE, "brokerRole": "SYNC_MASTER", "brokerId": "0"})
    assert cfg.broker_role == "SLAVE"
    assert any("brokerRole SYNC_MASTER ignored" in w for w in warnings)


@pytest.mark.parametrize("extra, match", [
    ({"enableSlaveActingMaster": "true"}, "cannot both be true"),
    ({"controllerAddr": ""}, "controllerAddr"),
    ({"controllerAddr": "nohostport"}, "not host:port"),
    ({"brokerId": "-2"}, "brokerId"),
    ({"controllerHeartBeatTimeoutMills": "2000", "brokerHeartbeatInterval": "1000"}, "lease"),
    ({"minInSyncReplicas": "0"}, "minInSyncReplicas"),
])
def test_refusals_are_one_line(extra: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        build_configs({**BASE, **extra})
    assert "\n" not in str(e.value)


def test_classic_mode_unchanged() -> None:
    with pytest.raises(ConfigError, match="brokerId"):
        build_configs({"storePathRootDir": "/tmp/x", "brokerId": "-1", "brokerRole": "SLAVE"})
