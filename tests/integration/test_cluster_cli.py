"""`orbitmq cluster init DIR` + `orbitmq cluster -d DIR`: 2 name servers and 2 master/slave groups as processes;
clusterList shows every member with its role and replication lag; SIGTERM stops them all. Controller mode: the
controllers start first and elect a leader."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from orbitmq.broker.config_file import load_broker_conf
from orbitmq.cli.cluster import init_cluster, init_controller_cluster, members
from orbitmq.testing.procs import free_port, port_open

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _free_block(count: int, step: int) -> int:
    """A base port such that base-2 .. base+(count-1)*step+1 are all free (best effort)."""
    for _ in range(200):
        base = free_port() + 2
        ports = [base + i * step + d for i in range(count) for d in (-2, -1, 0, 1)]
        if max(ports) < 65000 and not any(port_open(p) for p in ports):
            return base
    raise RuntimeError("no free port block")


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


def test_controller_mode_folder_starts_controllers_first_and_they_elect_a_leader(tmp_path: Path) -> None:
    """`cluster -d` on an `init --mode controller` folder: the 3 controllers (started before the name server)
    form one Raft group that getControllerMetaData sees, then SIGTERM stops every member. The broker folders are
    left out here: this test is about the controllers and the start order."""
    d = tmp_path / "c"
    ns_port = _free_block(1, 1)
    ctl_port = _free_block(3, 1)
    init_controller_cluster(d, namesrv_port=ns_port, controller_port=ctl_port, broker_port=_free_block(6, 10))
    for sub in d.glob("broker-*"):
        shutil.rmtree(sub)
    main = [sys.executable, "-m", "orbitmq.cli.main"]
    proc = subprocess.Popen([*main, "cluster", "-d", str(d)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    addrs = ";".join(f"127.0.0.1:{ctl_port + i}" for i in range(3))
    try:
        deadline = time.monotonic() + 60
        rows: list[dict] = []
        while time.monotonic() < deadline:
            res = subprocess.run([*main, "getControllerMetaData", "-a", addrs, "--json"], capture_output=True,
                                 timeout=30)
            if res.returncode == 0:
                rows = orjson.loads(res.stdout)
                if len(rows) == 3 and sum(r["isLeader"] for r in rows) == 1 and \
                        len({r["leaderAddress"] for r in rows}) == 1:
                    break
            time.sleep(0.5)
        assert len(rows) == 3 and sum(r["isLeader"] for r in rows) == 1, rows
        assert {r["group"] for r in rows} == {"OrbitController"}
        assert port_open(ns_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode == 0, text
    started = [line.split()[1] for line in text.splitlines() if line.startswith("started ")]
    assert started == ["controller-n0", "controller-n1", "controller-n2", "namesrv-0"], text
    assert text.count("stopped ") == 4, text
