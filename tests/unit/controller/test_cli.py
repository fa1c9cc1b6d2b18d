"""`orbitmq controller` and the namesrv embedding: configuration errors are one line with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orbitmq.cli import CliError
from orbitmq.cli.controller import embedded_controller_config
from orbitmq.cli.main import main


def run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def test_missing_required_key(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("controllerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n")
    code, out = run(["controller", "-c", str(conf)])
    assert code == 2
    assert out.strip() == "orbitmq: error: controller: controllerDLegerGroup is required"


def test_unreadable_file(tmp_path: Path) -> None:
    code, out = run(["controller", "-c", str(tmp_path / "nope.conf")])
    assert code == 2 and out.startswith("orbitmq: error: cannot read controller config") and out.count("\n") == 1


def test_listen_port_mismatch(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("controllerDLegerGroup=g\ncontrollerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n"
                    "listenPort=1234\n")
    code, out = run(["controller", "-c", str(conf)])
    assert code == 2 and "listenPort 1234 differs" in out


def test_embedded_config(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9876\nkvConfigPath=/tmp/kv.json\ncontrollerDLegerGroup=g\n"
                    "controllerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n")
    assert embedded_controller_config(str(conf)) is None  # not enabled
    conf.write_text(conf.read_text() + "enableControllerInNamesrv=true\n")
    loaded = embedded_controller_config(str(conf))
    assert loaded is not None and loaded[0].port == 9878 and loaded[0].controller_dleger_group == "g"
    conf.write_text("enableControllerInNamesrv=true\ncontrollerDLegerGroup=g\n")
    with pytest.raises(CliError, match="controllerDLegerPeers"):
        embedded_controller_config(str(conf))
    assert embedded_controller_config(None) is None


def test_namesrv_conf_accepts_controller_keys(tmp_path: Path) -> None:
    from orbitmq.namesrv.config import load_namesrv_conf

    conf = tmp_path / "namesrv.conf"
    conf.write_text("enableControllerInNamesrv=true\ncontrollerDLegerGroup=g\ncontrollerDLegerPeers=n0-127.0.0.1:9878\n"
                    "controllerDLegerSelfId=n0\ncontrollerStorePath=/tmp/x\nenableElectUncleanMaster=false\n")
    _, warnings = load_namesrv_conf(conf)
    assert warnings == []


def test_namesrv_fallback_hook(tmp_path: Path) -> None:
    from orbitmq.namesrv.config import NamesrvConfig
    from orbitmq.namesrv.handlers import NamesrvHandlers
    from orbitmq.namesrv.kv_config import KvConfig
    from orbitmq.namesrv.route_table import RouteTable
    from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode

    cfg = NamesrvConfig(kv_config_path=str(tmp_path / "kv.json"))
    h = NamesrvHandlers(RouteTable(cfg.broker_channel_expired_time_ms), KvConfig(cfg.kv_config_path), cfg)
    unknown = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
    assert h(object(), unknown).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    seen: list[int] = []

    def fallback(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd.code)
        return cmd.response(remark="from fallback")

    h.set_fallback(fallback, shared=frozenset({RequestCode.BROKER_HEARTBEAT}))
    assert h(object(), unknown).remark == "from fallback"
    beat = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": "b",
                                                                 "brokerAddr": "a:1"}, oneway=True)
    assert h(object(), beat) is None  # oneway: nobody answers
    own = h(object(), RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert own.code == ResponseCode.SUCCESS and own.remark != "from fallback"
    assert seen == [RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.BROKER_HEARTBEAT]
