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
import sys
import time
from pathlib import Path

import click

from orbitmq.cli import EXIT_FAILURE, EXIT_STARTUP, CliError, set_process_title

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


MEMBER_KINDS = (("controller.conf", "controller"), ("namesrv.conf", "namesrv"), ("broker.conf", "broker"))


def members(directory: Path) -> list[tuple[str, list[str], Path]]:
    """(name, orbitmq argv, member folder) for every member: controllers, then name servers, then brokers by
    name/id."""
    found: list[tuple[int, str, list[str], Path]] = []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        for rank, (conf, command) in enumerate(MEMBER_KINDS):
            if (sub / conf).is_file():
                found.append((rank, sub.name, [command, "-c", conf], sub))
                break
    found.sort(key=lambda m: (m[0], m[1]))
    return [(name, argv, sub) for _, name, argv, sub in found]


class ClusterRunner:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        todo = members(self.directory)
        if not todo:
            raise CliError(f"{self.directory} holds no member folders (run `orbitmq cluster init`)",
                           EXIT_STARTUP)
        for name, argv, sub in todo:
            log = open(sub / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child for its lifetime
            proc = subprocess.Popen([sys.executable, "-m", "orbitmq.cli.main", *argv], cwd=sub, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.procs.append((name, proc))
            click.echo(f"started {name:<16} pid {proc.pid}  log {sub / (name + '.log')}")
            if argv[0] in ("controller", "namesrv"):
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
    """Run a local cluster (controllers, name servers, broker groups) from a folder, one process each."""
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

    set_process_title("cluster", str(directory.resolve()))
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
@click.option("--mode", type=click.Choice(["classic", "controller", "lease"]), default="classic",
              show_default=True, help="classic: master + slave groups; controller: 3 RIP-44 controllers and "
              "controller-mode brokers; lease: one two-node group elected by a lease in PostgreSQL")
@click.option("--lease-url", default=None, help="lease mode: leaseStoreUrl (default: a local PostgreSQL database, "
              "set up by the lease-db.sql written into DIR)")
@click.option("--namesrv-port", default=9876, show_default=True, help="first name server port (classic: 2 of them)")
@click.option("--broker-port", default=10911, show_default=True, help="first broker listenPort (then +10 each)")
@click.option("--controller-port", default=9878, show_default=True, help="first controller port (controller mode: 3)")
@click.option("--ip", default="127.0.0.1", show_default=True, help="brokerIP1 and name server host")
@click.option("--role", type=click.Choice(MASTER_ROLES), default="SYNC_MASTER", show_default=True,
              help="master role (classic mode)")
@click.option("--groups", default=2, show_default=True, help="broker groups (broker-a, broker-b, ...)")
@click.option("--replicas", default=3, show_default=True, help="brokers per group (controller mode)")
@click.option("--commitlog-size", default=256 * 1024 * 1024, show_default=True, help="CommitLog segment bytes")
def init_command(directory: Path, mode: str, namesrv_port: int, broker_port: int, controller_port: int, ip: str,
                 role: str, groups: int, replicas: int, commitlog_size: int,
                 lease_url: str | None = None) -> None:
    """Write a cluster folder: 2 name servers and GROUPS master + slave groups, or (--mode controller) 3
    controllers, 1 name server and GROUPS groups of REPLICAS controller-mode brokers."""
    if groups < 1 or replicas < 1:
        raise click.BadParameter("--groups and --replicas must be >= 1")
    if mode == "lease":
        from orbitmq.cli.cluster_lease import init_lease_cluster
        paths = init_lease_cluster(directory, _write, namesrv_port=namesrv_port, broker_port=broker_port, ip=ip,
                                   lease_url=lease_url, commitlog_size=commitlog_size)
    elif mode == "controller":
        paths = init_controller_cluster(directory, namesrv_port=namesrv_port, broker_port=broker_port,
                                        controller_port=controller_port, ip=ip, groups=groups, replicas=replicas,
                                        commitlog_size=commitlog_size)
    else:
        paths = init_cluster(directory, namesrv_port=namesrv_port, broker_port=broker_port, ip=ip, role=role,
                             groups=groups, commitlog_size=commitlog_size)
    for path in paths:
        click.echo(f"wrote {path}")
    click.echo(f"start it with: orbitmq cluster -d {os.fspath(directory)}")
