"""Topic routes as the SDK sees them (pure): publish queues for producers, subscribe queues for consumers,
broker name -> address lookups, and producer queue selection.

Built from `orbitmq.protocol.bodies.TopicRouteData` through `RouteInfo.from_route_data`; fetching routes is
instance.py's job.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orbitmq.model import MessageQueue, Perm, java_hash

MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueInfo:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class RouteInfo:
    """One topic's route: queue data per broker name plus broker addresses (broker id -> addr)."""

    queue_datas: list[QueueInfo]
    broker_addrs: dict[str, dict[int, str]]
    cluster_of: dict[str, str] = field(default_factory=dict)
    order_topic_conf: str | None = None

    @classmethod
    def from_route_data(cls, rd: Any) -> RouteInfo:
        """Adapt a protocol TopicRouteData (attribute names per orbitmq.protocol.bodies)."""
        qds = [
            QueueInfo(q.broker_name, int(q.read_queue_nums), int(q.write_queue_nums), int(q.perm),
                      int(getattr(q, "topic_sys_flag", 0) or 0))
            for q in rd.queue_datas
        ]
        addrs: dict[str, dict[int, str]] = {}
        clusters: dict[str, str] = {}
        for bd in rd.broker_datas:
            addrs[bd.broker_name] = {int(k): v for k, v in bd.broker_addrs.items()}
            clusters[bd.broker_name] = bd.cluster
        return cls(qds, addrs, clusters, getattr(rd, "order_topic_conf", None) or None)

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def any_addr(self, broker_name: str, preferred_id: int = MASTER_ID) -> str | None:
        """`preferred_id` if known, else the master, else the lowest id."""
        ids = self.broker_addrs.get(broker_name)
        if not ids:
            return None
        if preferred_id in ids:
            return ids[preferred_id]
        if MASTER_ID in ids:
            return ids[MASTER_ID]
        return ids[min(ids)]

    def all_addrs(self) -> set[str]:
        return {a for ids in self.broker_addrs.values() for a in ids.values()}

    def master_addrs(self) -> set[str]:
        return {ids[MASTER_ID] for ids in self.broker_addrs.values() if MASTER_ID in ids}

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Producer view: writable queues on brokers with a master, sorted by broker name (or orderTopicConf)."""
        if self.order_topic_conf:
            out: list[MessageQueue] = []
            for item in self.order_topic_conf.split(";"):
                name, _, n = item.partition(":")
                if name and n.strip().isdigit():
                    out.extend(MessageQueue(topic, name, i) for i in range(int(n)))
            return out
        out = []
        for qd in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if qd.perm & Perm.WRITE and self.master_addr(qd.broker_name):
                out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Consumer view: every readable queue."""
        out: list[MessageQueue] = []
        for qd in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if qd.perm & Perm.READ:
                out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
        return out

    def clamped(self, max_queue_nums: int) -> RouteInfo:
        """The route of the auto-create key topic (TBW102) with queue counts limited for a new topic."""
        qds = [QueueInfo(q.broker_name, min(q.read_queue_nums, max_queue_nums),
                         min(q.write_queue_nums, max_queue_nums), q.perm, q.topic_sys_flag)
               for q in self.queue_datas]
        return RouteInfo(qds, self.broker_addrs, self.cluster_of, None)


class PublishInfo:
    """Cached producer queue list for one topic with round-robin selection that avoids the last failed broker."""

    __slots__ = ("topic", "queues", "route", "_counter")

    def __init__(self, topic: str, route: RouteInfo, *, seed: int | None = None) -> None:
        self.topic = topic
        self.route = route
        self.queues = route.publish_queues(topic)
        self._counter = seed if seed is not None else int.from_bytes(os.urandom(2), "big")

    def select(self, last_broker: str | None = None) -> MessageQueue:
        qs = self.queues
        n = len(qs)
        if n == 0:
            raise IndexError("no writable queue")
        if last_broker is None:
            self._counter += 1
            return qs[self._counter % n]
        for _ in range(n):
            self._counter += 1
            mq = qs[self._counter % n]
            if mq.broker_name != last_broker:
                return mq
        self._counter += 1
        return qs[self._counter % n]

    def select_by_key(self, sharding_key: str) -> MessageQueue:
        """Stable across processes: Java String.hashCode (not Python's salted hash) modulo the queue count."""
        qs = self.queues
        if not qs:
            raise IndexError("no writable queue")
        return qs[(java_hash(sharding_key) & 0x7FFFFFFF) % len(qs)]


class RouteCache:
    """topic -> RouteInfo plus the derived publish info; replaced wholesale on refresh."""

    def __init__(self) -> None:
        self.routes: dict[str, RouteInfo] = {}
        self._publish: dict[str, PublishInfo] = {}

    def update(self, topic: str, route: RouteInfo) -> bool:
        """Store a fresh route; returns True if it differs from the cached one (publish info then rebuilt)."""
        old = self.routes.get(topic)
        if old == route:
            return False
        self.routes[topic] = route
        self._publish.pop(topic, None)
        return True

    def get(self, topic: str) -> RouteInfo | None:
        return self.routes.get(topic)

    def remove(self, topic: str) -> None:
        self.routes.pop(topic, None)
        self._publish.pop(topic, None)

    def publish_info(self, topic: str) -> PublishInfo | None:
        pi = self._publish.get(topic)
        if pi is None:
            route = self.routes.get(topic)
            if route is None:
                return None
            pi = self._publish[topic] = PublishInfo(topic, route)
        return pi

    def topics(self) -> list[str]:
        return list(self.routes)

    def broker_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """Address of a broker by name from any cached route (master unless `broker_id` is known)."""
        for route in self.routes.values():
            ids = route.broker_addrs.get(broker_name)
            if ids:
                return route.any_addr(broker_name, broker_id)
        return None

    def all_broker_addrs(self, masters_only: bool = False) -> set[str]:
        out: set[str] = set()
        for r in self.routes.values():
            out |= r.master_addrs() if masters_only else r.all_addrs()
        return out

    def broker_names(self) -> Iterable[str]:
        return {n for r in self.routes.values() for n in r.broker_addrs}
