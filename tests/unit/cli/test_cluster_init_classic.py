"""`orbitmq cluster init` (classic): the layout turns on what the README promises for it (RIP-32 acting master on
brokers and name servers, remote escape with two groups), every file loads without warnings, and the member
helpers find the members in start order and select them by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.broker.config_file import load_broker_conf
from orbitmq.cli.cluster import init_cluster
from orbitmq.cli.cluster_members import find_members, listen_port, running_pid, select
from orbitmq.namesrv.config import load_namesrv_conf


def test_classic_layout_enables_acting_master(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_cluster(d, namesrv_port=19876, broker_port=20911)
    for name in ("broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"):
        broker, store, warnings = load_broker_conf(str(d / name / "broker.conf"))
        assert warnings == []
        assert broker.enable_slave_acting_master and broker.enable_remote_escape and not broker.skip_pre_online
        assert store.store_path_root_dir == str(d / name / "store")
    for i in range(2):
        ns, warnings = load_namesrv_conf(d / f"namesrv-{i}" / "namesrv.conf")
        assert warnings == [] and ns.support_acting_master
        assert ns.kv_config_path == str(d / f"namesrv-{i}" / "kvConfig.json")


def test_classic_layout_without_acting_master(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_cluster(d, groups=1, acting_master=False)
    broker, _, _ = load_broker_conf(str(d / "broker-a-0" / "broker.conf"))
    assert not broker.enable_slave_acting_master and not broker.enable_remote_escape
    assert not load_namesrv_conf(d / "namesrv-0" / "namesrv.conf")[0].support_acting_master


def test_members_in_start_order_and_by_name(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_cluster(d, namesrv_port=19876, broker_port=20911, groups=1)
    found = find_members(d)
    assert [(m.name, m.kind) for m in found] == [("namesrv-0", "namesrv"), ("namesrv-1", "namesrv"),
                                                ("broker-a-0", "broker"), ("broker-a-1", "broker")]
    assert [listen_port(m) for m in found] == [19876, 19877, 20911, 20921]
    assert [m.name for m in select(found, ("broker-a-1", "namesrv-0"))] == ["namesrv-0", "broker-a-1"]
    with pytest.raises(ValueError, match="no member broker-z-0"):
        select(found, ["broker-z-0"])
    member = found[2]
    assert running_pid(member) is None
    member.pid_file.write_text("999999999\n")  # no such process: stale, removed
    assert running_pid(member) is None and not member.pid_file.exists()
