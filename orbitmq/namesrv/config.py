"""NamesrvConfig (frozen) and the namesrv.conf reader (Java properties syntax, RocketMQ key names).

Owns the camelCase ↔ snake_case alias table for the name server; nothing else here reads files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from orbitmq.base.errors import ConfigError
from orbitmq.base.prom import check_exporter_config
from orbitmq.base.properties import conf_dir, field_values, read_properties_file


def _default_kv_config_path() -> str:
    return str(Path.home() / "namesrv" / "kvConfig.json")


@dataclass(frozen=True)
class NamesrvConfig:
    listen_port: int = field(default=9876, metadata={"important": True})
    listen_host: str = "0.0.0.0"
    scan_not_active_broker_interval_ms: int = 5000
    broker_channel_expired_time_ms: int = field(default=120_000, metadata={"important": True})
    order_message_enable: bool = False
    kv_config_path: str = field(default_factory=_default_kv_config_path)
    rocketmq_home: str = ""
    product_env_name: str = "center"
    cluster_test: bool = False
    # 5.x: drop a topic's queue data for a broker when the master's full registration no longer lists it
    delete_topic_with_broker_registration: bool = False
    # answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER / GET_TOPICS_BY_CLUSTER (5.x switches, default on)
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    server_channel_max_idle_time_seconds: int = 120
    # RIP-32: list a master-less group's smallest-id live slave as brokerId 0 (read-only) in routes
    support_acting_master: bool = False
    # Prometheus metrics (namesrv/metrics.py; docs/operations.md): PROM serves /metrics, DISABLE (default) does not
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""  # "" -> listenHost
    metrics_prom_exporter_port: int = 5557
    # REGISTER/UNREGISTER_BROKER, BROKER_HEARTBEAT, QUERY_DATA_VERSION need this secret's signature ("" = off)
    cluster_secret: str = ""
    # TLS for the listener (remoting/tls.py; docs/design/security.md "TLS"), RocketMQ tls.properties names
    tls_server_mode: str = "disabled"  # disabled / permissive (plain and TLS) / enforcing
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""  # CA for client certificates
    tls_server_need_client_auth: str = "none"  # none / optional / require
    # network limits (remoting/limits.py; docs/design/security.md "Limits"); 0 = off
    server_max_connections: int = 10_000
    server_max_connections_per_ip: int = 1_000
    server_frame_deadline_ms: int = 30_000  # a frame begun must be complete within this
    server_input_buffer_budget: int = 256 * 1024 * 1024  # bytes in unfinished frames, all connections

    def validate(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"namesrv: listenPort {self.listen_port} out of range 0..65535")
        if self.scan_not_active_broker_interval_ms <= 0:
            raise ConfigError("namesrv: scanNotActiveBrokerInterval must be > 0")
        if self.broker_channel_expired_time_ms <= 0:
            raise ConfigError("namesrv: brokerChannelExpiredTime must be > 0")
        if not self.kv_config_path:
            raise ConfigError("namesrv: kvConfigPath must not be empty")
        check_exporter_config(self.metrics_exporter_type, self.metrics_prom_exporter_port, "namesrv: ")


# namesrv.conf key -> NamesrvConfig field
CONF_KEYS: dict[str, str] = {
    "listenPort": "listen_port",
    "listenHost": "listen_host",
    "bindAddress": "listen_host",
    "clusterSecret": "cluster_secret",
    "tls.server.mode": "tls_server_mode",
    "tls.server.certPath": "tls_server_cert_path",
    "tls.server.keyPath": "tls_server_key_path",
    "tls.server.trustCertPath": "tls_server_trust_cert_path",
    "tls.server.need.client.auth": "tls_server_need_client_auth",
    "serverMaxConnections": "server_max_connections",
    "serverMaxConnectionsPerIp": "server_max_connections_per_ip",
    "serverFrameDeadlineMs": "server_frame_deadline_ms",
    "serverInputBufferBudget": "server_input_buffer_budget",
    "scanNotActiveBrokerInterval": "scan_not_active_broker_interval_ms",
    "brokerChannelExpiredTime": "broker_channel_expired_time_ms",
    "orderMessageEnable": "order_message_enable",
    "kvConfigPath": "kv_config_path",
    "rocketmqHome": "rocketmq_home",
    "productEnvName": "product_env_name",
    "clusterTest": "cluster_test",
    "deleteTopicWithBrokerRegistration": "delete_topic_with_broker_registration",
    "enableAllTopicList": "enable_all_topic_list",
    "enableTopicList": "enable_topic_list",
    "serverChannelMaxIdleTimeSeconds": "server_channel_max_idle_time_seconds",
    "supportActingMaster": "support_acting_master",
    "metricsExporterType": "metrics_exporter_type",
    "metricsPromExporterHost": "metrics_prom_exporter_host",
    "metricsPromExporterPort": "metrics_prom_exporter_port",
}

# Java keys that tune Netty/JVM thread pools or 5.x features we do not have: accepted without effect.
_IGNORED_KEYS = frozenset(
    {
        "configStorePath", "serverWorkerThreads", "serverCallbackExecutorThreads", "serverSelectorThreads",
        "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue", "serverSocketSndBufSize",
        "serverSocketRcvBufSize", "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector",
        "writeBufferHighWaterMark", "writeBufferLowWaterMark", "serverSocketBacklog",
        "defaultThreadPoolNums", "clientRequestThreadPoolNums", "defaultThreadPoolQueueCapacity",
        "clientRequestThreadPoolQueueCapacity", "unRegisterBrokerQueueCapacity",
        "notifyMinBrokerIdChanged", "enableControllerInNamesrv", "needWaitForService", "waitSecondsForService",
        "configBlackList", "returnOrderTopicConfigToBroker",
        # controller keys (enableControllerInNamesrv=true: `orbitmq namesrv` reads them for its controller)
        "controllerDLegerGroup", "controllerDLegerPeers", "controllerDLegerSelfId", "controllerStorePath",
        "scanInactiveMasterInterval", "enableElectUncleanMaster", "notifyBrokerRoleChanged",
        "electMasterMaxRetryCount", "isProcessReadEvent", "controllerType", "controllerThreadPoolNums",
        "controllerRequestThreadPoolQueueCapacity", "mappedFileSize", "raftTickMs", "raftElectionTicks",
        "raftSnapshotEvery",
    }
)

_FIELD_TYPES: dict[str, Any] = {f.name: f.type for f in fields(NamesrvConfig)}


def namesrv_config_from_properties(
    props: list[tuple[int, str, str]], source: str = "namesrv.conf", base: NamesrvConfig | None = None,
    base_dir: str | None = None,
) -> tuple[NamesrvConfig, list[str]]:
    """base_dir: the conf file's folder, against which a relative kvConfigPath is resolved."""
    values, warnings = field_values(props, CONF_KEYS, _FIELD_TYPES, source, ignored=_IGNORED_KEYS,
                                    path_fields=frozenset({"kv_config_path"}), base_dir=base_dir)
    config = replace(base or NamesrvConfig(), **values)
    config.validate()
    return config, warnings


def load_namesrv_conf(path: str | os.PathLike[str]) -> tuple[NamesrvConfig, list[str]]:
    """Read a RocketMQ namesrv.conf; returns (config, warnings for unknown keys). Bad values → ConfigError."""
    return namesrv_config_from_properties(read_properties_file(str(path), "name server"),
                                          source=Path(path).name, base_dir=conf_dir(path))
