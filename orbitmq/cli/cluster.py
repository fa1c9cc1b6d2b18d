"""`orbitmq cluster init DIR` / `orbitmq cluster -d DIR`: a local multi-process cluster from a config folder.

The folder holds one sub-folder per member: `controller-<id>/controller.conf`, `namesrv-<i>/namesrv.conf` and
`<brokerName>-<i>/broker.conf` (paths inside are relative to the member folder, so the folder can move). `init`
writes 2 name servers and 2 broker groups of master + slave; `init --mode controller` writes 3 RIP-44 controllers,
1 name server and 2 broker groups of 3 controller-mode replicas. `-d` starts every member as its own process
(controllers, then name servers, then brokers), logs to `<member>/<member>.log`, and stops them all (reverse
order) on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import click

from orbitmq.cli import EXIT_FAILURE, EXIT_STARTUP, CliError, set_process_title
from orbitmq.cli.cluster_members import (
    MEMBER_KINDS,
    STOP_TIMEOUT_S,
    Member,
    find_members,
    launch,
    listen_port,
    log_tail,
    running_pid,
    select,
    wait_ready,
)
from orbitmq.cli.cluster_members import stop as stop_member

MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
__all__ = ["MEMBER_KINDS", "cluster_group", "init_cluster", "init_controller_cluster", "members"]


def _write(path: Path, keys: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in keys.items())
    path.write_text(text, encoding="utf-8")


def init_cluster(directory: Path, *, namesrv_port: int = 9876, broker_port: int = 10911, ip: str = "127.0.0.1",
                 role: str = "SYNC_MASTER", cluster_name: str = "DefaultCluster", groups: int = 2,
                 slaves: int = 1, commitlog_size: int = 256 * 1024 * 1024, acting_master: bool = True) -> list[Path]:
    """Write the member folders; returns the conf files written. Broker ports step by 10 (each broker uses
    port-2 .. port+1). `acting_master` (RIP-32, on by default): while a master is down its slave serves the
    master-only operations (offsets, locks, delay / transaction-check / pop-revive, escaping what they produce to
    another group's master) and the name servers route to it. Either way a returning master takes back the offsets
    committed on its slave (pre-online), so a group never consumes a message twice across a master restart."""
    if directory.exists() and any(directory.iterdir()):
        raise CliError(f"{directory} is not empty", EXIT_FAILURE)
    written: list[Path] = []
    ns_addrs = ";".join(f"{ip}:{namesrv_port + i}" for i in range(2))
    for i in range(2):
        conf = directory / f"namesrv-{i}" / "namesrv.conf"
        _write(conf, {"listenPort": namesrv_port + i, "kvConfigPath": "kvConfig.json",
                      "supportActingMaster": acting_master})
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
                "enableSlaveActingMaster": acting_master, "enableRemoteEscape": acting_master and groups > 1,
            })
            written.append(conf)
            port += 10
    return written


def init_controller_cluster(directory: Path, *, namesrv_port: int = 9876, broker_port: int = 10911,
                            controller_port: int = 9878, ip: str = "127.0.0.1", cluster_name: str = "DefaultCluster",
                            groups: int = 2, replicas: int = 3, commitlog_size: int = 256 * 1024 * 1024,
                            controllers: int = 3) -> list[Path]:
    """RIP-44 layout: `controllers` controllers (one Raft group; ports controller_port, +1, ...), one name server,
    and `groups` broker groups of `replicas` controller-mode brokers (brokerId=-1: the controller assigns ids and
    elects the master). Broker ports step by 10 (each broker uses port-2 .. port+1, haListenPort = port+1)."""
    if directory.exists() and any(directory.iterdir()):
        raise CliError(f"{directory} is not empty", EXIT_FAILURE)
    written: list[Path] = []
    peers = ";".join(f"n{i}-{ip}:{controller_port + i}" for i in range(controllers))
    for i in range(controllers):
        conf = directory / f"controller-n{i}" / "controller.conf"
        _write(conf, {"controllerDLegerGroup": "OrbitController", "controllerDLegerPeers": peers,
                      "controllerDLegerSelfId": f"n{i}", "controllerStorePath": "store"})
        written.append(conf)
    conf = directory / "namesrv-0" / "namesrv.conf"
    _write(conf, {"listenPort": namesrv_port, "kvConfigPath": "kvConfig.json"})
    written.append(conf)
    controller_addr = ";".join(f"{ip}:{controller_port + i}" for i in range(controllers))
    port = broker_port
    for g in range(groups):
        name = f"broker-{chr(ord('a') + g)}"
        for i in range(replicas):
            conf = directory / f"{name}-{i}" / "broker.conf"
            _write(conf, {
                "brokerClusterName": cluster_name, "brokerName": name, "brokerId": -1, "brokerIP1": ip,
                "listenPort": port, "haListenPort": port + 1, "namesrvAddr": f"{ip}:{namesrv_port}",
                "enableControllerMode": True, "controllerAddr": controller_addr, "allAckInSyncStateSet": True,
                "inSyncReplicas": replicas // 2 + 1, "minInSyncReplicas": 1, "storePathRootDir": "store",
                "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": commitlog_size,
            })
            written.append(conf)
            port += 10
    return written


def members(directory: Path) -> list[tuple[str, list[str], Path]]:
    """(name, orbitmq argv, member folder) for every member: controllers, then name servers, then brokers by
    name/id."""
    return [(m.name, m.argv, m.folder) for m in find_members(directory)]


class ClusterRunner:
    """`orbitmq cluster -d DIR`: every member in the foreground of this command (pid files written, so
    `orbitmq cluster restart DIR MEMBER` works meanwhile); all stopped, restarted ones included, at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[tuple[Member, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        todo = find_members(self.directory)
        if not todo:
            raise CliError(f"{self.directory} holds no member folders (run `orbitmq cluster init`)",
                           EXIT_STARTUP)
        running = [m.name for m in todo if running_pid(m) is not None]
        if running:
            raise CliError(f"already running: {', '.join(running)} (`orbitmq cluster stop {self.directory}` "
                           "stops them)", EXIT_STARTUP)
        for m in todo:
            proc = launch(m)
            self.procs.append((m, proc))
            click.echo(f"started {m.name:<16} pid {proc.pid}  log {m.log}")
            if m.kind in ("controller", "namesrv"):
                time.sleep(0.3)

    def watch(self, stop: list[bool]) -> int:
        """Until asked to stop; a member that exits is reported (the others keep running). One restarted
        meanwhile by `orbitmq cluster restart` is still up."""
        reported: set[str] = set()
        while not stop:
            for m, proc in self.procs:
                if m.name in reported or proc.poll() is None or running_pid(m) is not None:
                    continue
                reported.add(m.name)
                click.echo(f"member {m.name} exited with code {proc.returncode} (see its log)", err=True)
            if len(reported) == len(self.procs):
                return EXIT_FAILURE
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        for m, proc in reversed(self.procs):
            stop_member(m, STOP_TIMEOUT_S)
            if proc.poll() is None:  # its pid file was lost
                proc.terminate()
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.wait()
            click.echo(f"stopped {m.name} (exit {proc.returncode})")


@click.group("cluster", invoke_without_command=True)
@click.option("-d", "--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="cluster folder written by `orbitmq cluster init`: run every member in the foreground")
@click.pass_context
def cluster_group(ctx: click.Context, directory: Path | None) -> None:
    """Run a local cluster (controllers, name servers, broker groups) from a folder, one process each: in the
    foreground with -d DIR (Ctrl-C stops them all), or with start / stop / restart / status in the background."""
    if ctx.invoked_subcommand is not None:
        return
    if directory is None:
        raise click.UsageError("give -d DIR (create one with `orbitmq cluster init DIR`)")
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory", EXIT_STARTUP)
    runner = ClusterRunner(directory.resolve())
    set_process_title("cluster", str(directory.resolve()))
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
@click.option("--mode", type=click.Choice(["classic", "controller", "lease", "raft"]), default="classic",
              show_default=True, help="classic: master + slave groups; controller: 3 RIP-44 controllers and "
              "controller-mode brokers; lease: one two-node group elected by a lease in PostgreSQL; raft: one "
              "Raft group of REPLICAS brokers (DLedger CommitLog mode)")
@click.option("--lease-url", default=None, help="lease mode: leaseStoreUrl (default: a local PostgreSQL database, "
              "set up by the lease-db.sql written into DIR)")
@click.option("--namesrv-port", default=9876, show_default=True, help="first name server port (classic: 2 of them)")
@click.option("--broker-port", default=10911, show_default=True, help="first broker listenPort (then +10 each)")
@click.option("--controller-port", default=9878, show_default=True, help="first controller port (controller mode: 3)")
@click.option("--ip", default="127.0.0.1", show_default=True, help="brokerIP1 and name server host")
@click.option("--role", type=click.Choice(MASTER_ROLES), default="SYNC_MASTER", show_default=True,
              help="master role (classic mode)")
@click.option("--acting-master/--no-acting-master", default=True, show_default=True,
              help="classic mode: RIP-32 slave acting master (enableSlaveActingMaster, supportActingMaster)")
@click.option("--groups", default=2, show_default=True, help="broker groups (broker-a, broker-b, ...)")
@click.option("--replicas", default=3, show_default=True, help="brokers per group (controller and raft modes)")
@click.option("--commitlog-size", default=256 * 1024 * 1024, show_default=True, help="CommitLog segment bytes")
def init_command(directory: Path, mode: str, namesrv_port: int, broker_port: int, controller_port: int, ip: str,
                 role: str, acting_master: bool, groups: int, replicas: int, commitlog_size: int,
                 lease_url: str | None = None) -> None:
    """Write a cluster folder: 2 name servers and GROUPS master + slave groups, or (--mode controller) 3
    controllers, 1 name server and GROUPS groups of REPLICAS controller-mode brokers."""
    if groups < 1 or replicas < 1:
        raise click.BadParameter("--groups and --replicas must be >= 1")
    if mode == "lease":
        from orbitmq.cli.cluster_lease import init_lease_cluster
        paths = init_lease_cluster(directory, _write, namesrv_port=namesrv_port, broker_port=broker_port, ip=ip,
                                   lease_url=lease_url, commitlog_size=commitlog_size)
    elif mode == "raft":
        from orbitmq.cli.cluster_raft import init_raft_cluster
        paths = init_raft_cluster(directory, _write, namesrv_port=namesrv_port, broker_port=broker_port, ip=ip,
                                  replicas=replicas, commitlog_size=commitlog_size)
    elif mode == "controller":
        paths = init_controller_cluster(directory, namesrv_port=namesrv_port, broker_port=broker_port,
                                        controller_port=controller_port, ip=ip, groups=groups, replicas=replicas,
                                        commitlog_size=commitlog_size)
    else:
        paths = init_cluster(directory, namesrv_port=namesrv_port, broker_port=broker_port, ip=ip, role=role,
                             groups=groups, commitlog_size=commitlog_size, acting_master=acting_master)
    for path in paths:
        click.echo(f"wrote {path}")
    click.echo(f"start it with: orbitmq cluster -d {os.fspath(directory)}   (foreground; in the background: "
               f"orbitmq cluster start {os.fspath(directory)})")


# ---- members in the background --------------------------------------------------------------------------------
def _chosen(directory: Path, names: tuple[str, ...]) -> list[Member]:
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory", EXIT_STARTUP)
    found = find_members(directory.resolve())
    if not found:
        raise CliError(f"{directory} holds no member folders (run `orbitmq cluster init`)", EXIT_STARTUP)
    try:
        return select(found, names)
    except ValueError as e:
        raise CliError(str(e), EXIT_FAILURE) from None


def _start(chosen: list[Member]) -> None:
    failed: list[str] = []
    for m in chosen:
        pid = running_pid(m)
        if pid is not None:
            click.echo(f"{m.name:<16} already running (pid {pid})")
            continue
        proc = launch(m)
        why = wait_ready(m, proc)
        if why is None:
            click.echo(f"started {m.name:<16} pid {proc.pid}  log {m.log}")
            continue
        failed.append(m.name)
        click.echo(f"{m.name}: {why}; last lines of {m.log}:\n{log_tail(m)}", err=True)
    if failed:
        raise CliError(f"could not start {', '.join(failed)}", EXIT_STARTUP)


def _stop(chosen: list[Member]) -> None:
    for m in reversed(chosen):
        pid = stop_member(m)
        click.echo(f"stopped {m.name:<16} pid {pid}" if pid is not None else f"{m.name:<16} not running")


@cluster_group.command("start")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("names", nargs=-1)
def start_command(directory: Path, names: tuple[str, ...]) -> None:
    """Start the members NAMES (default: all) of a cluster folder in the background, in order (controllers, name
    servers, brokers), each once it listens; logs in DIR/<member>/<member>.log."""
    _start(_chosen(directory, names))


@cluster_group.command("stop")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("names", nargs=-1)
def stop_command(directory: Path, names: tuple[str, ...]) -> None:
    """Stop the members NAMES (default: all) of a cluster folder: SIGTERM, SIGKILL after 15 s; brokers first."""
    _stop(_chosen(directory, names))


@cluster_group.command("restart")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("names", nargs=-1, required=True)
def restart_command(directory: Path, names: tuple[str, ...]) -> None:
    """Stop and start again the members NAMES (e.g. broker-a-0) of a cluster folder."""
    chosen = _chosen(directory, names)
    _stop(chosen)
    _start(chosen)


@cluster_group.command("status")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def status_command(directory: Path) -> None:
    """Each member of a cluster folder: running (pid) or stopped, its port and its log."""
    for m in _chosen(directory, ()):
        pid = running_pid(m)
        state = f"running  pid {pid:<8}" if pid is not None else "stopped" + " " * 14
        click.echo(f"{m.name:<16} {m.kind:<10} {state} port {listen_port(m) or '-':<6} log {m.log}")
