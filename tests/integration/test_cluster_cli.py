"""`orbitmq cluster init DIR` + `orbitmq cluster -d DIR`: 2 name servers and 2 master/slave groups as processes;
clusterList shows every member with its role and replication lag; SIGTERM stops them all. Controller mode: the
controllers start first, brokers get their ids and master from them, and the admin commands see it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from orbitmq.broker.config_file import load_broker_conf
from orbitmq.cli.cluster import init_cluster, init_controller_cluster, members
from orbitmq.testing.procs import free_port_block as _free_block

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_init_writes_two_namesrvs_and_two_master_slave_groups(tmp_path: Path) -> None:
    d = tmp_path / "c"
    init_cluster(d, namesrv_port=19876, broker_port=20911)
    names = [m[0] for m in members(d)]
    assert names == ["namesrv-0", "namesrv-1", "broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"]
    broker, _store, warnings = load_broker_conf(str(d / "broker-a-1" / "broker.conf"))
    assert (broker.broker_role, broker.broker_id, broker.listen_port, warnings) == ("SLAVE", 1, 20921, [])
    assert broker.namesrv_addrs == ["127.0.0.1:19876", "127.0.0.1:19877"]


def test_cluster_command_starts_every_member_and_cluster_list_shows_roles(tmp_path: Path) -> None:
    d = tmp_path / "c"
    ns_port = _free_block(1, 1)
    broker_port = _free_block(4, 10)
    init_cluster(d, namesrv_port=ns_port, broker_port=broker_port, commitlog_size=16 * 1024 * 1024)
    main = [sys.executable, "-m", "orbitmq.cli.main"]
    proc = subprocess.Popen([*main, "cluster", "-d", str(d)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        rows: list[dict] = []
        while time.monotonic() < deadline:
            res = subprocess.run([*main, "clusterList", "--json", "-n", f"127.0.0.1:{ns_port}"],
                                 capture_output=True, timeout=30)
            if res.returncode == 0:
                rows = orjson.loads(res.stdout)
                if len(rows) == 4 and all(r["role"] != "-" for r in rows) and \
                        all(r["lagBytes"] == 0 for r in rows):
                    break
            time.sleep(0.5)
        got = sorted((r["brokerName"], r["BID"], r["role"], r["lagBytes"]) for r in rows)
        assert got == [("broker-a", 0, "SYNC_MASTER", 0), ("broker-a", 1, "SLAVE", 0),
                       ("broker-b", 0, "SYNC_MASTER", 0), ("broker-b", 1, "SLAVE", 0)], rows
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode()
    logs = {p.name: p.read_text(errors="replace")[-2000:] for p in d.glob("*/*.log")}
    assert out.decode().count("stopped ") == 6, (out.decode(), logs)


def _cli_json(main: list[str], *args: str) -> object | None:
    res = subprocess.run([*main, *args, "--json"], capture_output=True, timeout=30)
    return orjson.loads(res.stdout) if res.returncode == 0 else None


def _wait(what: str, check: Callable[[], object], timeout_s: float = 60.0) -> object:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def test_controller_mode_cluster_runs_and_admin_commands_see_it(tmp_path: Path) -> None:
    """`cluster init --mode controller` (one group of 3 here, to spare the machine) + `cluster -d`: controllers
    start first, the brokers get ids from the controller and one becomes master; clusterList shows the master
    epoch and SyncStateSet membership, getSyncStateSet the 3 replicas in sync, electMaster moves the master to
    a slave (epoch 2) and getBrokerEpoch shows that epoch on the new master; SIGTERM stops all 7 members."""
    d = tmp_path / "c"
    ns_port, ctl_port = _free_block(1, 1), _free_block(3, 1)
    init_controller_cluster(d, namesrv_port=ns_port, controller_port=ctl_port, broker_port=_free_block(3, 10),
                            groups=1, commitlog_size=16 * 1024 * 1024)
    main = [sys.executable, "-m", "orbitmq.cli.main"]
    ns, ctl = f"127.0.0.1:{ns_port}", ";".join(f"127.0.0.1:{ctl_port + i}" for i in range(3))
    proc = subprocess.Popen([*main, "cluster", "-d", str(d)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def members_in_sync() -> object:
            rows = _cli_json(main, "clusterList", "-n", ns)
            ok = isinstance(rows, list) and len(rows) == 3 and sorted(r["BID"] for r in rows)[0] == 0 and \
                all(r.get("inSync") == "yes" and r.get("epoch") == "1" for r in rows)
            return rows if ok else None

        _wait("3 brokers, one master, all in sync at epoch 1", members_in_sync)
        info = _cli_json(main, "getSyncStateSet", "-a", ctl, "-b", "broker-a")
        ri = info["replicasInfoTable"]["broker-a"]  # type: ignore[index]
        assert ri["masterEpoch"] == 1 and len(ri["inSyncReplicas"]) == 3, ri
        assert all(r["alive"] for r in ri["inSyncReplicas"])
        target = next(r for r in ri["inSyncReplicas"] if r["brokerId"] != ri["masterBrokerId"])
        got = _cli_json(main, "electMaster", "-a", ctl, "-c", "DefaultCluster", "-bn", "broker-a", "-b",
                        str(target["brokerId"]))
        assert got is not None and got["masterBrokerId"] == target["brokerId"] and got["masterEpoch"] == 2, got

        def new_master_listed() -> object:
            rows = _cli_json(main, "clusterList", "-n", ns)
            masters = [r for r in rows or [] if r["BID"] == 0]  # type: ignore[union-attr]
            return masters if [m["addr"] for m in masters] == [target["brokerAddress"]] and \
                masters[0]["epoch"] == "2" else None

        _wait("the elected broker registered as brokerId 0 at epoch 2", new_master_listed)
        epochs = _cli_json(main, "getBrokerEpoch", "-b", "broker-a", "-n", ns)
        assert any(r["address"] == target["brokerAddress"] and r["epoch"] == 2 and r["endOffset"] is None
                   for r in epochs), epochs  # type: ignore[union-attr]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    text = out.decode()
    logs = {p.name: p.read_text(errors="replace")[-1500:] for p in d.glob("*/*.log")}
    assert proc.returncode == 0, (text, logs)
    started = [line.split()[1] for line in text.splitlines() if line.startswith("started ")]
    assert started == ["controller-n0", "controller-n1", "controller-n2", "namesrv-0", "broker-a-0", "broker-a-1",
                       "broker-a-2"], text
    assert text.count("stopped ") == 7, (text, logs)
