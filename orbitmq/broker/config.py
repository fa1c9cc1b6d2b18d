"""BrokerConfig: the broker's own settings (one frozen dataclass, snake_case fields).

broker.conf camelCase names live only in config_file.py. validate() checks relations between fields;
__post_init__ derives the few defaults that depend on other fields (haListenPort, brokerIP1/2).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field, fields
from typing import Any

from orbitmq.base.errors import ConfigError
from orbitmq.base.prom import check_exporter_config

_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


def _opt(default: Any, *, important: bool = False, hot: bool = False) -> Any:
    """A field with metadata read by the config dump / UPDATE_BROKER_CONFIG (hot_reloadable)."""
    return field(default=default, metadata={"important": important, "hot_reloadable": hot})


def detect_ip() -> str:
    """First non-loopback IPv4 of this host (no packet is sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            if ip and not ip.startswith("127.") and ip != "0.0.0.0":
                return ip
    except OSError:
        pass
    try:
        for ip in socket.gethostbyname_ex(socket.gethostname())[2]:
            if not ip.startswith("127."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


@dataclass(frozen=True)
class BrokerConfig:
    # identity
    broker_cluster_name: str = _opt("DefaultCluster", important=True)
    broker_name: str = _opt("broker-a", important=True)
    broker_id: int = _opt(0, important=True)
    broker_role: str = _opt("ASYNC_MASTER", important=True)
    namesrv_addr: str = _opt("", important=True, hot=True)  # ";"-separated host:port list
    broker_ip1: str = _opt("", important=True)  # "" -> detect_ip()
    broker_ip2: str = _opt("")  # "" -> broker_ip1 (HA address)
    listen_port: int = _opt(10911, important=True)
    ha_listen_port: int = _opt(-1)  # -1 -> listen_port + 1 (0 when listen_port is 0)
    region_id: str = _opt("DefaultRegion")
    trace_on: bool = _opt(True, hot=True)
    broker_ver_version: int = _opt(409)
    # topics and groups
    broker_permission: int = _opt(6, important=True, hot=True)
    auto_create_topic_enable: bool = _opt(True, important=True, hot=True)
    auto_create_subscription_group: bool = _opt(True, important=True, hot=True)
    auto_create_per_client_per_minute: int = _opt(1000, hot=True)  # topics+groups auto-created per remote IP; 0 = off
    default_topic_queue_nums: int = _opt(8, hot=True)
    cluster_topic_enable: bool = _opt(True)
    broker_topic_enable: bool = _opt(True)
    msg_trace_topic_name: str = _opt("RMQ_SYS_TRACE_TOPIC")
    trace_topic_enable: bool = _opt(False)
    # send
    start_accept_send_request_time_stamp: int = _opt(0, hot=True)
    reject_transaction_message: bool = _opt(False, hot=True)
    max_msgs_num_batch: int = _opt(64, hot=True)
    default_query_max_num: int = _opt(32, hot=True)
    message_delay_level: str = _opt("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    # pull
    long_polling_enable: bool = _opt(True, hot=True)
    short_polling_time_mills: int = _opt(1000, hot=True)
    slave_read_enable: bool = _opt(False, hot=True)
    transfer_msg_by_heap: bool = _opt(True)
    enable_property_filter: bool = _opt(False)
    filter_support_retry: bool = _opt(False)
    # bounds on SQL92 filters and pulls (docs/design/security.md "Limits"); 0 = off
    filter_sql_max_length: int = _opt(4096, hot=True)  # UTF-8 bytes of one expression
    filter_sql_max_depth: int = _opt(32, hot=True)  # nested parentheses / NOT
    filter_sql_max_in_list: int = _opt(256, hot=True)  # items of one IN (...)
    filter_sql_cache_bytes: int = _opt(16 * 1024 * 1024, hot=True)  # compiled-filter cache (LRU, estimated bytes)
    max_pull_msg_nums: int = _opt(32, hot=True)  # a pull's maxMsgNums is capped to this (store returns <= 32 anyway)
    # producer de-duplication (services/dedup.py)
    dedup_enable: bool = _opt(True)
    dedup_window_seconds: int = _opt(120, hot=True)
    dedup_max_entries: int = _opt(200_000)  # ~370 B each: bounds the table near 75 MiB
    dedup_snapshot_interval_seconds: int = _opt(10)
    # orderly consumption: a queue lock not refreshed for this long is free (Java system property
    # rocketmq.broker.rebalance.lockMaxLiveTime); clients must re-lock well within it
    rebalance_lock_max_live_time: int = _opt(60_000)
    # clients
    notify_consumer_ids_changed_enable: bool = _opt(True, hot=True)
    client_channel_max_idle_time_seconds: int = _opt(120)
    flush_consumer_offset_interval: int = _opt(5000)
    # name server registration
    register_broker_timeout_mills: int = _opt(6000, hot=True)
    register_name_server_period: int = _opt(30000, hot=True)
    force_register: bool = _opt(True, hot=True)
    compressed_register: bool = _opt(False, hot=True)
    # RocketMQ 4.x plain ACL (orbitmq/acl; docs/design/security.md)
    acl_enable: bool = _opt(False, important=True)
    acl_file_path: str = _opt("")  # "" -> <rocketmqHome>/conf/plain_acl.yml
    rocketmq_home: str = _opt("")  # "" -> $ROCKETMQ_HOME (only used to find plain_acl.yml)
    bind_address: str = _opt("0.0.0.0")  # the interface the main, VIP and HA ports listen on (brokerIP1 is advertised)
    cluster_secret: str = _opt("")  # sign requests to name servers/brokers, prove it to the HA port ("" = off)
    # network limits (remoting/limits.py; docs/design/security.md "Limits"); 0 = off
    server_max_connections: int = _opt(10_000)  # main and VIP port each
    server_max_connections_per_ip: int = _opt(1_000)
    server_frame_deadline_ms: int = _opt(30_000)  # a frame begun must be complete within this
    server_input_buffer_budget: int = _opt(256 * 1024 * 1024)  # bytes in unfinished frames, all connections
    long_polling_max_hold_ms: int = _opt(60_000, hot=True)  # cap on a pull's suspendTimeoutMillis
    long_polling_max_held_per_connection: int = _opt(1_000, hot=True)  # over it: SYSTEM_BUSY at once
    long_polling_max_held: int = _opt(100_000, hot=True)
    # TLS (remoting/tls.py; docs/design/security.md "TLS"), RocketMQ tls.properties names; off by default
    tls_enable: bool = _opt(False)  # outgoing links (name servers, other brokers) use TLS
    tls_server_mode: str = _opt("disabled")  # disabled / permissive (plain and TLS) / enforcing; main and VIP
    tls_server_cert_path: str = _opt("")
    tls_server_key_path: str = _opt("")
    tls_server_trust_cert_path: str = _opt("")  # CA for client certificates
    tls_server_need_client_auth: str = _opt("none")  # none / optional / require
    tls_client_cert_path: str = _opt("")
    tls_client_key_path: str = _opt("")
    tls_client_trust_cert_path: str = _opt("")
    tls_client_auth_server: bool = _opt(False)  # verify servers against tls.client.trustCertPath
    # transactions (used by the transaction service when it lands)
    transaction_timeout: int = _opt(6000, hot=True)
    transaction_check_max: int = _opt(15, hot=True)
    transaction_check_interval: int = _opt(60000, hot=True)
    # timer messages (services/timer.py)
    timer_wheel_enable: bool = _opt(True)
    timer_max_delay_sec: int = _opt(3 * 24 * 3600, hot=True)
    timer_wheel_slots: int = _opt(7 * 24 * 3600)  # 1-second slots: the wheel's horizon
    # HA replication (services/ha.py, orbitmq.replication; docs/design/replication.md)
    ha_master_address: str = _opt("")  # slave: the master's HA host:port; "" = learn it via the name server
    ha_transfer_batch_size: int = _opt(32 * 1024)
    ha_send_heartbeat_interval: int = _opt(5000)
    ha_housekeeping_interval: int = _opt(20000)
    ha_slave_fallbehind_max: int = _opt(256 * 1024 * 1024)
    slave_timeout: int = _opt(3000, hot=True)  # SYNC_MASTER: max wait for a slave ack (-> FLUSH_SLAVE_TIMEOUT)
    slave_sync_interval: int = _opt(10000)  # slave: metadata sync period (topics, offsets, groups)
    sync_master_confirm_visibility: bool = _opt(True)  # SYNC_MASTER: consumers see only replicated data
    # RIP-32 slave acting master (services/acting_master.py, services/preonline.py; docs/design/replication.md)
    enable_slave_acting_master: bool = _opt(False)  # smallest-id live slave takes over master-only duties
    enable_remote_escape: bool = _opt(False)  # acting slave may send service output to another group's master
    broker_heartbeat_interval: int = _opt(1000)  # BROKER_HEARTBEAT (904) period to each name server
    broker_not_active_timeout_millis: int = _opt(10000)  # name server drops us after this long without one
    send_heartbeat_timeout_millis: int = _opt(1000)
    sync_broker_member_group_period: int = _opt(1000)  # GET_BROKER_MEMBER_GROUP (901) poll period
    lock_in_strict_mode: bool = _opt(False)  # a queue lock needs a quorum of the replica group
    # strict lock: replicas in this broker group, live or not; 0 = the largest group seen since start
    total_replicas: int = _opt(0)
    skip_pre_online: bool = _opt(False)  # a restarting master registers at once, without pre-online
    compatible_with_old_name_srv: bool = _opt(True)  # heartbeat as QUERY_DATA_VERSION, member group via route
    # RIP-44 controller mode (broker/controller_mode/; docs/design/controller-broker.md): the controller decides the
    # role and brokerId; brokerRole is ignored and brokerId=-1 (assigned by the controller) is allowed
    enable_controller_mode: bool = _opt(False, important=True)
    controller_addr: str = _opt("", important=True)  # ";"-separated controller host:port list
    sync_broker_metadata_period: int = _opt(5000)  # GET_REPLICA_INFO (1004) poll for the role
    check_sync_state_set_period: int = _opt(5000)  # master: SyncStateSet shrink check
    sync_controller_metadata_period: int = _opt(10000)  # GET_METADATA_INFO (1005): who leads the controllers
    controller_heart_beat_timeout_mills: int = _opt(10000)  # sent in 904: the controller's timeout for us
    broker_election_priority: int = _opt(2147483647)  # lower = preferred in an election
    all_ack_in_sync_state_set: bool = _opt(False)  # a SYNC put waits for every SyncStateSet member
    in_sync_replicas: int = _opt(1)  # acks (master included) a put waits for without all-ack; <= 1: none
    min_in_sync_replicas: int = _opt(1)  # puts refused while the SyncStateSet is smaller
    ha_max_time_slave_not_catchup: int = _opt(15000)  # a member not caught up this long leaves the set
    store_path_broker_identity: str = _opt("")  # "" -> <storePathRootDir>/brokerIdentity (+ "-temp")
    async_learner: bool = _opt(False)  # replicate but never join the SyncStateSet
    sync_from_last_file: bool = _opt(False)  # an empty replica starts from the master's last CommitLog file
    # Prometheus metrics (broker/metrics.py; docs/operations.md): PROM serves /metrics, DISABLE (default) does not
    metrics_exporter_type: str = _opt("DISABLE", important=True)
    metrics_prom_exporter_host: str = _opt("")  # "" -> brokerIP1, as RocketMQ
    metrics_prom_exporter_port: int = _opt(5557)
    # lease election (broker/lease_mode/; docs/design/lease-election.md): a lease row in a SQL database names the
    # master of the group and its epoch; brokerRole/brokerId are ignored (exclusive with enableControllerMode)
    enable_lease_election: bool = _opt(False, important=True)
    lease_store_url: str = _opt("", important=True)  # postgresql://, mysql:// (MySQL/MariaDB) or sqlite:///path
    lease_name: str = _opt("")  # "" -> <brokerClusterName>/<brokerName>
    lease_ttl_millis: int = _opt(6000)
    lease_renew_interval_millis: int = _opt(0)  # 0 -> a third of leaseTtlMillis
    lease_max_db_errors: int = _opt(3)  # consecutive database errors before the elector goes OFFLINE
    # Raft broker groups (DLedger CommitLog mode; broker/raft_mode/, docs/design/raft-group.md): Raft elects the
    # master of the group (brokerId 0) and replicates every write; brokerRole/brokerId are ignored
    enable_dleger_commit_log: bool = _opt(False, important=True)
    dleger_group: str = _opt("")  # "" -> brokerName
    dleger_peers: str = _opt("", important=True)  # n0-host:port;n1-host:port;n2-host:port (Raft peer ports)
    dleger_self_id: str = _opt("", important=True)  # this member's id in dLegerPeers
    raft_snapshot_every: int = _opt(20_000)  # OrbitMQ-only: Raft log compaction every N applied entries
    local_delivery_groups: str = _opt("")  # OrbitMQ-only: pop groups served by local delivery in a Raft group ("*": all)
    # Prometheus metrics (broker/metrics.py; docs/operations.md): PROM serves /metrics, DISABLE (default) does not
    metrics_exporter_type: str = _opt("DISABLE", important=True)
    metrics_prom_exporter_host: str = _opt("")  # "" -> brokerIP1, as RocketMQ
    metrics_prom_exporter_port: int = _opt(5557)

    def __post_init__(self) -> None:
        if not self.broker_ip1:
            object.__setattr__(self, "broker_ip1", detect_ip())
        if not self.broker_ip2:
            object.__setattr__(self, "broker_ip2", self.broker_ip1)
        if self.ha_listen_port < 0:
            object.__setattr__(self, "ha_listen_port", self.listen_port + 1 if self.listen_port else 0)

    # ----- derived values -----
    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def vip_listen_port(self) -> int:
        """The "fast"/VIP channel port (listenPort - 2); 0 when listenPort is 0 (tests: any free port)."""
        return self.listen_port - 2 if self.listen_port else 0

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2}:{self.ha_listen_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def dynamic_role(self) -> bool:
        """The role changes at runtime (controller mode or lease election: controller_mode/replicas_manager.py)."""
        return self.enable_controller_mode or self.enable_lease_election or self.enable_dleger_commit_log

    @property
    def lease_name_or_default(self) -> str:
        return self.lease_name or f"{self.broker_cluster_name}/{self.broker_name}"

    @property
    def lease_renew_interval_or_default(self) -> int:
        return self.lease_renew_interval_millis or max(1, self.lease_ttl_millis // 3)

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in self.controller_addr.split(";") if a.strip()]

    def validate(self) -> None:
        """Raise ConfigError with a one-line explanation for an inconsistent configuration."""
        if self.broker_role not in _ROLES:
            raise ConfigError(f"brokerRole: {self.broker_role!r} is not one of {', '.join(_ROLES)}")
        if self.enable_controller_mode and self.enable_lease_election:
            raise ConfigError("enableControllerMode and enableLeaseElection cannot both be true: the role comes "
                              "either from the controller or from the lease")
        if self.enable_dleger_commit_log:
            self._validate_dleger()
        elif self.enable_lease_election:
            self._validate_lease_election()
        elif self.enable_controller_mode:
            self._validate_controller_mode()
        else:
            if self.broker_id < 0:
                raise ConfigError(f"brokerId: {self.broker_id} must be >= 0")
            if self.is_slave and self.broker_id == 0:
                raise ConfigError("brokerId: a SLAVE broker needs brokerId > 0")
            if not self.is_slave and self.broker_id != 0:
                raise ConfigError(f"brokerId: a master ({self.broker_role}) must have brokerId 0, not {self.broker_id}")
        for name, port in (("listenPort", self.listen_port), ("haListenPort", self.ha_listen_port)):
            if not 0 <= port <= 65535:
                raise ConfigError(f"{name}: {port} is not a valid TCP port")
        if self.listen_port and self.listen_port < 3:
            raise ConfigError(f"listenPort: {self.listen_port} leaves no room for the VIP port (listenPort - 2)")
        if not 0 <= self.broker_permission <= 7:
            raise ConfigError(f"brokerPermission: {self.broker_permission} is not in 0..7")
        if self.default_topic_queue_nums < 1:
            raise ConfigError(f"defaultTopicQueueNums: {self.default_topic_queue_nums} must be >= 1")
        for addr in self.namesrv_addrs:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"namesrvAddr: {addr!r} is not host:port")
        positive = {
            "registerNameServerPeriod": self.register_name_server_period,
            "registerBrokerTimeoutMills": self.register_broker_timeout_mills,
            "clientChannelMaxIdleTimeSeconds": self.client_channel_max_idle_time_seconds,
            "flushConsumerOffsetInterval": self.flush_consumer_offset_interval,
            "shortPollingTimeMills": self.short_polling_time_mills,
            "maxMsgsNumBatch": self.max_msgs_num_batch,
            "defaultQueryMaxNum": self.default_query_max_num,
            "brokerHeartbeatInterval": self.broker_heartbeat_interval,
            "brokerNotActiveTimeoutMillis": self.broker_not_active_timeout_millis,
            "sendHeartbeatTimeoutMillis": self.send_heartbeat_timeout_millis,
            "syncBrokerMemberGroupPeriod": self.sync_broker_member_group_period,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{name}: {value} must be > 0")
        if self.register_name_server_period > 60000:
            raise ConfigError(f"registerNameServerPeriod: {self.register_name_server_period} must be <= 60000 "
                              "(name servers expire a broker after 120 s)")
        if self.total_replicas < 0:
            raise ConfigError(f"totalReplicas: {self.total_replicas} must be >= 0 (0 = derive it)")
        check_exporter_config(self.metrics_exporter_type, self.metrics_prom_exporter_port)
        if len(self.broker_name) > 127 or not self.broker_name:
            raise ConfigError(f"brokerName: {self.broker_name!r} must be 1..127 characters")

    def _validate_controller_mode(self) -> None:
        if self.enable_slave_acting_master:
            raise ConfigError("enableControllerMode and enableSlaveActingMaster cannot both be true (the controller "
                              "elects masters; RIP-32 acting masters are for the classic mode)")
        if self.broker_id < -1:
            raise ConfigError(f"brokerId: {self.broker_id} must be >= -1 (-1: assigned by the controller)")
        if not self.controller_addrs:
            raise ConfigError("controllerAddr: enableControllerMode=true needs at least one controller host:port")
        for addr in self.controller_addrs:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"controllerAddr: {addr!r} is not host:port")
        for name, value in (("syncBrokerMetadataPeriod", self.sync_broker_metadata_period),
                            ("checkSyncStateSetPeriod", self.check_sync_state_set_period),
                            ("syncControllerMetadataPeriod", self.sync_controller_metadata_period),
                            ("controllerHeartBeatTimeoutMills", self.controller_heart_beat_timeout_mills),
                            ("haMaxTimeSlaveNotCatchup", self.ha_max_time_slave_not_catchup)):
            if value <= 0:
                raise ConfigError(f"{name}: {value} must be > 0")
        if self.controller_heart_beat_timeout_mills <= 2 * self.broker_heartbeat_interval:
            raise ConfigError(f"controllerHeartBeatTimeoutMills: {self.controller_heart_beat_timeout_mills} must be "
                              f"> 2 x brokerHeartbeatInterval ({self.broker_heartbeat_interval}): the master's write "
                              "lease is that difference")
        if self.min_in_sync_replicas < 1:
            raise ConfigError(f"minInSyncReplicas: {self.min_in_sync_replicas} must be >= 1")

    def _validate_dleger(self) -> None:
        if self.enable_controller_mode or self.enable_lease_election or self.enable_slave_acting_master:
            raise ConfigError("enableDLegerCommitLog cannot be combined with enableControllerMode, "
                              "enableLeaseElection or enableSlaveActingMaster: Raft elects the master of the group")
        from orbitmq.broker.raft_mode.service import group_peers
        peers = group_peers(self.dleger_peers)
        if self.dleger_self_id not in peers:
            raise ConfigError(f"dLegerSelfId: {self.dleger_self_id!r} is not one of dLegerPeers ({', '.join(peers)})")
        if self.raft_snapshot_every < 1:
            raise ConfigError(f"raftSnapshotEvery: {self.raft_snapshot_every} must be >= 1")

    def _validate_lease_election(self) -> None:
        if self.enable_slave_acting_master:
            raise ConfigError("enableLeaseElection and enableSlaveActingMaster cannot both be true (the lease elects "
                              "masters; RIP-32 acting masters are for the classic mode)")
        if not self.lease_store_url.strip():
            raise ConfigError("leaseStoreUrl: enableLeaseElection=true needs postgresql://user:pass@host:port/db, "
                              "mysql://user:pass@host:port/db or sqlite:///path")
        if self.lease_ttl_millis <= 0:
            raise ConfigError(f"leaseTtlMillis: {self.lease_ttl_millis} must be > 0")
        if self.lease_renew_interval_millis < 0 or self.lease_renew_interval_or_default >= self.lease_ttl_millis:
            raise ConfigError(f"leaseRenewIntervalMillis: {self.lease_renew_interval_millis} must be shorter than "
                              f"leaseTtlMillis ({self.lease_ttl_millis}); 0 = a third of it")
        if self.lease_max_db_errors < 1:
            raise ConfigError(f"leaseMaxDbErrors: {self.lease_max_db_errors} must be >= 1")
        for name, value in (("checkSyncStateSetPeriod", self.check_sync_state_set_period),
                            ("haMaxTimeSlaveNotCatchup", self.ha_max_time_slave_not_catchup),
                            ("syncBrokerMetadataPeriod", self.sync_broker_metadata_period)):
            if value <= 0:
                raise ConfigError(f"{name}: {value} must be > 0")
        if self.min_in_sync_replicas < 1:
            raise ConfigError(f"minInSyncReplicas: {self.min_in_sync_replicas} must be >= 1")
        from orbitmq.lease.config import LeaseConfig  # the URL and the timing rules, before anything starts

        LeaseConfig(url=self.lease_store_url, name=self.lease_name_or_default, ttl_ms=self.lease_ttl_millis,
                    renew_interval_ms=self.lease_renew_interval_or_default, max_db_errors=self.lease_max_db_errors)

    def field_names(self) -> list[str]:
        return [f.name for f in fields(self)]
