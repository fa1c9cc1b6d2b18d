"""`orbitmq cluster start|status|restart|stop DIR [MEMBER...]`: members of a cluster folder in the background, found
again through their pid files by later commands; one member restarted alone goes through pre-online; a member
killed -9 shows as stopped; stop ends every member and removes the pid files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orbitmq.cli.cluster import init_cluster
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.testing.procs import blocking_request, free_port_block

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MAIN = [sys.executable, "-m", "orbitmq.cli.main"]


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MAIN, "cluster", *args], capture_output=True, text=True, timeout=timeout)


def status(d: Path) -> dict[str, str]:
    out = cli("status", str(d))
    assert out.returncode == 0, out.stderr
    return {line.split()[0]: line.split()[2] for line in out.stdout.splitlines()}


def pid_of(d: Path, member: str) -> int:
    return int((d / member / f"{member}.pid").read_text())


def test_background_members_start_restart_and_stop(tmp_path: Path) -> None:
    d = tmp_path / "c"
    broker_port = free_port_block(2, 10)
    init_cluster(d, namesrv_port=free_port_block(2, 1), broker_port=broker_port, groups=1,
                 commitlog_size=16 * 1024 * 1024)
    try:
        started = cli("start", str(d))
        assert started.returncode == 0, started.stdout + started.stderr
        assert [line.split()[1] for line in started.stdout.splitlines()] == [
            "namesrv-0", "namesrv-1", "broker-a-0", "broker-a-1"]
        assert set(status(d).values()) == {"running"}

        old = pid_of(d, "broker-a-0")
        restarted = cli("restart", str(d), "broker-a-0")
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert pid_of(d, "broker-a-0") != old
        info: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while "preOnline" not in info and time.monotonic() < deadline:  # listening first, serving a moment later
            resp = blocking_request(f"127.0.0.1:{broker_port}",
                                    RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
            info = KVTable.from_json(resp.body).table if resp.body else {}
            time.sleep(0.1)
        assert info.get("preOnline") in ("done", "no-slave"), info  # took the slave's offsets back when it saw it

        slave = pid_of(d, "broker-a-1")
        os.kill(slave, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{slave}/cmdline").exists() and Path(f"/proc/{slave}/cmdline").read_bytes() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert status(d)["broker-a-1"] == "stopped"
        assert not (d / "broker-a-1" / "broker-a-1.pid").exists()  # the stale pid file is gone

        unknown = cli("restart", str(d), "broker-z-0")
        assert unknown.returncode != 0 and "no member broker-z-0" in unknown.stderr
    finally:
        stopped = cli("stop", str(d))
    assert stopped.returncode == 0, stopped.stderr
    assert [line.split()[0] for line in stopped.stdout.splitlines()] == [
        "broker-a-1", "stopped", "stopped", "stopped"]
    assert set(status(d).values()) == {"stopped"} and not list(d.glob("*/*.pid"))
