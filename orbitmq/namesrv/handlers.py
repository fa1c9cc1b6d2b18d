"""Request handlers of the name server: decode headers/bodies, call RouteTable / KvConfig, encode answers.

One callable (`NamesrvHandlers`) for RemotingServer. Unknown codes get REQUEST_CODE_NOT_SUPPORTED (5.x
behaviour); bad headers or bodies get SYSTEM_ERROR with the reason; oneway requests never get an answer.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import fields

from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.errors import ConfigError, ProtocolError
from orbitmq.base.properties import parse_properties
from orbitmq.model.names import server_name_error, topic_error
from orbitmq.model.topic import TopicConfig
from orbitmq.namesrv.config import CONF_KEYS, NamesrvConfig, namesrv_config_from_properties
from orbitmq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KvConfig
from orbitmq.namesrv.notify import send_min_id_notices
from orbitmq.namesrv.route_push import WATCH_KEY, RouteWatchers
from orbitmq.namesrv.route_table import BrokerGroup, RouteTable
from orbitmq.protocol import (
    HeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    ext_bool,
    ext_int,
    ext_str,
)
from orbitmq.protocol.bodies import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
    wants_standard_route_json,
)

log = logging.getLogger(__name__)

Handler = Callable[[object, RemotingCommand], RemotingCommand]

# keys UPDATE_NAMESRV_CONFIG may not change at runtime (Java's configBlackList plus the listen socket)
_NOT_UPDATABLE = frozenset({"listen_port", "listen_host", "kv_config_path", "rocketmq_home", "cluster_secret"})

# requests that may change what GET_ROUTEINFO_BY_TOPIC answers or a group's membership: after each one the
# queued min-id notices (905) go out and watched routes are re-checked
_MUTATIONS = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG, RequestCode.UPDATE_NAMESRV_CONFIG,
})


def _stamp(dv: DataVersion) -> tuple[int, ...]:
    return (dv.timestamp, dv.counter, dv.state_version)


def _data_version(stamp: tuple[int, ...]) -> DataVersion:
    return DataVersion(timestamp=stamp[0], counter=stamp[1], state_version=stamp[2] if len(stamp) > 2 else 0)


def _broker_data(g: BrokerGroup) -> BrokerData:
    return BrokerData(cluster=g.cluster, broker_name=g.broker_name, broker_addrs=dict(g.addrs))


def _legal_topics(broker_name: str, configs: list[TopicConfig]) -> list[TopicConfig]:
    """The registered topic configs without those whose name is illegal (each logged; the rest registers)."""
    kept = [tc for tc in configs if topic_error(tc.topic_name) is None]
    if len(kept) != len(configs):
        bad = [tc.topic_name for tc in configs if topic_error(tc.topic_name) is not None]
        log.warning("REGISTER_BROKER from %s: %d topics with illegal names not routed: %r", broker_name,
                    len(bad), bad[:10])
    return kept


def crc32_masked(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


class NamesrvHandlers:
    """Dispatches name-server requests. `forget_connection` and `after_mutation` are wired by NameServer to the
    connection-close hook and the liveness layer."""

    def __init__(self, table: RouteTable, kv: KvConfig, config: NamesrvConfig, clock: Clock = REAL_CLOCK) -> None:
        self.table = table
        self.kv = kv
        self.config = config
        self.clock = clock
        self.watchers = RouteWatchers(self.route_data)
        self._fallback: Callable[[object, RemotingCommand], object] | None = None
        self._shared_codes: frozenset[int] = frozenset()
        C = RequestCode
        self._routes: dict[int, Handler] = {
            C.REGISTER_BROKER: self.register_broker,
            C.UNREGISTER_BROKER: self.unregister_broker,
            C.QUERY_DATA_VERSION: self.query_data_version,
            C.BROKER_HEARTBEAT: self.broker_heartbeat,
            C.GET_BROKER_MEMBER_GROUP: self.get_broker_member_group,
            C.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            C.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            C.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            C.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            C.GET_UNIT_TOPIC_LIST: self.get_unit_topics,
            C.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_unit_topics,
            C.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_unit_topics,
            C.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            C.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            C.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            C.PUT_KV_CONFIG: self.put_kv,
            C.GET_KV_CONFIG: self.get_kv,
            C.DELETE_KV_CONFIG: self.delete_kv,
            C.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            C.GET_NAMESRV_CONFIG: self.get_namesrv_config,
            C.UPDATE_NAMESRV_CONFIG: self.update_namesrv_config,
        }

    # ---- entry points --------------------------------------------------------------------------------
    def set_fallback(self, handler: Callable[[object, RemotingCommand], object],
                     shared: frozenset[int] = frozenset()) -> None:
        """Embedding hook (wired by the CLI, e.g. a controller in this process): requests with codes this name
        server does not handle go to `handler`, which answers them; codes in `shared` that it does handle are also
        passed to `handler` first, whose result is ignored (the name server answers; meant for oneway requests)."""
        self._fallback = handler
        self._shared_codes = shared

    def __call__(self, conn: object, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._routes.get(cmd.code)
        if self._fallback is not None:
            if handler is None:
                return self._fallback(conn, cmd)  # type: ignore[return-value]
            if cmd.code in self._shared_codes:
                self._fallback(conn, cmd)
        if handler is None:
            resp = cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f" request type {cmd.code} not supported")
        else:
            try:
                resp = handler(conn, cmd)
            except (HeaderError, ProtocolError, ConfigError, ValueError) as e:
                log.warning("name server request %d from %s rejected: %s", cmd.code,
                            getattr(conn, "remote_addr", "?"), e)
                resp = cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
            if cmd.code in _MUTATIONS:
                self.after_mutation()
        return None if cmd.is_oneway else resp

    def after_mutation(self) -> None:
        """Send the min-id notices the table queued, and re-check watched routes (pushed once per loop turn)."""
        send_min_id_notices(self.table.drain_notices())
        self.watchers.schedule()

    def forget_connection(self, conn: object) -> None:
        """A connection closed: its route watches go (removing a broker is the liveness layer's job)."""
        self.watchers.forget(conn)

    def on_channel_closed(self, conn: object) -> None:
        """Everything a closed connection ends, without the liveness layer (embedding and tests)."""
        self.forget_connection(conn)
        for r in self.table.on_channel_closed(conn):
            log.info("broker %s (%s) connection closed; removed from routes", r.addr, r.broker_name)
        self.after_mutation()

    # ---- broker registration -------------------------------------------------------------------------
    def register_broker(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        broker_name = ext_str(ext, "brokerName")
        broker_addr = ext_str(ext, "brokerAddr")
        cluster = ext_str(ext, "clusterName")
        ha_server_addr = ext_str(ext, "haServerAddr")
        broker_id = ext_int(ext, "brokerId")
        heartbeat_timeout_ms = ext_int(ext, "heartbeatTimeoutMillis", None)
        enable_acting_master = ext_bool(ext, "enableActingMaster", False)
        compressed = ext_bool(ext, "compressed", False)
        body_crc = ext_int(ext, "bodyCrc32", 0)
        name_err = server_name_error(broker_name, "brokerName") or server_name_error(cluster, "clusterName")
        if name_err is not None:
            log.warning("REGISTER_BROKER from %s refused: %s", broker_addr, name_err)
            return cmd.response(ResponseCode.SYSTEM_ERROR, name_err)
        if body_crc != 0 and crc32_masked(cmd.body or b"") != body_crc:
            log.warning("REGISTER_BROKER from %s: body crc32 mismatch", broker_addr)
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if cmd.body:
            body = RegisterBrokerBody.decode(cmd.body, compressed=compressed, version=cmd.version)
            wrapper = body.topic_config_serialize_wrapper
            stamp = _stamp(wrapper.data_version)
            topic_configs = _legal_topics(broker_name, list(wrapper.topic_config_table.values()))
            filter_servers: list[str] | None = body.filter_server_list
        else:
            stamp, topic_configs, filter_servers = (0, 0, 0), [], []
        result = self.table.register(
            cluster=cluster, broker_addr=broker_addr, broker_name=broker_name, broker_id=broker_id,
            ha_server_addr=ha_server_addr, data_version=stamp, topic_configs=topic_configs,
            now_ms=self.clock.monotonic_ms(), channel=conn, filter_servers=filter_servers,
            heartbeat_timeout_ms=heartbeat_timeout_ms, enable_acting_master=enable_acting_master,
        )
        if result.rejected_by is not None:
            log.warning("REGISTER_BROKER %s id=0 %s refused: master %s has a higher stateVersion (master epoch) "
                        "than %d", broker_name, broker_addr, result.rejected_by, stamp[2])
        if result.first_registration:
            log.info("new broker registered: %s id=%d %s cluster=%s (%d topics)", broker_name, broker_id,
                     broker_addr, cluster, len(topic_configs))
        out_ext: dict[str, str] = {}
        if result.ha_server_addr is not None:
            out_ext["haServerAddr"] = result.ha_server_addr
        if result.master_addr is not None:
            out_ext["masterAddr"] = result.master_addr
        order = self.kv.namespace(ORDER_TOPIC_CONFIG)
        body_out = KVTable(order).to_json() if order is not None else None
        return cmd.response(ext_fields=out_ext, body=body_out)

    def unregister_broker(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        removed = self.table.unregister(
            cluster=ext_str(ext, "clusterName"), broker_addr=ext_str(ext, "brokerAddr"),
            broker_name=ext_str(ext, "brokerName"), broker_id=ext_int(ext, "brokerId"),
        )
        log.info("broker %s unregistered (%s)", ext_str(ext, "brokerAddr"), "removed" if removed else "unknown")
        return cmd.response()

    def query_data_version(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        broker_addr = ext_str(ext, "brokerAddr")
        for key in ("brokerName", "clusterName"):
            ext_str(ext, key)
        ext_int(ext, "brokerId")
        stamp = _stamp(DataVersion.from_json(cmd.body))
        changed = self.table.is_data_version_changed(broker_addr, stamp)
        if not changed:
            self.table.touch(broker_addr, self.clock.monotonic_ms())
        stored = self.table.data_version_of(broker_addr)
        body = _data_version(stored).to_json() if stored is not None else None
        return cmd.response(ext_fields={"changed": "true" if changed else "false"}, body=body)

    def broker_heartbeat(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        """5.x BROKER_HEARTBEAT (904, usually oneway): refresh the registration time of a known broker, and
        its expiry time when `heartbeatTimeoutMills` (sic, Java's spelling) is given."""
        ext = cmd.ext_fields
        ext_str(ext, "clusterName")
        ext_str(ext, "brokerName")
        timeout = ext_int(ext, "heartbeatTimeoutMills", None)
        self.table.touch(ext_str(ext, "brokerAddr"), self.clock.monotonic_ms(), timeout)
        return cmd.response()

    def get_broker_member_group(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        """5.x GET_BROKER_MEMBER_GROUP (901): the live members of a group with their true ids."""
        cluster = ext_str(cmd.ext_fields, "clusterName")
        broker_name = ext_str(cmd.ext_fields, "brokerName")
        group = BrokerMemberGroup(cluster, broker_name, self.table.member_group(broker_name))
        return cmd.response(body=group.to_json())

    # ---- routes and listings -------------------------------------------------------------------------
    def route_data(self, topic: str) -> TopicRouteData | None:
        """What GET_ROUTEINFO_BY_TOPIC answers for `topic` now (None: TOPIC_NOT_EXIST)."""
        route = self.table.route(topic, acting_master=self.config.support_acting_master)
        if route is None:
            return None
        data = TopicRouteData(
            queue_datas=[QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                         for q in route.queue_datas],
            broker_datas=[_broker_data(g) for g in route.broker_groups],
            filter_server_table=route.filter_servers,
        )
        if self.config.order_message_enable:
            data.order_topic_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
        return data

    def get_route(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        data = self.route_data(topic)
        out_ext = None
        if ext_bool(cmd.ext_fields, WATCH_KEY, False) and self.watchers.watch(conn, topic, data):
            out_ext = {WATCH_KEY: "true"}
        if data is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}", ext_fields=out_ext)
        standard = wants_standard_route_json(cmd.version, ext_bool(cmd.ext_fields, "acceptStandardJsonOnly", False))
        return cmd.response(body=data.to_json(standard=standard), ext_fields=out_ext)

    def get_cluster_info(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        groups, clusters = self.table.cluster_info()
        info = ClusterInfo({name: _broker_data(g) for name, g in groups.items()}, clusters)
        return cmd.response(body=info.to_json())

    def get_all_topics(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        if not self.config.enable_all_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        return cmd.response(body=TopicList(self.table.topics()).to_json())

    def get_topics_by_cluster(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        if not self.config.enable_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        cluster = ext_str(cmd.ext_fields, "cluster")
        return cmd.response(body=TopicList(self.table.topics_by_cluster(cluster)).to_json())

    def get_system_topics(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        topics, broker_addr = self.table.system_topics()
        return cmd.response(body=TopicList(topics, broker_addr).to_json())

    def get_unit_topics(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        if not self.config.enable_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        if cmd.code == RequestCode.GET_UNIT_TOPIC_LIST:
            topics = self.table.unit_topics(unit=True, unit_sub=None)
        elif cmd.code == RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST:
            topics = self.table.unit_topics(unit=None, unit_sub=True)
        else:
            topics = self.table.unit_topics(unit=False, unit_sub=True)
        return cmd.response(body=TopicList(topics).to_json())

    # ---- admin mutations -----------------------------------------------------------------------------
    def delete_topic(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        cluster = ext_str(cmd.ext_fields, "clusterName", None)
        self.table.delete_topic(topic, cluster or None)
        return cmd.response()

    def wipe_write_perm(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        count = self.table.wipe_write_perm(ext_str(cmd.ext_fields, "brokerName"))
        return cmd.response(ext_fields={"wipeTopicCount": str(count)})

    def add_write_perm(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        count = self.table.add_write_perm(ext_str(cmd.ext_fields, "brokerName"))
        return cmd.response(ext_fields={"addTopicCount": str(count)})

    # ---- KV config -----------------------------------------------------------------------------------
    def put_kv(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        self.kv.put(ext_str(ext, "namespace"), ext_str(ext, "key"), ext_str(ext, "value"))
        return cmd.response()

    def get_kv(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ns, key = ext_str(cmd.ext_fields, "namespace"), ext_str(cmd.ext_fields, "key")
        value = self.kv.get(ns, key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(ext_fields={"value": value})

    def delete_kv(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        self.kv.delete(ext_str(cmd.ext_fields, "namespace"), ext_str(cmd.ext_fields, "key"))
        return cmd.response()

    def get_kv_list(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ns = ext_str(cmd.ext_fields, "namespace")
        table = self.kv.namespace(ns)
        if table is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(body=KVTable(table).to_json())

    # ---- name server config --------------------------------------------------------------------------
    def get_namesrv_config(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        by_field = {f: k for k, f in reversed(list(CONF_KEYS.items()))}  # first alias wins
        lines = []
        for f in fields(NamesrvConfig):
            value = getattr(self.config, f.name)
            key = by_field.get(f.name, f.name)
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            if f.name == "cluster_secret" and value:
                text = "******"  # never handed out
            lines.append(f"{key}={text}\n")
        return cmd.response(body="".join(lines).encode())

    def update_namesrv_config(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        """Runtime update from a properties body (not persisted; listen socket and paths are fixed)."""
        props = parse_properties((cmd.body or b"").decode("utf-8"))
        if not props:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "string2Properties error")
        new, warnings = namesrv_config_from_properties(props, source="UPDATE_NAMESRV_CONFIG", base=self.config)
        frozen = [f.name for f in fields(NamesrvConfig)
                  if f.name in _NOT_UPDATABLE and getattr(new, f.name) != getattr(self.config, f.name)]
        if frozen:
            return cmd.response(ResponseCode.NO_PERMISSION, f"Can not update config in black list: {frozen}")
        self.config = new
        self.table.expired_time_ms = new.broker_channel_expired_time_ms
        self.table.delete_topic_with_broker_registration = new.delete_topic_with_broker_registration
        log.info("name server config updated%s", f" ({'; '.join(warnings)})" if warnings else "")
        return cmd.response(remark="; ".join(warnings) or None)

