"""broker.conf (Java properties) → BrokerConfig + StoreConfig.

Owns the camelCase ↔ snake_case alias table (incl. legacy spellings), type coercion with one-line
ConfigErrors, and unknown-key warnings (returned; the caller logs them). No other module knows camelCase keys.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any

from orbitmq.base.errors import ConfigError
from orbitmq.base.properties import conf_dir, read_properties_file, resolve_path
from orbitmq.base.properties import parse_properties as parse_lines
from orbitmq.broker.config import BrokerConfig

# broker.conf key -> BrokerConfig field (type taken from the dataclass field default)
BROKER_KEYS: dict[str, str] = {
    "brokerClusterName": "broker_cluster_name",
    "brokerName": "broker_name",
    "brokerId": "broker_id",
    "brokerRole": "broker_role",
    "namesrvAddr": "namesrv_addr",
    "brokerIP1": "broker_ip1",
    "brokerIP2": "broker_ip2",
    "listenPort": "listen_port",
    "haListenPort": "ha_listen_port",
    "regionId": "region_id",
    "traceOn": "trace_on",
    "brokerPermission": "broker_permission",
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "autoCreateSubscriptionGroup": "auto_create_subscription_group",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "clusterTopicEnable": "cluster_topic_enable",
    "brokerTopicEnable": "broker_topic_enable",
    "msgTraceTopicName": "msg_trace_topic_name",
    "traceTopicEnable": "trace_topic_enable",
    "startAcceptSendRequestTimeStamp": "start_accept_send_request_time_stamp",
    "rejectTransactionMessage": "reject_transaction_message",
    "maxMsgsNumBatch": "max_msgs_num_batch",
    "defaultQueryMaxNum": "default_query_max_num",
    "messageDelayLevel": "message_delay_level",
    "longPollingEnable": "long_polling_enable",
    "shortPollingTimeMills": "short_polling_time_mills",
    "slaveReadEnable": "slave_read_enable",
    "transferMsgByHeap": "transfer_msg_by_heap",
    "enablePropertyFilter": "enable_property_filter",
    "filterSupportRetry": "filter_support_retry",
    "dedupEnable": "dedup_enable",
    "dedupWindowSeconds": "dedup_window_seconds",
    "dedupMaxEntries": "dedup_max_entries",
    "dedupSnapshotIntervalSeconds": "dedup_snapshot_interval_seconds",
    "rebalanceLockMaxLiveTime": "rebalance_lock_max_live_time",
    "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable",
    "clientChannelMaxIdleTimeSeconds": "client_channel_max_idle_time_seconds",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval",
    "registerBrokerTimeoutMills": "register_broker_timeout_mills",
    "registerNameServerPeriod": "register_name_server_period",
    "forceRegister": "force_register",
    "compressedRegister": "compressed_register",
    "aclEnable": "acl_enable",
    "aclFilePath": "acl_file_path",
    "rocketmqHome": "rocketmq_home",
    "bindAddress": "bind_address",
    "clusterSecret": "cluster_secret",
    "serverMaxConnections": "server_max_connections",
    "serverMaxConnectionsPerIp": "server_max_connections_per_ip",
    "serverFrameDeadlineMs": "server_frame_deadline_ms",
    "serverInputBufferBudget": "server_input_buffer_budget",
    "autoCreatePerClientPerMinute": "auto_create_per_client_per_minute",
    "filterSqlMaxLength": "filter_sql_max_length",
    "filterSqlMaxDepth": "filter_sql_max_depth",
    "filterSqlMaxInList": "filter_sql_max_in_list",
    "filterSqlCacheBytes": "filter_sql_cache_bytes",
    "maxPullMsgNums": "max_pull_msg_nums",
    "longPollingMaxHoldMs": "long_polling_max_hold_ms",
    "longPollingMaxHeldPerConnection": "long_polling_max_held_per_connection",
    "longPollingMaxHeld": "long_polling_max_held",
    "tlsEnable": "tls_enable",
    "tls.enable": "tls_enable",
    "tls.server.mode": "tls_server_mode",
    "tls.server.certPath": "tls_server_cert_path",
    "tls.server.keyPath": "tls_server_key_path",
    "tls.server.trustCertPath": "tls_server_trust_cert_path",
    "tls.server.need.client.auth": "tls_server_need_client_auth",
    "tls.client.certPath": "tls_client_cert_path",
    "tls.client.keyPath": "tls_client_key_path",
    "tls.client.trustCertPath": "tls_client_trust_cert_path",
    "tls.client.authServer": "tls_client_auth_server",
    "transactionTimeOut": "transaction_timeout",
    "transactionCheckMax": "transaction_check_max",
    "transactionCheckInterval": "transaction_check_interval",
    "haMasterAddress": "ha_master_address",
    "haTransferBatchSize": "ha_transfer_batch_size",
    "haSendHeartbeatInterval": "ha_send_heartbeat_interval",
    "haHousekeepingInterval": "ha_housekeeping_interval",
    "haSlaveFallbehindMax": "ha_slave_fallbehind_max",
    "slaveTimeout": "slave_timeout",
    "slaveSyncInterval": "slave_sync_interval",
    "enableSlaveActingMaster": "enable_slave_acting_master",
    "enableRemoteEscape": "enable_remote_escape",
    "brokerHeartbeatInterval": "broker_heartbeat_interval",
    "brokerNotActiveTimeoutMillis": "broker_not_active_timeout_millis",
    "sendHeartbeatTimeoutMillis": "send_heartbeat_timeout_millis",
    "syncBrokerMemberGroupPeriod": "sync_broker_member_group_period",
    "lockInStrictMode": "lock_in_strict_mode",
    "totalReplicas": "total_replicas",
    "skipPreOnline": "skip_pre_online",
    "compatibleWithOldNameSrv": "compatible_with_old_name_srv",
    "syncMasterConfirmVisibility": "sync_master_confirm_visibility",
    "timerWheelEnable": "timer_wheel_enable",
    "timerMaxDelaySec": "timer_max_delay_sec",
    "timerWheelSlots": "timer_wheel_slots",
    # RIP-44 controller mode (haMaxTimeSlaveNotCatchup ... syncFromLastFile are store keys in RocketMQ)
    "enableControllerMode": "enable_controller_mode",
    "controllerAddr": "controller_addr",
    "syncBrokerMetadataPeriod": "sync_broker_metadata_period",
    "checkSyncStateSetPeriod": "check_sync_state_set_period",
    "syncControllerMetadataPeriod": "sync_controller_metadata_period",
    "controllerHeartBeatTimeoutMills": "controller_heart_beat_timeout_mills",
    "brokerElectionPriority": "broker_election_priority",
    "allAckInSyncStateSet": "all_ack_in_sync_state_set",
    "inSyncReplicas": "in_sync_replicas",
    "minInSyncReplicas": "min_in_sync_replicas",
    "haMaxTimeSlaveNotCatchup": "ha_max_time_slave_not_catchup",
    "storePathBrokerIdentity": "store_path_broker_identity",
    "asyncLearner": "async_learner",
    # lease election (broker/lease_mode/)
    "enableLeaseElection": "enable_lease_election",
    "leaseStoreUrl": "lease_store_url",
    "leaseName": "lease_name",
    "leaseTtlMillis": "lease_ttl_millis",
    "leaseRenewIntervalMillis": "lease_renew_interval_millis",
    "leaseMaxDbErrors": "lease_max_db_errors",
    # Raft broker groups (broker/raft_mode/)
    "enableDLegerCommitLog": "enable_dleger_commit_log",
    "dLegerGroup": "dleger_group",
    "dLegerPeers": "dleger_peers",
    "dLegerSelfId": "dleger_self_id",
    "raftSnapshotEvery": "raft_snapshot_every",
    "localDeliveryGroups": "local_delivery_groups",
    "syncFromLastFile": "sync_from_last_file",
    "metricsExporterType": "metrics_exporter_type",
    "metricsPromExporterHost": "metrics_prom_exporter_host",
    "metricsPromExporterPort": "metrics_prom_exporter_port",
}

# broker.conf key -> StoreConfig field
STORE_KEYS: dict[str, str] = {
    "storePathRootDir": "store_path_root_dir",
    "storePathCommitLog": "store_path_commitlog",  # resolved like storePathRootDir; "" = <root>/commitlog
    "mappedFileSizeCommitLog": "mapped_file_size_commitlog",
    "mapedFileSizeCommitLog": "mapped_file_size_commitlog",  # legacy Java spelling
    "mappedFileSizeConsumeQueue": "mapped_file_size_consume_queue",
    "mapedFileSizeConsumeQueue": "mapped_file_size_consume_queue",  # legacy Java spelling
    "flushDiskType": "flush_disk_type",
    "flushIntervalCommitLog": "flush_interval_commitlog_ms",
    "flushCommitLogLeastPages": "flush_commitlog_least_pages",
    "flushCommitLogThoroughInterval": "flush_commitlog_thorough_interval_ms",
    "syncFlushTimeout": "sync_flush_timeout_ms",
    "flushIntervalConsumeQueue": "flush_interval_consume_queue_ms",
    "fileReservedTime": "file_reserved_time_hours",
    "deleteWhen": "delete_when",
    "diskMaxUsedSpaceRatio": "disk_max_used_space_ratio",
    "maxMessageSize": "max_message_size",
    "checkCRCOnRecover": "check_crc_on_recover",
    "messageIndexEnable": "message_index_enable",
    "maxHashSlotNum": "max_hash_slot_num",
    "maxIndexNum": "max_index_num",
    "accessMessageInMemoryMaxRatio": "access_message_in_memory_max_ratio",
    "confirmOffsetMode": "confirm_offset_mode",
    "brokerFastFailureEnable": "broker_fast_failure_enable",
    "osPageCacheBusyTimeOutMills": "os_page_cache_busy_timeout_ms",
    "waitTimeMillsInSendQueue": "wait_time_ms_in_send_queue",
    "maxFilterMessageSize": "max_filter_message_size",  # RocketMQ 5's key (ConsumeQueue bytes per filtered scan)
    "maxFilterMessageCount": "max_filter_message_size",  # the same bound under RocketMQ 4's name (also bytes)
}

# RocketMQ keys that are valid in a Java broker.conf but have no meaning here (thread pools, netty, ...).
IGNORED_KEYS = frozenset({
    "sendMessageThreadPoolNums", "pullMessageThreadPoolNums", "queryMessageThreadPoolNums",
    "adminBrokerThreadPoolNums", "clientManageThreadPoolNums", "consumerManageThreadPoolNums",
    "heartbeatThreadPoolNums", "endTransactionThreadPoolNums", "processReplyMessageThreadPoolNums",
    "serverWorkerThreads", "serverCallbackExecutorThreads", "serverSelectorThreads",
    "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue", "serverSocketSndBufSize", "serverSocketRcvBufSize",
    "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector", "useReentrantLockWhenPutMessage",
    "transientStorePoolEnable", "warmMapedFileEnable", "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity", "waitTimeMillsInPullQueue", "fetchNamesrvAddrByAddressServer",
    "slaveReadEnableForDLeger",
})

SECRET_FIELDS = frozenset({"cluster_secret"})


def _resolve_dir(path: str, base_dir: str | None) -> str:
    """A directory key of broker.conf: ~ expanded, relative to the file's directory (or the working directory)."""
    return resolve_path(path, base_dir)


