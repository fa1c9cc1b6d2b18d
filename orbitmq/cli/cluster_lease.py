"""`orbitmq cluster init --mode lease DIR`: a two-node broker group elected by a lease in PostgreSQL (one name server,
`broker-a-0` and `broker-a-1` with enableLeaseElection). The database is not created here: the folder gets
`lease-db.sql` (the role and database the default leaseStoreUrl names) to run once as a PostgreSQL superuser;
`--lease-url` points the brokers at an existing database instead. The lease table is created by the first broker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orbitmq.cli import EXIT_FAILURE, CliError

DEFAULT_LEASE_URL = "postgresql://orbitmq:orbitmq@127.0.0.1:5432/orbitmq_lease"
SETUP_SQL = """-- Run once as a PostgreSQL superuser, e.g.: sudo -u postgres psql -f lease-db.sql
-- (the role and database of the default leaseStoreUrl {url})
CREATE ROLE orbitmq LOGIN PASSWORD 'orbitmq';
CREATE DATABASE orbitmq_lease OWNER orbitmq;
"""


def init_lease_cluster(directory: Path, write: Callable[[Path, dict[str, object]], None], *,
                       namesrv_port: int = 9876, broker_port: int = 10911, ip: str = "127.0.0.1",
                       cluster_name: str = "DefaultCluster", lease_url: str | None = None,
                       commitlog_size: int = 256 * 1024 * 1024) -> list[Path]:
    """Write the folder; returns the files written. `write(path, keys)` writes one .conf (cluster.py's writer).
    Broker ports step by 10 (each broker uses port-2 .. port+1, haListenPort = port+1)."""
    if directory.exists() and any(directory.iterdir()):
        raise CliError(f"{directory} is not empty", EXIT_FAILURE)
    written: list[Path] = []
    conf = directory / "namesrv-0" / "namesrv.conf"
    write(conf, {"listenPort": namesrv_port, "kvConfigPath": "kvConfig.json"})
    written.append(conf)
    url = lease_url or DEFAULT_LEASE_URL
    for i in range(2):
        port = broker_port + 10 * i
        conf = directory / f"broker-a-{i}" / "broker.conf"
        write(conf, {
            "brokerClusterName": cluster_name, "brokerName": "broker-a", "brokerIP1": ip, "listenPort": port,
            "haListenPort": port + 1, "namesrvAddr": f"{ip}:{namesrv_port}", "enableLeaseElection": True,
            "leaseStoreUrl": url, "leaseTtlMillis": 6000, "allAckInSyncStateSet": True, "storePathRootDir": "store",
            "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": commitlog_size,
        })
        written.append(conf)
    if lease_url is None:
        sql = directory / "lease-db.sql"
        sql.write_text(SETUP_SQL.format(url=DEFAULT_LEASE_URL), encoding="utf-8")
        written.append(sql)
    return written
