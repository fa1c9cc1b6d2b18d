"""controller.conf parsing and validation (RocketMQ key names, one port per controller)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.base.properties import parse_properties
from orbitmq.controller.config import (
    ControllerConfig,
    controller_config_from_properties,
    load_controller_conf,
    parse_peers,
)

PEERS = "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"


def conf(text: str) -> tuple[ControllerConfig, list[str]]:
    return controller_config_from_properties(parse_properties(text))


def test_sample_config(tmp_path: Path) -> None:
    p = tmp_path / "controller-n0.conf"
    p.write_text(f"controllerDLegerGroup = group1\ncontrollerDLegerPeers = {PEERS}\ncontrollerDLegerSelfId = n0\n"
                 f"controllerStorePath = {tmp_path}/store\nenableElectUncleanMaster=true\n"
                 "scanInactiveMasterInterval: 2000\n# comment\ncontrollerType=DLedger\nbogusKey=1\n")
    cfg, warnings = load_controller_conf(p)
    assert cfg.controller_dleger_group == "group1"
    assert cfg.peers == {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
    assert cfg.self_addr == "127.0.0.1:9878" and cfg.port == 9878
    assert cfg.enable_elect_unclean_master and cfg.scan_inactive_master_interval_ms == 2000
    assert cfg.controller_store_path == f"{tmp_path}/store"
    assert warnings == ["controller-n0.conf:9: unknown key 'bogusKey' ignored"]


def test_defaults() -> None:
    cfg, _ = conf(f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n1\n")
    assert (cfg.scan_not_active_broker_interval_ms, cfg.scan_inactive_master_interval_ms) == (5000, 5000)
    assert cfg.notify_broker_role_changed and not cfg.enable_elect_unclean_master
    assert cfg.elect_master_max_retry_count == 3
    assert cfg.controller_store_path.endswith("DLedgerController")
    assert cfg.black_list() >= {"configBlackList", "configStorePath", "controllerDLegerPeers"}


@pytest.mark.parametrize(("text", "match"), [
    ("controllerDLegerPeers=n0-a:1\ncontrollerDLegerSelfId=n0", "controllerDLegerGroup"),
    ("controllerDLegerGroup=g\ncontrollerDLegerSelfId=n0", "controllerDLegerPeers is required"),
    (f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n9", "not one of the peers"),
    (f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\nlistenPort=9876",
     "differs from this node's peer port"),
    (f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\nelectMasterMaxRetryCount=0",
     "electMasterMaxRetryCount"),
    (f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\n"
     "scanNotActiveBrokerInterval=x", "not an integer"),
    (f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\n"
     "notifyBrokerRoleChanged=yes", "not a boolean"),
])
def test_bad_configs(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        conf(text)


def test_listen_port_equal_to_peer_port_is_fine() -> None:
    cfg, _ = conf(f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n2\n"
                  "listenPort=9858")
    assert cfg.port == 9858


@pytest.mark.parametrize("peers", ["n0", "n0-host", "n0-host:x", "-h:1", "n0-h:1;n0-h:2", "n0-h:70000"])
def test_bad_peers(peers: str) -> None:
    with pytest.raises(ConfigError):
        parse_peers(peers)


def test_foreign_keys_not_warned() -> None:
    _, warnings = controller_config_from_properties(
        parse_properties(f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\n"
                         "kvConfigPath=/x\n"), foreign_keys=frozenset({"kvConfigPath"}))
    assert warnings == []


def test_to_properties_round_trip() -> None:
    cfg, _ = conf(f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\n"
                  "enableElectUncleanMaster=true\n")
    text = cfg.to_properties()
    assert "controllerDLegerPeers=" + PEERS + "\n" in text and "enableElectUncleanMaster=true\n" in text
    again, warnings = controller_config_from_properties(parse_properties(text))
    assert again == cfg and warnings == []


def test_properties_continuation_and_separators() -> None:
    assert parse_properties("a=1\nb : 2\nc 3\n! x\nd=4\\\n  5\n") == [
        (1, "a", "1"), (2, "b", "2"), (3, "c", "3"), (5, "d", "45")]
