"""ControllerConfig (frozen) and the controller.conf reader (RocketMQ key names, Java properties syntax).

One port per controller: the Raft peer address of this node (`controllerDLegerPeers` entry of
`controllerDLegerSelfId`) is also where brokers and admin tools talk to it; `listenPort`, when given, must equal
that port. Reads files only in load_controller_conf; never opens sockets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from orbitmq.base.errors import ConfigError
from orbitmq.base.prom import check_exporter_config
from orbitmq.base.properties import conf_dir, field_values, read_properties_file
from orbitmq.raft import parse_peers


def _default_store_path() -> str:
    return str(Path.home() / "DLedgerController")


@dataclass(frozen=True)
class ControllerConfig:
    controller_dleger_group: str = ""
    controller_dleger_peers: str = ""   # "n0-127.0.0.1:9878;n1-127.0.0.1:9868"
    controller_dleger_self_id: str = ""
    listen_port: int = 0                # 0 = the port of this node's peer address
    listen_host: str = "0.0.0.0"
    controller_store_path: str = field(default_factory=_default_store_path)
    scan_not_active_broker_interval_ms: int = 5000
    scan_inactive_master_interval_ms: int = 5000
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    elect_master_max_retry_count: int = 3
    config_black_list: str = "configBlackList;configStorePath"
    is_process_read_event: bool = False  # accepted for compatibility: reads always use a read barrier here
    # OrbitMQ-only Raft timing (one tick = raft_tick_ms; election timeout in [ticks, 2*ticks) ticks)
    raft_tick_ms: int = 100
    raft_election_ticks: int = 10
    raft_snapshot_every: int = 10_000   # OrbitMQ-only: snapshot the state every N applied entries
    # Prometheus metrics (controller/metrics.py; docs/operations.md): PROM serves /metrics, DISABLE does not
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""  # "" -> listenHost
    metrics_prom_exporter_port: int = 5557
    # brokers' writes, admin writes and Raft peer messages need this secret's signature ("" = off; security.md)
    cluster_secret: str = ""
    # network limits (remoting/limits.py; docs/design/security.md "Limits"); 0 = off
    server_max_connections: int = 10_000
    server_max_connections_per_ip: int = 1_000
    server_frame_deadline_ms: int = 30_000  # a frame begun must be complete within this
    server_input_buffer_budget: int = 256 * 1024 * 1024  # bytes in unfinished frames, all connections

    @property
    def peers(self) -> dict[str, str]:
        """id -> "host:port", in the order given."""
        return parse_peers(self.controller_dleger_peers)

    @property
    def self_addr(self) -> str:
        return self.peers[self.controller_dleger_self_id]

    @property
    def port(self) -> int:
        return int(self.self_addr.rpartition(":")[2])

    def validate(self) -> None:
        if not self.controller_dleger_group:
            raise ConfigError("controller: controllerDLegerGroup is required")
        if not self.controller_dleger_peers:
            raise ConfigError("controller: controllerDLegerPeers is required (e.g. n0-127.0.0.1:9878;n1-...)")
        peers = self.peers
        if self.controller_dleger_self_id not in peers:
            raise ConfigError(f"controller: controllerDLegerSelfId {self.controller_dleger_self_id!r} is not one "
                              f"of the peers {list(peers)}")
        if self.listen_port and self.listen_port != self.port:
            raise ConfigError(f"controller: listenPort {self.listen_port} differs from this node's peer port "
                              f"{self.port} (one port serves both Raft peers and brokers)")
        for name in ("scan_not_active_broker_interval_ms", "scan_inactive_master_interval_ms", "raft_tick_ms",
                     "raft_snapshot_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"controller: {_KEY_OF[name]} must be > 0")
        if self.elect_master_max_retry_count < 1:
            raise ConfigError("controller: electMasterMaxRetryCount must be >= 1")
        if self.raft_election_ticks < 4:
            raise ConfigError("controller: raftElectionTicks must be >= 4")
        check_exporter_config(self.metrics_exporter_type, self.metrics_prom_exporter_port, "controller: ")
        if not self.controller_store_path:
            raise ConfigError("controller: controllerStorePath must not be empty")

    def black_list(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.config_black_list.split(";") if k.strip()) | _ALWAYS_BLACK

    def to_properties(self) -> str:
        """GET_CONTROLLER_CONFIG body: every key as `key=value` lines."""
        lines = []
        for f in fields(self):
            v = getattr(self, f.name)
            text = ("true" if v else "false") if isinstance(v, bool) else str(v)
            if f.name == "cluster_secret" and v:
                text = "******"  # never handed out
            lines.append(f"{_KEY_OF[f.name]}={text}\n")
        return "".join(lines)



CONF_KEYS: dict[str, str] = {
    "controllerDLegerGroup": "controller_dleger_group",
    "controllerDLegerPeers": "controller_dleger_peers",
    "controllerDLegerSelfId": "controller_dleger_self_id",
    "listenPort": "listen_port",
    "listenHost": "listen_host",
    "bindAddress": "listen_host",
    "controllerStorePath": "controller_store_path",
    "scanNotActiveBrokerInterval": "scan_not_active_broker_interval_ms",
    "scanInactiveMasterInterval": "scan_inactive_master_interval_ms",
    "enableElectUncleanMaster": "enable_elect_unclean_master",
    "notifyBrokerRoleChanged": "notify_broker_role_changed",
    "electMasterMaxRetryCount": "elect_master_max_retry_count",
    "configBlackList": "config_black_list",
    "isProcessReadEvent": "is_process_read_event",
    "raftTickMs": "raft_tick_ms",
    "raftElectionTicks": "raft_election_ticks",
    "raftSnapshotEvery": "raft_snapshot_every",
    "metricsExporterType": "metrics_exporter_type",
    "metricsPromExporterHost": "metrics_prom_exporter_host",
    "metricsPromExporterPort": "metrics_prom_exporter_port",
    "clusterSecret": "cluster_secret",
    "serverMaxConnections": "server_max_connections",
    "serverMaxConnectionsPerIp": "server_max_connections_per_ip",
    "serverFrameDeadlineMs": "server_frame_deadline_ms",
    "serverInputBufferBudget": "server_input_buffer_budget",
}
_KEY_OF: dict[str, str] = {}
for _k, _f in CONF_KEYS.items():
    _KEY_OF.setdefault(_f, _k)

# what UPDATE_CONTROLLER_CONFIG can never change, whatever configBlackList says: the Raft group and the socket
_ALWAYS_BLACK = frozenset({"configBlackList", "configStorePath", "rocketmqHome", "controllerDLegerGroup",
                           "controllerDLegerPeers", "controllerDLegerSelfId", "controllerStorePath", "listenPort",
                           "listenHost", "bindAddress", "raftTickMs", "raftElectionTicks",
                           "raftSnapshotEvery", "clusterSecret"})

# RocketMQ keys accepted without effect (thread pools, DLedger file sizes, jRaft, metrics, namesrv embedding)
IGNORED_KEYS = frozenset({
    "controllerType", "controllerThreadPoolNums", "controllerRequestThreadPoolQueueCapacity", "mappedFileSize",
    "configStorePath", "rocketmqHome", "enableControllerInNamesrv", "metricsGrpcExporterTarget",
    "metricsGrpcExporterHeader", "metricGrpcExporterTimeOutInMills", "metricGrpcExporterIntervalInMills",
    "metricLoggingExporterIntervalInMills",
    "metricsLabel", "metricsInDelta", "jRaftElectionTimeoutMs", "jRaftScanWaitTimeoutMs",
    "jRaftSnapshotIntervalSecs", "jRaftGroupId", "jRaftServerId", "jRaftInitConf", "jRaftControllerRPCAddr",
    "serverWorkerThreads", "serverCallbackExecutorThreads", "serverSelectorThreads", "serverOnewaySemaphoreValue",
    "serverAsyncSemaphoreValue", "serverChannelMaxIdleTimeSeconds", "serverSocketSndBufSize",
    "serverSocketRcvBufSize", "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector",
})

_FIELD_TYPES: dict[str, Any] = {f.name: f.type for f in fields(ControllerConfig)}


def controller_config_from_properties(
    props: list[tuple[int, str, str]], source: str = "controller.conf", base: ControllerConfig | None = None,
    *, foreign_keys: frozenset[str] = frozenset(), validate: bool = True, base_dir: str | None = None,
) -> tuple[ControllerConfig, list[str]]:
    """(line, key, value) triples -> (config, warnings). Unknown keys are warned about unless in `foreign_keys`
    (the name server's own keys when the controller is embedded). Bad values -> ConfigError. base_dir: the conf
    file's folder, against which a relative controllerStorePath is resolved."""
    values, warnings = field_values(props, CONF_KEYS, _FIELD_TYPES, source, ignored=IGNORED_KEYS | foreign_keys,
                                    path_fields=frozenset({"controller_store_path"}), base_dir=base_dir)
    config = replace(base or ControllerConfig(), **values)
    if validate:
        config.validate()
    return config, warnings


def load_controller_conf(path: str | os.PathLike[str]) -> tuple[ControllerConfig, list[str]]:
    """Read controller.conf; (config, warnings for unknown keys). Unreadable file or bad values -> ConfigError."""
    return controller_config_from_properties(read_properties_file(str(path), "controller"),
                                             source=Path(path).name, base_dir=conf_dir(path))


def key_of(field_name: str) -> str:
    return _KEY_OF[field_name]