def _type_of(dc: type, name: str) -> type:
    for f in dataclasses.fields(dc):
        if f.name == name:
            if f.default is not dataclasses.MISSING and f.default is not None:
                return type(f.default)
            return str
    raise KeyError(name)


def coerce(key: str, raw: str, kind: type, source: str = "broker.conf") -> Any:
    """Convert one property text to the field's type; a bad value raises a one-line ConfigError."""
    text = raw.strip()
    if kind is bool:
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        raise ConfigError(f"{source}: {key}: {raw!r} is not a boolean (true/false)")
    if kind is int:
        try:
            return int(text.replace("_", ""), 10)
        except ValueError:
            raise ConfigError(f"{source}: {key}: {raw!r} is not an integer") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{source}: {key}: {raw!r} is not a number") from None
    return text


def parse_properties(text: str) -> dict[str, str]:
    """Java properties syntax (orbitmq.base.properties): key -> value, the last occurrence of a key wins."""
    return {key: value for _, key, value in parse_lines(text)}


def _store_config_cls() -> type:
    from orbitmq.store import StoreConfig

    return StoreConfig


def build_configs(
    props: dict[str, str], *, source: str = "broker.conf", base_dir: str | None = None
) -> tuple[BrokerConfig, Any, list[str]]:
    """props (camelCase keys) -> (BrokerConfig, StoreConfig, warnings). Raises ConfigError on bad values."""
    store_cls = _store_config_cls()
    warnings: list[str] = []
    broker_kw: dict[str, Any] = {}
    store_kw: dict[str, Any] = {}
    for key, raw in props.items():
        if key in BROKER_KEYS:
            name = BROKER_KEYS[key]
            broker_kw[name] = coerce(key, raw, _type_of(BrokerConfig, name), source)
        elif key in STORE_KEYS:
            name = STORE_KEYS[key]
            store_kw[name] = coerce(key, raw, _type_of(store_cls, name), source)
        elif key in IGNORED_KEYS:
            warnings.append(f"{source}: {key} is a RocketMQ setting that OrbitMQ ignores")
        else:
            warnings.append(f"{source}: unknown key {key!r} ignored")
    for name in ("broker_role",):
        if name in broker_kw:
            broker_kw[name] = str(broker_kw[name]).upper()
    if "flush_disk_type" in store_kw:
        store_kw["flush_disk_type"] = str(store_kw["flush_disk_type"]).upper()
    root = store_kw.get("store_path_root_dir") or os.path.join("~", "store")
    store_kw["store_path_root_dir"] = _resolve_dir(root, base_dir)
    if store_kw.get("store_path_commitlog"):
        store_kw["store_path_commitlog"] = _resolve_dir(store_kw["store_path_commitlog"], base_dir)
    if store_kw.get("flush_disk_type") == "SYNC_FLUSH" and "confirm_offset_mode" not in store_kw:
        store_kw["confirm_offset_mode"] = "flushed"
    if broker_kw.get("store_path_broker_identity"):
        broker_kw["store_path_broker_identity"] = _resolve_dir(broker_kw["store_path_broker_identity"], base_dir)
    for name in ("acl_file_path", "rocketmq_home"):  # relative to broker.conf's directory, like the store paths
        if broker_kw.get(name):
            broker_kw[name] = _resolve_dir(broker_kw[name], base_dir)
    if broker_kw.get("enable_dleger_commit_log"):
        for key, name in (("broker_role", "brokerRole"), ("broker_id", "brokerId")):
            if key in broker_kw:
                warnings.append(f"{source}: {name} {broker_kw[key]} ignored: with enableDLegerCommitLog Raft decides "
                                "the role (the leader registers as brokerId 0)")
        broker_kw["broker_role"], broker_kw["broker_id"] = "SLAVE", 1  # fenced replica until Raft names the role
    elif broker_kw.get("enable_lease_election") and not broker_kw.get("enable_controller_mode"):
        for key, name in (("broker_role", "brokerRole"), ("broker_id", "brokerId")):
            if key in broker_kw:
                warnings.append(f"{source}: {name} {broker_kw[key]} ignored: with enableLeaseElection the lease "
                                "decides the role (the winner registers as brokerId 0)")
        broker_kw["broker_role"], broker_kw["broker_id"] = "SLAVE", 0  # fenced replica until the lease names the role
    elif broker_kw.get("enable_controller_mode"):
        if broker_kw.get("broker_role", "SLAVE") != "SLAVE":
            warnings.append(f"{source}: brokerRole {broker_kw['broker_role']} ignored: in controller mode the "
                            "controller decides the role")
        broker_kw["broker_role"] = "SLAVE"  # fenced, as a replica, until the controller names the role
    elif broker_kw.get("broker_role", "ASYNC_MASTER") != "SLAVE" and broker_kw.get("broker_id", 0) != 0:
        warnings.append(f"{source}: brokerId {broker_kw['broker_id']} ignored: a master always has brokerId 0")
        broker_kw["broker_id"] = 0
    broker = BrokerConfig(**broker_kw)
    store = store_cls(**store_kw)
    broker.validate()
    store.validate()
    return broker, store, warnings


