"""`orbitmq cluster init DIR` / `orbitmq cluster -d DIR`: a local multi-process cluster from a config folder.

The folder holds one sub-folder per member: `namesrv-<i>/namesrv.conf` and `<brokerName>-<brokerId>/broker.conf`
(paths inside are relative to the member folder, so the folder can move). `init` writes 2 name servers and 2
broker groups of master + slave; `-d` starts every member as its own process (name servers first), logs to
`<member>/<member>.log`, and stops them all (reverse order) on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from orbitmq.cli import EXIT_FAILURE, EXIT_STARTUP, CliError

MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
STOP_TIMEOUT_S = 15.0


def _write(path: Path, keys: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in keys.items())
    path.write_text(text, encoding="utf-8")


def init_cluster(directory: Path, *, namesrv_port: int = 9876, broker_port: int = 10911, ip: str = "127.0.0.1",
                 role: str = "SYNC_MASTER", cluster_name: str = "DefaultCluster", groups: int = 2,
                 slaves: int = 1, commitlog_size: int = 256 * 1024 * 1024) -> list[Path]:
    """Write the member folders; returns the conf files written. Broker ports step by 10 (each broker uses
    port-2 .. port+1)."""
    if directory.exists() and any(directory.iterdir()):
        raise CliError(f"{directory} is not empty", EXIT_FAILURE)
    written: list[Path] = []
    ns_addrs = ";".join(f"{ip}:{namesrv_port + i}" for i in range(2))
    for i in range(2):
        conf = directory / f"namesrv-{i}" / "namesrv.conf"
        _write(conf, {"listenPort": namesrv_port + i, "kvConfigPath": "kvConfig.json"})
        written.append(conf)
    port = broker_port
    for g in range(groups):
        name = f"broker-{chr(ord('a') + g)}"
        for broker_id in range(slaves + 1):
            conf = directory / f"{name}-{broker_id}" / "broker.conf"
            _write(conf, {
                "brokerClusterName": cluster_name, "brokerName": name, "brokerId": broker_id,
                "brokerRole": role if broker_id == 0 else "SLAVE", "brokerIP1": ip, "listenPort": port,
                "namesrvAddr": ns_addrs, "storePathRootDir": "store", "flushDiskType": "ASYNC_FLUSH",
                "mappedFileSizeCommitLog": commitlog_size, "slaveReadEnable": True,
            })
            written.append(conf)
            port += 10
    return written


def members(directory: Path) -> list[tuple[str, list[str], Path]]:
    """(name, orbitmq argv, member folder) for every member, name servers first, then brokers by name/id."""
    found: list[tuple[int, str, list[str], Path]] = []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        if (sub / "namesrv.conf").is_file():
            found.append((0, sub.name, ["namesrv", "-c", "namesrv.conf"], sub))
        elif (sub / "broker.conf").is_file():
            found.append((1, sub.name, ["broker", "-c", "broker.conf"], sub))
    found.sort(key=lambda m: (m[0], m[1]))
    return [(name, argv, sub) for _, name, argv, sub in found]


class ClusterRunner:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        todo = members(self.directory)
        if not todo:
            raise CliError(f"{self.directory} holds no namesrv-*/ or broker folders (run `orbitmq cluster init`)",
                           EXIT_STARTUP)
        for name, argv, sub in todo:
            log = open(sub / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child for its lifetime
            proc = subprocess.Popen([sys.executable, "-m", "orbitmq.cli.main", *argv], cwd=sub, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.procs.append((name, proc))
            click.echo(f"started {name:<16} pid {proc.pid}  log {sub / (name + '.log')}")
            if argv[0] == "namesrv":
                time.sleep(0.3)

    def watch(self, stop: list[bool]) -> int:
        """Until asked to stop; a member that exits is reported (the others keep running)."""
        reported: set[str] = set()
        while not stop:
            for name, proc in self.procs:
                if name not in reported and proc.poll() is not None:
                    reported.add(name)
                    click.echo(f"member {name} exited with code {proc.returncode} (see its log)", err=True)
            if len(reported) == len(self.procs):
                return EXIT_FAILURE
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                click.echo(f"stopped {name} (exit {proc.returncode})")


@click.group("cluster", invoke_without_command=True)
@click.option("-d", "--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="cluster folder written by `orbitmq cluster init`")
@click.pass_context
def cluster_group(ctx: click.Context, directory: Path | None) -> None:
    """Run a local cluster (name servers + master/slave broker groups) from a folder, one process each."""
    if ctx.invoked_subcommand is not None:
        return
    if directory is None:
        raise click.UsageError("give -d DIR (create one with `orbitmq cluster init DIR`)")
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory", EXIT_STARTUP)
    runner = ClusterRunner(directory.resolve())
    stop: list[bool] = []

    def on_signal(_sig: int, _frame: object) -> None:
        stop.append(True)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        runner.start()
        click.echo("cluster running; Ctrl-C or SIGTERM stops every member")
        code = runner.watch(stop)
    finally:
        runner.stop()
        for s, h in old.items():
            signal.signal(s, h)
    if code:
        raise SystemExit(code)


@cluster_group.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--namesrv-port", default=9876, show_default=True, help="first name server port (2 consecutive)")
@click.option("--broker-port", default=10911, show_default=True, help="first broker listenPort (then +10 each)")
@click.option("--ip", default="127.0.0.1", show_default=True, help="brokerIP1 and name server host")
@click.option("--role", type=click.Choice(MASTER_ROLES), default="SYNC_MASTER", show_default=True)
@click.option("--groups", default=2, show_default=True, help="broker groups (broker-a, broker-b, ...)")
@click.option("--commitlog-size", default=256 * 1024 * 1024, show_default=True, help="CommitLog segment bytes")
def init_command(directory: Path, namesrv_port: int, broker_port: int, ip: str, role: str, groups: int,
                 commitlog_size: int) -> None:
    """Write a cluster folder: 2 name servers and GROUPS broker groups of master + slave."""
    for path in init_cluster(directory, namesrv_port=namesrv_port, broker_port=broker_port, ip=ip, role=role,
                             groups=groups, commitlog_size=commitlog_size):
        click.echo(f"wrote {path}")
    click.echo(f"start it with: orbitmq cluster -d {os.fspath(directory)}")
