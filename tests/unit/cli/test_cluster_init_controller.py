"""`orbitmq cluster init --mode controller DIR`: 3 controllers (one Raft group), 1 name server and 2 groups of 3
controller-mode brokers, each file accepted by its reader; member start order controllers -> namesrv -> brokers."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from orbitmq.broker.config_file import load_broker_conf, parse_properties
from orbitmq.cli.cluster import init_cluster, init_controller_cluster, members
from orbitmq.cli.main import main
from orbitmq.controller import load_controller_conf
from orbitmq.namesrv.config import load_namesrv_conf


def test_layout_and_start_order(tmp_path: Path) -> None:
    d = tmp_path / "c"
    written = init_controller_cluster(d, namesrv_port=19876, broker_port=20911, controller_port=19878)
    assert len(written) == 3 + 1 + 6
    assert [(name, argv) for name, argv, _ in members(d)] == [
        ("controller-n0", ["controller", "-c", "controller.conf"]),
        ("controller-n1", ["controller", "-c", "controller.conf"]),
        ("controller-n2", ["controller", "-c", "controller.conf"]),
        ("namesrv-0", ["namesrv", "-c", "namesrv.conf"]),
        *[(f"broker-{g}-{i}", ["broker", "-c", "broker.conf"]) for g in "ab" for i in range(3)],
    ]


def test_controller_files_are_one_raft_group_the_reader_accepts(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_controller_cluster(d, controller_port=19878)
    cfgs = []
    for i in range(3):
        cfg, warnings = load_controller_conf(d / f"controller-n{i}" / "controller.conf")
        assert warnings == []
        cfgs.append(cfg)
    assert {c.controller_dleger_group for c in cfgs} == {"OrbitController"}
    assert {c.controller_dleger_peers for c in cfgs} == {
        "n0-127.0.0.1:19878;n1-127.0.0.1:19879;n2-127.0.0.1:19880"}
    assert [(c.controller_dleger_self_id, c.port) for c in cfgs] == [("n0", 19878), ("n1", 19879), ("n2", 19880)]
    # relative in the file, resolved against the file's folder (wherever the member is started from)
    assert [c.controller_store_path for c in cfgs] == [str(d / f"controller-n{i}" / "store") for i in range(3)]


def test_name_server_file(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_controller_cluster(d, namesrv_port=19876)
    cfg, warnings = load_namesrv_conf(d / "namesrv-0" / "namesrv.conf")
    assert (cfg.listen_port, warnings) == (19876, [])
    assert not (d / "namesrv-1").exists()


def test_broker_files_content(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_controller_cluster(d, namesrv_port=19876, broker_port=20911, controller_port=19878, ip="10.1.2.3")
    seen_ports: set[int] = set()
    for g in "ab":
        for i in range(3):
            props = parse_properties((d / f"broker-{g}-{i}" / "broker.conf").read_text())
            assert props == props | {
                "enableControllerMode": "true", "brokerId": "-1", "allAckInSyncStateSet": "true",
                "controllerAddr": "10.1.2.3:19878;10.1.2.3:19879;10.1.2.3:19880", "brokerName": f"broker-{g}",
                "brokerClusterName": "DefaultCluster", "namesrvAddr": "10.1.2.3:19876", "brokerIP1": "10.1.2.3",
                "inSyncReplicas": "2", "minInSyncReplicas": "1", "storePathRootDir": "store",
            }
            port, ha = int(props["listenPort"]), int(props["haListenPort"])
            assert ha == port + 1
            # every broker's ports (port-2 .. port+1) are its own
            assert not seen_ports & set(range(port - 2, port + 2))
            seen_ports |= set(range(port - 2, port + 2))
    assert min(seen_ports) == 20909


def test_init_command_modes(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["cluster", "init", str(tmp_path / "ctl"), "--mode", "controller", "--groups", "1",
                                  "--replicas", "2"])
    assert r.exit_code == 0, r.output
    assert [m[0] for m in members(tmp_path / "ctl")] == ["controller-n0", "controller-n1", "controller-n2",
                                                         "namesrv-0", "broker-a-0", "broker-a-1"]
    assert "start it with: orbitmq cluster -d" in r.output
    r = CliRunner().invoke(main, ["cluster", "init", str(tmp_path / "ctl"), "--mode", "controller"])
    assert r.exit_code == 1 and "is not empty" in r.stderr
    r = CliRunner().invoke(main, ["cluster", "init", str(tmp_path / "classic")])
    assert r.exit_code == 0
    assert [m[0] for m in members(tmp_path / "classic")][:2] == ["namesrv-0", "namesrv-1"]
    assert not list((tmp_path / "classic").glob("controller-*"))


def test_classic_layout_unchanged(tmp_path: Path) -> None:
    init_cluster(tmp_path / "c", namesrv_port=19876, broker_port=20911)
    assert [m[0] for m in members(tmp_path / "c")] == ["namesrv-0", "namesrv-1", "broker-a-0", "broker-a-1",
                                                       "broker-b-0", "broker-b-1"]


def test_broker_files_are_accepted_by_the_broker_conf_reader(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_controller_cluster(d, namesrv_port=19876, broker_port=20911, controller_port=19878)
    for g in "ab":
        for i in range(3):
            broker, store, warnings = load_broker_conf(str(d / f"broker-{g}-{i}" / "broker.conf"))
            assert warnings == []
            assert (broker.enable_controller_mode, broker.broker_id, broker.all_ack_in_sync_state_set,
                    broker.in_sync_replicas, broker.min_in_sync_replicas) == (True, -1, True, 2, 1)
            assert broker.controller_addrs == ["127.0.0.1:19878", "127.0.0.1:19879", "127.0.0.1:19880"]
            assert (broker.broker_name, broker.namesrv_addrs) == (f"broker-{g}", ["127.0.0.1:19876"])
            assert broker.ha_listen_port == broker.listen_port + 1
            assert Path(store.store_path_root_dir).name == "store"