def load_broker_conf(path: str) -> tuple[BrokerConfig, Any, list[str]]:
    """Parse a broker.conf file -> (BrokerConfig, StoreConfig, warnings). Raises ConfigError. Relative paths in it
    (storePathRootDir, storePathCommitLog, storePathBrokerIdentity) are relative to the file's folder, whatever the
    current directory."""
    props = {key: value for _, key, value in read_properties_file(path, "broker")}
    return build_configs(props, source=os.path.basename(path) or path, base_dir=conf_dir(path))


def camel_of(field_name: str) -> str | None:
    """The preferred broker.conf key of a BrokerConfig or StoreConfig field (first alias wins)."""
    for table in (BROKER_KEYS, STORE_KEYS):
        for key, name in table.items():
            if name == field_name:
                return key
    return None


def to_properties(broker: BrokerConfig, store: Any | None = None) -> dict[str, str]:
    """camelCase key -> Java-style string value, for GET_BROKER_CONFIG and config dumps."""
    out: dict[str, str] = {}
    for obj, table in ((broker, BROKER_KEYS), (store, STORE_KEYS)):
        if obj is None:
            continue
        seen: set[str] = set()
        for key, name in table.items():
            if name in seen:
                continue
            seen.add(name)
            value = getattr(obj, name, None)
            if value is None:
                continue
            if name in SECRET_FIELDS and value:
                value = "******"  # GET_BROKER_CONFIG must not hand the secret out
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def apply_updates(
    broker: BrokerConfig, props: dict[str, str], *, source: str = "UPDATE_BROKER_CONFIG"
) -> tuple[BrokerConfig, list[str]]:
    """Apply hot-reloadable broker keys; non-reloadable or unknown keys are returned as warnings."""
    meta = {f.name: f.metadata for f in dataclasses.fields(BrokerConfig)}
    changes: dict[str, Any] = {}
    warnings: list[str] = []
    for key, raw in props.items():
        name = BROKER_KEYS.get(key)
        if name is None:
            warnings.append(f"{source}: {key} cannot be changed at runtime (unknown or store key)")
            continue
        if not meta[name].get("hot_reloadable"):
            warnings.append(f"{source}: {key} needs a broker restart")
            continue
        changes[name] = coerce(key, raw, _type_of(BrokerConfig, name), source)
    new = dataclasses.replace(broker, **changes) if changes else broker
    new.validate()
    return new, warnings


def keys_of(tables: Iterable[dict[str, str]] = (BROKER_KEYS, STORE_KEYS)) -> list[str]:
    return [k for t in tables for k in t]
