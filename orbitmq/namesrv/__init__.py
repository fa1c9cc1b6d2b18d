"""Name server: broker registration, topic routes, KV config (RocketMQ 4.x protocol). Never imports client."""

from orbitmq.namesrv.app import NameServer
from orbitmq.namesrv.config import NamesrvConfig, load_namesrv_conf
from orbitmq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KvConfig
from orbitmq.namesrv.route_table import RouteTable

__all__ = ["ORDER_TOPIC_CONFIG", "KvConfig", "NameServer", "NamesrvConfig", "RouteTable", "load_namesrv_conf"]
