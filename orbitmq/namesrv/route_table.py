"""The name server's routing state (RocketMQ RouteInfoManager), pure and sans-IO.

Owns broker groups, clusters, per-topic queue data and broker liveness. Time comes in as `now_ms`
arguments; a broker's connection is an opaque `channel` token. No asyncio, sockets or clocks here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from orbitmq.base.invariant import check
from orbitmq.model.enums import Perm
from orbitmq.model.topic import TopicConfig

MASTER_ID = 0
# TopicConfig.topicSysFlag bits used by the unit-topic queries (311-313)
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2

# A broker's DataVersion as compared by the name server: (timestamp, counter, state_version).
VersionStamp = tuple[int, ...]
# RIP-32 compatibleWithOldNameSrv: brokers read their member group from this topic's route (true ids needed)
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"


def state_version(stamp: VersionStamp | None) -> int:
    """A DataVersion stamp's stateVersion (the broker's master epoch in controller mode; 0 when absent)."""
    return stamp[2] if stamp is not None and len(stamp) > 2 else 0


@dataclass(slots=True)
class QueueInfo:
    """QueueData of one broker group for one topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class BrokerGroup:
    """BrokerData: the addresses of one broker name (id 0 = master)."""

    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)

    def copy(self) -> BrokerGroup:
        return BrokerGroup(self.cluster, self.broker_name, dict(self.addrs))

    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)


@dataclass(slots=True)
class LiveInfo:
    cluster: str
    broker_name: str
    broker_id: int
    last_update_ms: int
    data_version: VersionStamp | None
    channel: object
    ha_server_addr: str
    heartbeat_timeout_ms: int | None = None  # RIP-32: the broker's own expiry time (else the table's)
    enable_acting_master: bool = False  # RIP-32: the broker wants NOTIFY_MIN_BROKER_ID_CHANGE


@dataclass(slots=True)
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None
    first_registration: bool = False
    queue_data_rebuilt: bool = False
    rejected_by: str | None = None  # #6316: the live master (higher stateVersion) this registration lost to


@dataclass(slots=True)
class TopicRoute:
    queue_datas: list[QueueInfo]
    broker_groups: list[BrokerGroup]
    filter_servers: dict[str, list[str]]


@dataclass(slots=True)
class RemovedBroker:
    addr: str
    channel: object
    broker_name: str


@dataclass(slots=True)
class MinIdNotice:
    """NOTIFY_MIN_BROKER_ID_CHANGE (905) to send: the header fields and (addr, channel) of each recipient."""

    broker_name: str
    min_broker_id: int
    min_broker_addr: str
    offline_broker_addr: str | None
    ha_broker_addr: str | None
    targets: list[tuple[str, object]]

    def ext_fields(self) -> dict[str, str]:
        ext = {"brokerName": self.broker_name, "minBrokerId": str(self.min_broker_id),
               "minBrokerAddr": self.min_broker_addr}
        if self.offline_broker_addr:
            ext["offlineBrokerAddr"] = self.offline_broker_addr
        if self.ha_broker_addr:
            ext["haBrokerAddr"] = self.ha_broker_addr
        return ext


