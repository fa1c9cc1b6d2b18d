"""Members of a local cluster folder (`orbitmq cluster`) as background processes: start, stop, status.

Each member runs `python -m orbitmq.cli.main <kind> -c <kind>.conf` in its own folder and session, logs to
`<member>/<member>.log` and records its pid in `<member>/<member>.pid`, so any later `orbitmq cluster stop|restart`
(or the foreground runner) finds it. A pid file whose process is gone, or is no longer an orbitmq process (pid
reuse), counts as stopped and is removed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orbitmq.base.properties import parse_properties

STOP_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 60.0  # a master's pre-online may take up to 15 s before it listens for clients
MEMBER_KINDS = (("controller.conf", "controller"), ("namesrv.conf", "namesrv"), ("broker.conf", "broker"))


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # controller | namesrv | broker
    folder: Path

    @property
    def conf(self) -> Path:
        return self.folder / f"{self.kind}.conf"

    @property
    def argv(self) -> list[str]:
        return [self.kind, "-c", self.conf.name]

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.folder / f"{self.name}.pid"


def find_members(directory: Path) -> list[Member]:
    """Every member folder: controllers, then name servers, then brokers, each by name (start order)."""
    found: list[tuple[int, Member]] = []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        for rank, (conf, kind) in enumerate(MEMBER_KINDS):
            if (sub / conf).is_file():
                found.append((rank, Member(sub.name, kind, sub)))
                break
    found.sort(key=lambda m: (m[0], m[1].name))
    return [m for _, m in found]


def select(all_members: list[Member], names: tuple[str, ...] | list[str]) -> list[Member]:
    """The members named (all when none), in start order; ValueError naming the unknown ones."""
    if not names:
        return list(all_members)
    known = {m.name for m in all_members}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no member {', '.join(unknown)} (members: {', '.join(sorted(known))})")
    return [m for m in all_members if m.name in names]


def listen_port(member: Member) -> int | None:
    """The TCP port the member serves on, from its conf (None when the conf does not say)."""
    try:
        props = {k: v for _, k, v in parse_properties(member.conf.read_text(encoding="utf-8"))}
    except OSError:
        return None
    if member.kind == "controller":
        me = props.get("controllerDLegerSelfId", "")
        for peer in props.get("controllerDLegerPeers", "").split(";"):
            node, _, addr = peer.partition("-")
            if node == me and ":" in addr:
                return _int(addr.rsplit(":", 1)[1])
        return None
    return _int(props.get("listenPort", "")) or (9876 if member.kind == "namesrv" else 10911)


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _is_orbitmq(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True  # no /proc: trust the pid file
    try:
        return b"orbitmq" in cmdline.read_bytes()  # also false for a zombie (empty command line)
    except OSError:
        return False


def running_pid(member: Member) -> int | None:
    """The pid of the member's live process, or None (a stale pid file is removed)."""
    try:
        pid = int(member.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if _is_orbitmq(pid):
        return pid
    member.pid_file.unlink(missing_ok=True)
    return None


def launch(member: Member) -> subprocess.Popen[bytes]:
    """Start the member in its folder and own session, appending to its log; records the pid file."""
    with open(member.log, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "orbitmq.cli.main", *member.argv], cwd=member.folder,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    member.pid_file.write_text(f"{proc.pid}\n")
    return proc


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_ready(member: Member, proc: subprocess.Popen[bytes], timeout_s: float = READY_TIMEOUT_S) -> str | None:
    """Until the member listens on its port: None when it does, else the reason (exited, timed out)."""
    port = listen_port(member)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            return f"exited with code {proc.returncode}"
        if port is None or port_open(port):
            return None
        if time.monotonic() > deadline:
            return f"not listening on port {port} after {timeout_s:g} s"
        time.sleep(0.1)


def stop(member: Member, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM the member's process group, SIGKILL after `timeout_s`; returns the pid stopped (None: not running)."""
    pid = running_pid(member)
    if pid is None:
        return None
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _is_orbitmq(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _is_orbitmq(pid):
        _signal(pid, signal.SIGKILL)
        while _is_orbitmq(pid) and time.monotonic() < deadline + 5:
            time.sleep(0.05)
    member.pid_file.unlink(missing_ok=True)
    return pid


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # own session: the process group id is the pid
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def log_tail(member: Member, lines: int = 8) -> str:
    try:
        return "\n".join(member.log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
