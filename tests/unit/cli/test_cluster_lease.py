"""`orbitmq cluster init --mode lease DIR` (cli/cluster_lease.py): a name server and a two-broker lease group whose
broker.conf files load as lease-election brokers of one group on distinct ports, with the setup SQL for the default
PostgreSQL URL (or none with --lease-url), and a non-empty folder refused."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from orbitmq.broker.config_file import load_broker_conf
from orbitmq.cli.cluster import cluster_group, members
from orbitmq.cli.cluster_lease import DEFAULT_LEASE_URL


def test_init_lease_writes_a_two_node_group_on_postgresql(tmp_path: Path) -> None:
    d = tmp_path / "c"
    r = CliRunner().invoke(cluster_group, ["init", "--mode", "lease", "--namesrv-port", "19876", "--broker-port",
                                           "20911", str(d)])
    assert r.exit_code == 0, r.output
    assert [name for name, _, _ in members(d)] == ["namesrv-0", "broker-a-0", "broker-a-1"]
    confs = [load_broker_conf(str(d / f"broker-a-{i}" / "broker.conf"))[0] for i in range(2)]
    assert all(c.enable_lease_election and c.lease_store_url == DEFAULT_LEASE_URL for c in confs)
    assert {c.lease_name_or_default for c in confs} == {"DefaultCluster/broker-a"}
    assert [c.listen_port for c in confs] == [20911, 20921] and confs[0].namesrv_addr == "127.0.0.1:19876"
    assert "CREATE DATABASE orbitmq_lease" in (d / "lease-db.sql").read_text()
    again = CliRunner().invoke(cluster_group, ["init", "--mode", "lease", str(d)])
    assert again.exit_code != 0 and "not empty" in again.output


def test_init_lease_with_an_explicit_url(tmp_path: Path) -> None:
    d = tmp_path / "c"
    url = "mysql://u:p@127.0.0.1:3306/leases"
    r = CliRunner().invoke(cluster_group, ["init", "--mode", "lease", "--lease-url", url, str(d)])
    assert r.exit_code == 0, r.output
    assert load_broker_conf(str(d / "broker-a-1" / "broker.conf"))[0].lease_store_url == url
    assert not (d / "lease-db.sql").exists()