class RouteTable:
    """All routing state of one name server. Every mutation keeps the cross-table invariants."""

    def __init__(self, broker_channel_expired_time_ms: int = 120_000, *,
                 delete_topic_with_broker_registration: bool = False) -> None:
        self.expired_time_ms = broker_channel_expired_time_ms
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self._topics: dict[str, dict[str, QueueInfo]] = {}  # topic -> broker name -> queue data
        self._groups: dict[str, BrokerGroup] = {}  # broker name -> group
        self._clusters: dict[str, set[str]] = {}  # cluster -> broker names
        self._live: dict[str, LiveInfo] = {}  # broker addr -> liveness
        self._filter_servers: dict[str, list[str]] = {}  # broker addr -> filter servers
        self._min_member: dict[str, tuple[int, str]] = {}  # broker name -> (smallest live id, its addr)
        self._notices: list[MinIdNotice] = []  # 905s not yet taken by drain_notices()

    # ---- registration -------------------------------------------------------------------------------
    def register(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: VersionStamp | None,
        topic_configs: Iterable[TopicConfig] | None,
        now_ms: int,
        channel: object = None,
        filter_servers: list[str] | None = None,
        heartbeat_timeout_ms: int | None = None,
        enable_acting_master: bool = False,
    ) -> RegisterResult:
        """REGISTER_BROKER. Queue data is rebuilt from a master's topics on its first registration or when
        its DataVersion differs from the one last seen for this address. `heartbeat_timeout_ms` (RIP-32) is
        this broker's own expiry time; `enable_acting_master` makes it a recipient of min-id notices.

        Master epoch fencing (#6316): a registration as id 0 of a group whose id 0 is another live address with a
        higher DataVersion stateVersion (the master epoch in controller mode) is refused: the table forgets the
        registrant's address (like Java) and returns `rejected_by` = the holder's address."""
        if broker_id == MASTER_ID:
            holder = self._stronger_master(broker_name, broker_addr, data_version, now_ms)
            if holder is not None:
                if broker_addr in self._live:
                    self._remove_addr(broker_addr)
                return RegisterResult(rejected_by=holder)
        result = RegisterResult()
        prev = self._live.get(broker_addr)
        if prev is not None and prev.broker_name != broker_name:
            self._remove_addr(broker_addr)  # the address now serves another broker name
        self._clusters.setdefault(cluster, set()).add(broker_name)
        group = self._groups.get(broker_name)
        first = group is None
        if group is None:
            group = BrokerGroup(cluster, broker_name)
            self._groups[broker_name] = group
        elif group.cluster != cluster:
            # the group moved to another cluster: keep cluster membership consistent
            self._discard_cluster_member(group.cluster, broker_name)
            group.cluster = cluster
        # one id per address: a slave promoted in place (same ip:port, id 1 -> 0) drops its old entry
        for bid in [bid for bid, addr in group.addrs.items() if addr == broker_addr and bid != broker_id]:
            del group.addrs[bid]
        old_addr = group.addrs.get(broker_id)
        replaced = None
        if old_addr is not None and old_addr != broker_addr:
            # another process took this id: forget the previous one's liveness
            self._live.pop(old_addr, None)
            self._filter_servers.pop(old_addr, None)
            replaced = old_addr
        group.addrs[broker_id] = broker_addr
        first = first or old_addr is None
        result.first_registration = first

        if topic_configs is not None and broker_id == MASTER_ID:
            if first or self.is_data_version_changed(broker_addr, data_version):
                self._rebuild_queue_data(broker_name, topic_configs)
                result.queue_data_rebuilt = True

        timeout = heartbeat_timeout_ms if heartbeat_timeout_ms is not None and heartbeat_timeout_ms > 0 else None
        self._live[broker_addr] = LiveInfo(cluster, broker_name, broker_id, now_ms, data_version, channel,
                                           ha_server_addr, timeout, enable_acting_master)
        if filter_servers is not None:
            if filter_servers:
                self._filter_servers[broker_addr] = list(filter_servers)
            else:
                self._filter_servers.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master = group.addrs.get(MASTER_ID)
            if master is not None:
                master_live = self._live.get(master)
                if master_live is not None:
                    result.ha_server_addr = master_live.ha_server_addr
                    result.master_addr = master
        self._check_group(broker_name)
        self._note_min_member(broker_name, offline_addr=replaced, registrant=broker_addr)
        return result

    def _stronger_master(self, broker_name: str, broker_addr: str, data_version: VersionStamp | None,
                         now_ms: int) -> str | None:
        """The address of the group's current id 0 when it is another, unexpired broker whose stateVersion is
        higher than `data_version`'s; None when the registration may take id 0."""
        group = self._groups.get(broker_name)
        holder = None if group is None else group.addrs.get(MASTER_ID)
        if holder is None or holder == broker_addr:
            return None
        live = self._live.get(holder)
        if live is None or live.last_update_ms < now_ms - self.timeout_of(live):
            return None  # silent past its expiry time: the next scan removes it anyway
        return holder if state_version(live.data_version) > state_version(data_version) else None

    def _rebuild_queue_data(self, broker_name: str, topic_configs: Iterable[TopicConfig]) -> None:
        seen: set[str] = set()
        for tc in topic_configs:
            seen.add(tc.topic_name)
            qd = QueueInfo(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
            self._topics.setdefault(tc.topic_name, {})[broker_name] = qd
        if self.delete_topic_with_broker_registration:
            for topic in [t for t, by_broker in self._topics.items() if broker_name in by_broker and t not in seen]:
                self._remove_queue_data(topic, broker_name)

    def is_data_version_changed(self, broker_addr: str, data_version: VersionStamp | None) -> bool:
        live = self._live.get(broker_addr)
        return live is None or live.data_version != data_version

    def data_version_of(self, broker_addr: str) -> VersionStamp | None:
        live = self._live.get(broker_addr)
        return None if live is None else live.data_version

    def touch(self, broker_addr: str, now_ms: int, heartbeat_timeout_ms: int | None = None) -> bool:
        """Refresh a live broker's last-update time (QUERY_DATA_VERSION with no change, BROKER_HEARTBEAT);
        a positive `heartbeat_timeout_ms` replaces the broker's own expiry time."""
        live = self._live.get(broker_addr)
        if live is None:
            return False
        live.last_update_ms = now_ms
        if heartbeat_timeout_ms is not None and heartbeat_timeout_ms > 0:
            live.heartbeat_timeout_ms = heartbeat_timeout_ms
        return True

    def unregister(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """UNREGISTER_BROKER. Removes `broker_addr` from the group it is registered in, whatever id it holds
        now; a stale unregister naming another group is ignored. Returns True if anything was removed."""
        live = self._live.get(broker_addr)
        if live is None or live.broker_name != broker_name:
            return False
        self._remove_addr(broker_addr)
        return True

    def on_channel_closed(self, channel: object) -> list[RemovedBroker]:
        """The connection a broker registered over is gone: remove that broker now."""
        if channel is None:
            return []
        addrs = [addr for addr, live in self._live.items() if live.channel is channel]
        return [self._remove_addr(addr) for addr in addrs]

    def timeout_of(self, live: LiveInfo) -> int:
        """How long `live` may stay silent: its own heartbeatTimeoutMillis, else brokerChannelExpiredTime."""
        return live.heartbeat_timeout_ms if live.heartbeat_timeout_ms is not None else self.expired_time_ms

    def expire(self, now_ms: int) -> list[RemovedBroker]:
        """Remove brokers silent for longer than their expiry time; the caller closes their channels."""
        stale = [addr for addr, live in self._live.items() if live.last_update_ms < now_ms - self.timeout_of(live)]
        return [self._remove_addr(addr) for addr in stale]

    def _remove_addr(self, addr: str) -> RemovedBroker:
        live = self._live.pop(addr)
        self._filter_servers.pop(addr, None)
        group = self._groups.get(live.broker_name)
        if group is not None:
            for bid in [bid for bid, a in group.addrs.items() if a == addr]:
                del group.addrs[bid]
            if not group.addrs:
                self._remove_group(live.broker_name)
        self._note_min_member(live.broker_name, offline_addr=addr, registrant=None)
        return RemovedBroker(addr, live.channel, live.broker_name)

    # ---- RIP-32 min-id notices -----------------------------------------------------------------------
    def _note_min_member(self, broker_name: str, *, offline_addr: str | None, registrant: str | None) -> None:
        """After a membership change of `broker_name`: queue a 905 when its smallest live id (or that id's
        address) changed. Like Java, none when the group was just created or is now empty; recipients are the
        members registered with enableActingMaster, minus a newly registered min broker (it knows)."""
        group = self._groups.get(broker_name)
        prev = self._min_member.get(broker_name)
        if group is None or not group.addrs:
            self._min_member.pop(broker_name, None)
            return
        min_id = min(group.addrs)
        now = (min_id, group.addrs[min_id])
        self._min_member[broker_name] = now
        if prev is None or prev == now:
            return
        skip = registrant if offline_addr is None and len(group.addrs) > 1 and registrant == now[1] else None
        targets = []
        for addr in sorted(group.addrs.values()):
            live = self._live.get(addr)
            if live is not None and live.enable_acting_master and addr != skip:
                targets.append((addr, live.channel))
        if not targets:
            return
        min_live = self._live.get(now[1])
        ha = min_live.ha_server_addr if min_live is not None and min_id == MASTER_ID else None
        self._notices.append(MinIdNotice(broker_name, min_id, now[1], offline_addr, ha or None, targets))

    def drain_notices(self) -> list[MinIdNotice]:
        """The min-id notices queued since the last call, oldest first (the caller sends them)."""
        out, self._notices = self._notices, []
        return out

    def _remove_group(self, broker_name: str) -> None:
        group = self._groups.pop(broker_name)
        self._discard_cluster_member(group.cluster, broker_name)
        for topic in [t for t, by_broker in self._topics.items() if broker_name in by_broker]:
            self._remove_queue_data(topic, broker_name)

    def _discard_cluster_member(self, cluster: str, broker_name: str) -> None:
        members = self._clusters.get(cluster)
        if members is not None:
            members.discard(broker_name)
            if not members:
                del self._clusters[cluster]

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        by_broker = self._topics[topic]
        by_broker.pop(broker_name, None)
        if not by_broker:
            del self._topics[topic]

    # ---- queries -------------------------------------------------------------------------------------
    def route(self, topic: str, *, acting_master: bool = False) -> TopicRoute | None:
        """GET_ROUTEINFO_BY_TOPIC: None unless the topic has queue data and at least one live group.
        `acting_master` (supportActingMaster): see _apply_acting_master."""
        by_broker = self._topics.get(topic)
        if not by_broker:
            return None
        queue_datas: list[QueueInfo] = []
        groups: list[BrokerGroup] = []
        filter_servers: dict[str, list[str]] = {}
        for name in sorted(by_broker):
            qd = by_broker[name]
            queue_datas.append(QueueInfo(qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm,
                                         qd.topic_sys_flag))
            group = self._groups.get(name)
            if group is None:
                continue
            groups.append(group.copy())
            for addr in group.addrs.values():
                fs = self._filter_servers.get(addr)
                if fs:
                    filter_servers[addr] = list(fs)
        if not groups:
            return None
        route = TopicRoute(queue_datas, groups, filter_servers)
        if acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            self._apply_acting_master(route)
        return route

    def _apply_acting_master(self, route: TopicRoute) -> None:
        """RIP-32: a group without a live master whose smallest-id slave registered with enableActingMaster
        lists that slave as id 0 (and no longer under its own id), and its queue data loses PERM_WRITE, so
        unchanged clients send master-only reads to it but never send messages there."""
        for group in route.broker_groups:
            if not group.addrs or MASTER_ID in group.addrs:
                continue
            min_id = min(group.addrs)
            live = self._live.get(group.addrs[min_id])
            if live is None or not live.enable_acting_master:
                continue
            group.addrs[MASTER_ID] = group.addrs.pop(min_id)
            for qd in route.queue_datas:
                if qd.broker_name == group.broker_name:
                    qd.perm &= ~Perm.WRITE

    def cluster_info(self) -> tuple[dict[str, BrokerGroup], dict[str, list[str]]]:
        """GET_BROKER_CLUSTER_INFO: (broker name -> group, cluster -> sorted broker names)."""
        groups = {name: g.copy() for name, g in sorted(self._groups.items())}
        clusters = {c: sorted(names) for c, names in sorted(self._clusters.items())}
        return groups, clusters

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self._clusters.get(cluster, set())
        return sorted(t for t, by_broker in self._topics.items() if not names.isdisjoint(by_broker))

    def system_topics(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster names and broker names (each is a topic on its brokers),
        plus the address of one broker to ask for the rest."""
        out: list[str] = []
        for cluster, names in sorted(self._clusters.items()):
            out.append(cluster)
            out.extend(sorted(names))
        broker_addr = None
        for _, group in sorted(self._groups.items()):
            if group.addrs:
                broker_addr = group.addrs[min(group.addrs)]
                break
        return out, broker_addr

    def unit_topics(self, *, unit: bool | None, unit_sub: bool | None) -> list[str]:
        """Topics whose queue data sys flags match: unit=True/False/None (don't care), same for unit_sub."""
        out = []
        for topic, by_broker in self._topics.items():
            flags = 0
            for qd in by_broker.values():
                flags = qd.topic_sys_flag
                break
            if unit is not None and bool(flags & FLAG_UNIT) != unit:
                continue
            if unit_sub is not None and bool(flags & FLAG_UNIT_SUB) != unit_sub:
                continue
            out.append(topic)
        return sorted(out)

    def live_brokers(self) -> dict[str, LiveInfo]:
        return dict(self._live)

    def member_group(self, broker_name: str) -> dict[int, str]:
        """GET_BROKER_MEMBER_GROUP: live members of a group, id -> address (true ids; empty if unknown)."""
        g = self._groups.get(broker_name)
        return {} if g is None else dict(sorted(g.addrs.items()))

    def group(self, broker_name: str) -> BrokerGroup | None:
        g = self._groups.get(broker_name)
        return None if g is None else g.copy()

    # ---- admin mutations -----------------------------------------------------------------------------
    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """DELETE_TOPIC_IN_NAMESRV: the whole topic, or only its queue data on brokers of `cluster`."""
        by_broker = self._topics.get(topic)
        if by_broker is None:
            return False
        if not cluster:
            del self._topics[topic]
            return True
        names = self._clusters.get(cluster, set())
        hit = [name for name in by_broker if name in names]
        for name in hit:
            self._remove_queue_data(topic, name)
        return bool(hit)

    def wipe_write_perm(self, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER: clear PERM_WRITE on every topic of the broker; returns the count."""
        count = 0
        for by_broker in self._topics.values():
            qd = by_broker.get(broker_name)
            if qd is not None:
                qd.perm &= ~Perm.WRITE
                count += 1
        return count

    def add_write_perm(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: set read+write on every topic of the broker; returns the count."""
        count = 0
        for by_broker in self._topics.values():
            qd = by_broker.get(broker_name)
            if qd is not None:
                qd.perm = Perm.READ | Perm.WRITE
                count += 1
        return count

    # ---- invariants ----------------------------------------------------------------------------------
    def _check_group(self, broker_name: str) -> None:
        group = self._groups[broker_name]
        check(bool(group.addrs), f"broker group {broker_name} has no address")
        check(broker_name in self._clusters.get(group.cluster, ()),
              f"broker group {broker_name} missing from cluster {group.cluster}")
        check(len(set(group.addrs.values())) == len(group.addrs), f"duplicate address in group {broker_name}")

    def check_invariants(self) -> None:
        """Full consistency check (tests call it after every step)."""
        for name in self._groups:
            self._check_group(name)
        for cluster, names in self._clusters.items():
            check(bool(names), f"empty cluster {cluster}")
            for name in names:
                check(name in self._groups and self._groups[name].cluster == cluster,
                      f"cluster {cluster} lists unknown group {name}")
        for addr, live in self._live.items():
            group = self._groups.get(live.broker_name)
            check(group is not None and addr in group.addrs.values(), f"live broker {addr} not in its group")
        for name, group in self._groups.items():
            for addr in group.addrs.values():
                check(addr in self._live, f"address {addr} of group {name} has no liveness entry")
        for topic, by_broker in self._topics.items():
            check(bool(by_broker), f"topic {topic} without queue data")
        for name, (min_id, addr) in self._min_member.items():
            group = self._groups.get(name)
            check(group is not None and min(group.addrs) == min_id and group.addrs[min_id] == addr,
                  f"stale min member {min_id}={addr} recorded for group {name}")
