"""`orbitmq cluster init --mode raft DIR`: one name server and one Raft broker group of `replicas` brokers in
RocketMQ's DLedger CommitLog mode (enableDLegerCommitLog; docs/design/raft-group.md). Each broker uses its listenPort
(port-2 .. port+1, ports step by 10) and a Raft peer port, listenPort + 5."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orbitmq.cli import EXIT_FAILURE, CliError

RAFT_PORT_OFFSET = 5  # the dLegerPeers port of a broker: listenPort + 5 (inside its block of 10 ports)


def init_raft_cluster(directory: Path, write: Callable[[Path, dict[str, object]], None], *,
                      namesrv_port: int = 9876, broker_port: int = 10911, ip: str = "127.0.0.1",
                      cluster_name: str = "DefaultCluster", replicas: int = 3,
                      commitlog_size: int = 256 * 1024 * 1024) -> list[Path]:
    """Write the folder; returns the files written. `write(path, keys)` writes one .conf (cluster.py's writer)."""
    if directory.exists() and any(directory.iterdir()):
        raise CliError(f"{directory} is not empty", EXIT_FAILURE)
    written: list[Path] = []
    conf = directory / "namesrv-0" / "namesrv.conf"
    write(conf, {"listenPort": namesrv_port, "kvConfigPath": "kvConfig.json"})
    written.append(conf)
    ports = [broker_port + 10 * i for i in range(replicas)]
    peers = ";".join(f"n{i}-{ip}:{p + RAFT_PORT_OFFSET}" for i, p in enumerate(ports))
    for i, port in enumerate(ports):
        conf = directory / f"broker-a-{i}" / "broker.conf"
        write(conf, {
            "brokerClusterName": cluster_name, "brokerName": "broker-a", "brokerIP1": ip, "listenPort": port,
            "namesrvAddr": f"{ip}:{namesrv_port}", "enableDLegerCommitLog": True, "dLegerGroup": "broker-a",
            "dLegerPeers": peers, "dLegerSelfId": f"n{i}", "storePathRootDir": "store",
            "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": commitlog_size,
        })
        written.append(conf)
    return written
