"""Route bodies: QueueData, BrokerData, TopicRouteData (GET_ROUTEINFO_BY_TOPIC) and ClusterInfo.

brokerAddrs is a Map<Long,String>: standard JSON has quoted keys, fastjson's default form unquoted ones.
Both are accepted; which one is written is the caller's choice (never any whitespace either way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbitmq.protocol import fastjson
from orbitmq.protocol.bodies.base import JsonBody, as_bool, as_int

MASTER_ID = 0


@dataclass(slots=True)
class QueueData(JsonBody):
    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = 6
    topic_sys_flag: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        # topicSynFlag is the pre-4.9.0 spelling that Go clients still read; unknown keys are ignored.
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSynFlag": self.topic_sys_flag,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> QueueData:
        return cls(
            broker_name=str(d["brokerName"]),
            read_queue_nums=as_int(d.get("readQueueNums")),
            write_queue_nums=as_int(d.get("writeQueueNums")),
            perm=as_int(d.get("perm"), 6),
            topic_sys_flag=as_int(d.get("topicSysFlag", d.get("topicSynFlag"))),
        )


@dataclass(slots=True)
class BrokerData(JsonBody):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    enable_acting_master: bool = False  # 5.x; written only when true
    zone_name: str | None = None  # 5.x; written only when set

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def to_json_obj(self, standard: bool = True) -> dict[str, Any]:
        addrs: dict[Any, str]
        if standard:
            addrs = {str(k): v for k, v in sorted(self.broker_addrs.items())}
        else:
            addrs = dict(sorted(self.broker_addrs.items()))
        d: dict[str, Any] = {"brokerAddrs": addrs, "brokerName": self.broker_name, "cluster": self.cluster}
        if self.enable_acting_master:
            d["enableActingMaster"] = True
        if self.zone_name is not None:
            d["zoneName"] = self.zone_name
        return d

    def to_json(self, standard: bool = True) -> bytes:
        return fastjson.dumps(self.to_json_obj(standard), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> BrokerData:
        raw = d.get("brokerAddrs") or {}
        return cls(
            cluster=str(d.get("cluster") or ""),
            broker_name=str(d["brokerName"]),
            broker_addrs={as_int(k): str(v) for k, v in raw.items()},
            enable_acting_master=as_bool(d.get("enableActingMaster")),
            zone_name=d.get("zoneName"),
        )


@dataclass(slots=True)
class TopicRouteData(JsonBody):
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json_obj(self, standard: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "brokerDatas": [b.to_json_obj(standard) for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf is not None:
            d["orderTopicConf"] = self.order_topic_conf
        d["queueDatas"] = [q.to_json_obj() for q in self.queue_datas]
        return d

    def to_json(self, standard: bool = True) -> bytes:
        """standard=True: quoted brokerAddrs keys (request version >= 401 or acceptStandardJsonOnly)."""
        return fastjson.dumps(self.to_json_obj(standard), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> TopicRouteData:
        return cls(
            queue_datas=[QueueData.from_json_obj(q) for q in d.get("queueDatas") or []],
            broker_datas=[BrokerData.from_json_obj(b) for b in d.get("brokerDatas") or []],
            order_topic_conf=d.get("orderTopicConf"),
            filter_server_table={str(k): list(v or []) for k, v in (d.get("filterServerTable") or {}).items()},
        )


def wants_standard_route_json(version: int, accept_standard_json_only: bool) -> bool:
    """Java name server rule: standard JSON for request version >= 401 (V4_9_4) or when asked."""
    return version >= 401 or accept_standard_json_only


@dataclass(slots=True)
class ClusterInfo(JsonBody):
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json_obj(self, standard: bool = False) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_json_obj(standard) for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
        }

    def to_json(self, standard: bool = False) -> bytes:
        """Java always writes fastjson's default (unquoted brokerAddrs keys) here."""
        return fastjson.dumps(self.to_json_obj(standard), standard=standard)

    @classmethod
    def from_json_obj(cls, d: dict[str, Any]) -> ClusterInfo:
        return cls(
            broker_addr_table={
                str(k): BrokerData.from_json_obj(v) for k, v in (d.get("brokerAddrTable") or {}).items()
            },
            cluster_addr_table={str(k): [str(x) for x in v or []]
                                for k, v in (d.get("clusterAddrTable") or {}).items()},
        )
