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
from orbitmq.namesrv.config import CONF_KEYS, NamesrvConfig, namesrv_config_from_properties, parse_properties
from orbitmq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KvConfig
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
_NOT_UPDATABLE = frozenset({"listen_port", "listen_host", "kv_config_path", "rocketmq_home"})


def _stamp(dv: DataVersion) -> tuple[int, ...]:
    return (dv.timestamp, dv.counter, dv.state_version)


def _data_version(stamp: tuple[int, ...]) -> DataVersion:
    return DataVersion(timestamp=stamp[0], counter=stamp[1], state_version=stamp[2] if len(stamp) > 2 else 0)


def _broker_data(g: BrokerGroup) -> BrokerData:
    return BrokerData(cluster=g.cluster, broker_name=g.broker_name, broker_addrs=dict(g.addrs))


def crc32_masked(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


class NamesrvHandlers:
    """Dispatches name-server requests. `on_channel_closed` is wired to the server's connection-close hook."""

    def __init__(self, table: RouteTable, kv: KvConfig, config: NamesrvConfig, clock: Clock = REAL_CLOCK) -> None:
        self.table = table
        self.kv = kv
        self.config = config
        self.clock = clock
        C = RequestCode
        self._routes: dict[int, Handler] = {
            C.REGISTER_BROKER: self.register_broker,
            C.UNREGISTER_BROKER: self.unregister_broker,
            C.QUERY_DATA_VERSION: self.query_data_version,
            C.BROKER_HEARTBEAT: self.broker_heartbeat,
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
    def __call__(self, conn: object, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._routes.get(cmd.code)
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
        return None if cmd.is_oneway else resp

    def on_channel_closed(self, conn: object) -> None:
        for r in self.table.on_channel_closed(conn):
            log.info("broker %s (%s) connection closed; removed from routes", r.addr, r.broker_name)

    # ---- broker registration -------------------------------------------------------------------------
    def register_broker(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        broker_name = ext_str(ext, "brokerName")
        broker_addr = ext_str(ext, "brokerAddr")
        cluster = ext_str(ext, "clusterName")
        ha_server_addr = ext_str(ext, "haServerAddr")
        broker_id = ext_int(ext, "brokerId")
        compressed = ext_bool(ext, "compressed", False)
        body_crc = ext_int(ext, "bodyCrc32", 0)
        if body_crc != 0 and crc32_masked(cmd.body or b"") != body_crc:
            log.warning("REGISTER_BROKER from %s: body crc32 mismatch", broker_addr)
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if cmd.body:
            body = RegisterBrokerBody.decode(cmd.body, compressed=compressed, version=cmd.version)
            wrapper = body.topic_config_serialize_wrapper
            stamp = _stamp(wrapper.data_version)
            topic_configs = list(wrapper.topic_config_table.values())
            filter_servers: list[str] | None = body.filter_server_list
        else:
            stamp, topic_configs, filter_servers = (0, 0, 0), [], []
        result = self.table.register(
            cluster=cluster, broker_addr=broker_addr, broker_name=broker_name, broker_id=broker_id,
            ha_server_addr=ha_server_addr, data_version=stamp, topic_configs=topic_configs,
            now_ms=self.clock.monotonic_ms(), channel=conn, filter_servers=filter_servers,
        )
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
        """5.x BROKER_HEARTBEAT: refresh the registration time of a known broker."""
        self.table.touch(ext_str(cmd.ext_fields, "brokerAddr"), self.clock.monotonic_ms())
        return cmd.response()

    # ---- routes and listings -------------------------------------------------------------------------
    def get_route(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        route = self.table.route(topic)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}")
        data = TopicRouteData(
            queue_datas=[QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                         for q in route.queue_datas],
            broker_datas=[_broker_data(g) for g in route.broker_groups],
            filter_server_table=route.filter_servers,
        )
        if self.config.order_message_enable:
            data.order_topic_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
        standard = wants_standard_route_json(cmd.version, ext_bool(cmd.ext_fields, "acceptStandardJsonOnly", False))
        return cmd.response(body=data.to_json(standard=standard))

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

