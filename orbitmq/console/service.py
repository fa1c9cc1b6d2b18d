"""What each console page shows, as JSON-able dicts, built from the SDK `Admin`, `ConsoleQueries` and a `Producer`
(DLQ resend). Also the TPS sampler: the broker keeps no per-topic TPS history, so the console samples the topics
a page looks at (sum of their queues' max offsets) every `sample_interval_s` and serves the differences.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orbitmq.base.clock import now_ms
from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin, Producer
from orbitmq.client.errors import NoRouteError, QueryNotFoundError, TopicNotExistError
from orbitmq.console import queries
from orbitmq.console.config import ConsoleConfig
from orbitmq.console.queries import is_system_group
from orbitmq.model import Message, MessageExt, Prop
from orbitmq.model.enums import perm_to_string
from orbitmq.model.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)

INSTANCE_NAME = "orbitmq-console"
RESEND_PRODUCER_GROUP = "CONSOLE_RESEND_PRODUCER"
BODY_PREVIEW_BYTES = 4096
FAN_OUT = 16  # concurrent per-topic / per-group requests of a list page
T = TypeVar("T")
R = TypeVar("R")
LEASE_KEYS = ("leaseState", "leaseEpoch", "leaseRemainingMs", "leaseMaster")  # lease-mode runtime-info keys
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                           "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
                           "rmq_sys_wheel_timer", "BenchmarkTest"})
# properties a resent copy must not inherit: the broker's own bookkeeping and the original's identity
_RESEND_DROP = frozenset({Prop.UNIQ_KEY, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.REAL_TOPIC, Prop.REAL_QID, Prop.DELAY,
                          Prop.TRAN_MSG, Prop.PGROUP, Prop.RECONSUME_TIME, Prop.MAX_RECONSUME_TIMES,
                          Prop.CONSUME_START_TIME, Prop.TRANSACTION_CHECK_TIMES, Prop.TIMER_DELIVER_MS,
                          Prop.TIMER_DELAY_SEC, Prop.START_DELIVER_TIME, Prop.POP_CK, Prop.CLUSTER})


def topic_kind(topic: str) -> str:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "RETRY"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "DLQ"
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic.startswith("RMQ_SYS_"):
        return "SYSTEM"
    return "NORMAL"


def message_json(m: MessageExt, broker_name: str | None = None, body_limit: int = BODY_PREVIEW_BYTES) -> dict[str, Any]:
    body = m.body[:body_limit]
    return {
        "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "brokerName": broker_name,
        "queueId": m.queue_id, "queueOffset": m.queue_offset, "tags": m.tags, "keys": m.keys,
        "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp, "bornHost": m.born_host,
        "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times, "bodySize": len(m.body),
        "body": body.decode("utf-8", "replace"), "bodyTruncated": len(m.body) > body_limit,
        "properties": dict(sorted(m.properties.items())),
    }


def _number(text: str | None) -> float | str:
    """The first number of a runtime-info value ('12.5 10.0 9.1' TPS triples), else the text or '-'."""
    if not text:
        return "-"
    try:
        return round(float(text.split()[0]), 2)
    except ValueError:
        return text


def _today(ri: dict[str, str], what: str) -> int | str:
    try:
        return int(ri[f"msg{what}TotalTodayNow"]) - int(ri[f"msg{what}TotalTodayMorning"])
    except (KeyError, ValueError):
        return "-"


def broker_row(member: tuple[str, str, int, str], ri: dict[str, str], master: dict[str, str]) -> dict[str, Any]:
    """One broker of the cluster page from its GET_BROKER_RUNTIME_INFO (`ri`, {} when it did not answer) and its
    group master's. Replication lag: a slave's distance to its master's CommitLog end; a master's slowest slave
    (haSlaveLagBytes). inSync: the member's id is in the SyncStateSet its master reports (controller mode)."""
    cluster, name, bid, addr = member
    lag: int | str = "-"
    if ri.get("brokerRole") == "SLAVE":
        with contextlib.suppress(KeyError, ValueError):
            lag = max(0, int(master["commitLogMaxOffset"]) - int(ri["commitLogMaxOffset"]))
    elif ri.get("haSlaveLagBytes", "").isdigit():
        lag = int(ri["haSlaveLagBytes"])
    in_sync = "-"
    if "syncStateSet" in master:
        ids = {x.strip() for x in master["syncStateSet"].replace(";", ",").split(",")}
        in_sync = "yes" if bid == 0 or str(bid) in ids else "no"
    row: dict[str, Any] = {
        "cluster": cluster, "brokerName": name, "BID": bid, "addr": addr, "online": bool(ri),
        "version": ri.get("brokerVersionDesc", "-"), "role": ri.get("brokerRole", "-"),
        "inTPS": _number(ri.get("putTps")), "outTPS": _number(ri.get("getTransferedTps")),
        "putToday": _today(ri, "Put"), "getToday": _today(ri, "Get"), "lagBytes": lag,
        "actingMaster": ri.get("actingMaster", "-"), "minBID": ri.get("minBrokerId", "-"),
        "epoch": ri.get("masterEpoch", "-"), "syncStateSet": ri.get("syncStateSet", "-"), "inSync": in_sync,
        "commitLogMaxOffset": ri.get("commitLogMaxOffset", "-"), "diskRatio": ri.get("commitLogDiskRatio", "-"),
    }
    row.update({k: ri.get(k, "-") for k in LEASE_KEYS})
    return row


async def bounded_gather(fn: Callable[[T], Awaitable[R]], items: list[T], limit: int = FAN_OUT) -> list[R]:
    """fn over every item, at most `limit` at a time (a list page on thousands of topics must not open thousands of
    requests at once); results in the items' order."""
    sem = asyncio.Semaphore(limit)

    async def one(item: T) -> R:
        async with sem:
            return await fn(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


@dataclass
class TpsSampler:
    """Per topic: (monotonic ms, total messages) samples; TPS between consecutive samples."""

    keep: int = 120
    watch_s: float = 300.0
    samples: dict[str, deque[tuple[int, int]]] = field(default_factory=dict)
    watched: dict[str, float] = field(default_factory=dict)

    def watch(self, topic: str) -> None:
        self.watched[topic] = time.monotonic()

    def topics(self) -> list[str]:
        cutoff = time.monotonic() - self.watch_s
        for t in [t for t, at in self.watched.items() if at < cutoff]:
            del self.watched[t]
        return sorted(self.watched)

    def record(self, topic: str, total: int, at_ms: int | None = None) -> None:
        d = self.samples.setdefault(topic, deque(maxlen=self.keep))
        at = now_ms() if at_ms is None else at_ms
        if d and at <= d[-1][0]:
            return
        d.append((at, total))

    def series(self, topic: str) -> list[dict[str, float]]:
        """[{t: wall ms, tps}] between consecutive samples (a total that went down, e.g. a deleted and recreated
        topic, counts as 0)."""
        d = list(self.samples.get(topic, ()))
        return [{"t": b[0], "tps": round(max(0, b[1] - a[1]) * 1000.0 / (b[0] - a[0]), 2)}
                for a, b in zip(d, d[1:], strict=False)]


class ConsoleService:
    def __init__(self, cfg: ConsoleConfig) -> None:
        self.cfg = cfg
        # with an access key every request is signed (RocketMQ ACL); admin and resend producer share one instance
        self.admin = Admin(cfg.namesrv, instance_name=INSTANCE_NAME, access_key=cfg.access_key,
                           secret_key=cfg.secret_key)
        self.sampler = TpsSampler()
        self._producer: Producer | None = None
        self._sampling: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.admin.start()
        self._sampling = asyncio.create_task(self._sample_loop(), name="console-tps-sampler")

    async def close(self) -> None:
        task, self._sampling = self._sampling, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.shutdown()
        await self.admin.close()

    # ---- TPS ------------------------------------------------------------------------------------------------
    async def _sample_loop(self) -> None:
        while True:
            for topic in self.sampler.topics():
                try:
                    self.sampler.record(topic, await self._total_messages(topic))
                except OrbitMQError as e:
                    log.debug("tps sample of %s failed: %s", topic, e)
            await asyncio.sleep(self.cfg.sample_interval_s)

    async def _total_messages(self, topic: str) -> int:
        return sum(mx for _, _, mx, _ in await self.admin.topic_status(topic))

    # ---- cluster --------------------------------------------------------------------------------------------
    async def _runtime(self, addr: str) -> dict[str, str]:
        try:
            return await self.admin.broker_runtime_info(addr)
        except OrbitMQError:
            return {}

    async def cluster(self) -> dict[str, Any]:
        members = await self.admin.cluster_brokers()
        infos = list(await asyncio.gather(*(self._runtime(m[3]) for m in members)))
        master_info = {m[1]: ri for m, ri in zip(members, infos, strict=True) if m[2] == 0}
        brokers = [broker_row(m, ri, master_info.get(m[1], {})) for m, ri in zip(members, infos, strict=True)]
        columns = [c for c in ("epoch", "inSync", *LEASE_KEYS) if any(b.get(c) not in (None, "-") for b in brokers)]
        return {"namesrv": self.cfg.namesrv, "columns": columns, "brokers": brokers}

    async def broker_addr_names(self) -> dict[str, str]:
        return {addr: name for _, name, _, addr in await self.admin.cluster_brokers()}

    # ---- topics ---------------------------------------------------------------------------------------------
    async def topics(self, include_system: bool = False) -> list[dict[str, Any]]:
        """Every topic with its queue and message counts. Besides the well-known system topics, the topics a
        broker registers under its cluster and broker names (and <cluster>_REPLY_TOPIC) count as SYSTEM."""
        server_names: set[str] = set()
        for cluster_name, broker_name, _, _ in await self.admin.cluster_brokers():
            server_names.update((cluster_name, broker_name, f"{cluster_name}_REPLY_TOPIC"))

        def kind(topic: str) -> str:
            return "SYSTEM" if topic in server_names else topic_kind(topic)

        names = [t for t in await self.admin.topic_list() if include_system or kind(t) != "SYSTEM"]

        async def one(topic: str) -> dict[str, Any]:
            try:
                status = await self.admin.topic_status(topic)
            except OrbitMQError as e:
                return {"topic": topic, "kind": kind(topic), "queues": 0, "messages": None, "error": str(e)}
            return {"topic": topic, "kind": kind(topic), "queues": len(status),
                    "messages": sum(mx - mn for _, mn, mx, _ in status),
                    "lastUpdated": max((ts for *_, ts in status), default=0)}

        return await bounded_gather(one, names)

    async def create_topic(self, topic: str, read_queues: int, write_queues: int, perm: int) -> list[str]:
        return await self.admin.update_topic(topic, read_queue_nums=read_queues, write_queue_nums=write_queues,
                                             perm=perm)

    async def topic(self, topic: str) -> dict[str, Any]:
        self.sampler.watch(topic)
        route = await self.admin.topic_route(topic)
        status = await self.admin.topic_status(topic)
        self.sampler.record(topic, sum(mx for _, _, mx, _ in status))
        groups = await self._topic_groups(topic)
        return {
            "topic": topic, "kind": topic_kind(topic),
            "route": [{"brokerName": q.broker_name, "readQueues": q.read_queue_nums, "writeQueues": q.write_queue_nums,
                       "perm": perm_to_string(q.perm)} for q in route.queue_datas],
            "brokers": [{"brokerName": bd.broker_name, "cluster": bd.cluster,
                         "addrs": {str(k): v for k, v in sorted(bd.broker_addrs.items())}} for bd in route.broker_datas],
            "queues": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "minOffset": mn, "maxOffset": mx,
                        "messages": mx - mn, "lastUpdated": ts} for mq, mn, mx, ts in status],
            "messages": sum(mx - mn for _, mn, mx, _ in status),
            "consumerGroups": groups,
            "tps": self.sampler.series(topic),
            "sampleIntervalSeconds": self.cfg.sample_interval_s,
        }

    # ---- consumer groups ------------------------------------------------------------------------------------
    async def _group_names(self) -> list[str]:
        names: set[str] = set()
        for _, _, bid, addr in await self.admin.cluster_brokers():
            if bid == 0:
                with contextlib.suppress(OrbitMQError):
                    names.update(await queries.subscription_groups(self.admin, addr))
        for t in await self.admin.topic_list():
            if t.startswith(RETRY_GROUP_TOPIC_PREFIX):
                names.add(t[len(RETRY_GROUP_TOPIC_PREFIX):])
        return sorted(g for g in names if not is_system_group(g))

    async def _topic_groups(self, topic: str) -> list[str]:
        """Consumer groups of a topic (online or holding offsets), system groups left out; [] when unknown."""
        try:
            return [g for g in await self.admin.topic_consumer_groups(topic) if not is_system_group(g)]
        except OrbitMQError:
            return []

    async def _connections(self, group: str) -> dict[str, Any] | None:
        try:
            cc = await self.admin.consumer_connections(group)
        except OrbitMQError:
            return None
        return {
            "consumeType": cc.consume_type, "messageModel": cc.message_model, "consumeFromWhere": cc.consume_from_where,
            "connections": [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language,
                             "version": c.version} for c in cc.connection_set],
            "subscriptions": sorted(cc.subscription_table),
        }

    async def _progress(self, group: str, topic: str | None = None) -> dict[str, Any]:
        """Admin.group_progress as JSON: queues, consume TPS, and the broker groups that did not answer (a lag
        total that silently left a broker out would mislead)."""
        gp = await self.admin.group_progress(group, topic)
        return {
            "queues": [{"topic": q.mq.topic, "brokerName": q.mq.broker_name, "queueId": q.mq.queue_id,
                        "brokerOffset": q.broker_offset, "consumerOffset": q.consumer_offset, "lag": q.lag,
                        "lastTimestamp": q.last_timestamp} for q in gp.queues],
            "consumeTps": round(gp.consume_tps, 2),
            "problems": [f"broker {p.broker_name} {p.addr}: {p.reason}".replace("  ", " ") for p in gp.problems],
        }

    async def groups(self) -> list[dict[str, Any]]:
        async def one(group: str) -> dict[str, Any]:
            conns = await self._connections(group)
            row: dict[str, Any] = {"group": group, "online": conns is not None,
                                   "clients": len(conns["connections"]) if conns else 0,
                                   "consumeType": conns["consumeType"] if conns else None,
                                   "messageModel": conns["messageModel"] if conns else None}
            try:
                p = await self._progress(group)
            except OrbitMQError as e:
                return {**row, "topics": [], "lag": None, "consumeTps": None, "problems": [str(e)]}
            return {**row, "topics": sorted({q["topic"] for q in p["queues"]}),
                    "lag": sum(q["lag"] for q in p["queues"]), "consumeTps": p["consumeTps"],
                    "problems": p["problems"]}

        return await bounded_gather(one, await self._group_names())

    async def group(self, group: str) -> dict[str, Any]:
        progress, conns = await asyncio.gather(self._progress(group), self._connections(group))
        return {"group": group, "online": conns is not None, "connection": conns, "progress": progress["queues"],
                "lag": sum(q["lag"] for q in progress["queues"]), "consumeTps": progress["consumeTps"],
                "problems": progress["problems"]}

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> list[dict[str, Any]]:
        table = await self.admin.reset_offset_by_time(group, topic, timestamp_ms)
        return [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                for mq, off in sorted(table.items(), key=lambda kv: kv[0])]

    # ---- messages -------------------------------------------------------------------------------------------
    async def _to_json(self, msgs: list[MessageExt]) -> list[dict[str, Any]]:
        names = await self.broker_addr_names()
        return [message_json(m, names.get(m.store_host)) for m in msgs]

    async def by_key(self, topic: str, key: str, begin_ms: int = 0, end_ms: int | None = None) -> list[dict[str, Any]]:
        msgs = await self.admin.query_msg_by_key(topic, key, self.cfg.max_messages, begin_ms, end_ms)
        return await self._to_json(msgs)

    async def by_id(self, msg_id: str, topic: str | None = None) -> dict[str, Any]:
        m = await self.admin.query_msg_by_id(msg_id, topic or None)
        names = await self.broker_addr_names()
        out = message_json(m, names.get(m.store_host), body_limit=64 * 1024)
        out["delivery"] = await self.delivery(m, names.get(m.store_host))
        return out

    async def by_time(self, topic: str, begin_ms: int, end_ms: int) -> list[dict[str, Any]]:
        """Every queue's messages stored in [begin, end] (offsets found by time), newest first, capped."""
        limit = self.cfg.max_messages
        found: list[tuple[str, MessageExt]] = []
        for mq, addr in await self.admin.topic_queues(topic):
            lo, hi = await self.admin.queue_range(mq, addr, begin_ms)
            # the offset found for `end` is that of the last message stored up to then: inclusive
            last, _ = await self.admin.queue_range(mq, addr, end_ms)
            hi = min(hi, last + 1)
            msgs = await queries.read_messages(self.admin, mq, addr, max(lo, hi - limit), hi, limit)
            found.extend((mq.broker_name, m) for m in msgs if begin_ms <= m.store_timestamp <= end_ms)
        found.sort(key=lambda bm: bm[1].store_timestamp, reverse=True)
        return [message_json(m, name) for name, m in found[:limit]]

    async def delivery(self, m: MessageExt, broker_name: str | None) -> list[dict[str, Any]]:
        """Per consumer group of the topic: CONSUMED when the group's committed offset of the message's queue is
        past it, else NOT_CONSUMED_YET; online tells whether any client of the group is connected."""
        if m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return []
        out = []
        for g in await self._topic_groups(m.topic):
            try:
                progress = (await self._progress(g, m.topic))["queues"]
            except OrbitMQError:
                progress = []
            conns = await self._connections(g)
            row = next((p for p in progress if p["queueId"] == m.queue_id
                        and (broker_name is None or p["brokerName"] == broker_name)), None)
            status = "UNKNOWN" if row is None else ("CONSUMED" if row["consumerOffset"] > m.queue_offset
                                                    else "NOT_CONSUMED_YET")
            out.append({"group": g, "status": status, "online": conns is not None,
                        "consumerOffset": None if row is None else row["consumerOffset"]})
        return out

    # ---- dead letters ---------------------------------------------------------------------------------------
    async def dlq(self, group: str) -> dict[str, Any]:
        """The newest messages of %DLQ%<group> (up to maxMessages), newest first."""
        topic = DLQ_GROUP_TOPIC_PREFIX + group
        try:
            status = await self.admin.topic_status(topic)
        except (TopicNotExistError, NoRouteError):  # created by the first dead letter
            return {"group": group, "topic": topic, "total": 0, "messages": [],
                    "note": f"{topic} does not exist: no message of {group} went dead yet"}
        limit = self.cfg.max_messages
        names = {v: k for k, v in (await self.broker_addr_names()).items()}
        found: list[dict[str, Any]] = []
        for mq, mn, mx, _ in status:
            addr = names.get(mq.broker_name)
            if addr is None:
                continue
            for m in await queries.read_messages(self.admin, mq, addr, max(mn, mx - limit), mx, limit):
                found.append(message_json(m, mq.broker_name))
        found.sort(key=lambda d: d["storeTimestamp"], reverse=True)
        return {"group": group, "topic": topic, "total": sum(mx - mn for _, mn, mx, _ in status),
                "messages": found[:limit]}

    async def _resend_producer(self) -> Producer:
        if self._producer is None:
            p = Producer(RESEND_PRODUCER_GROUP, self.cfg.namesrv, instance_name=INSTANCE_NAME,
                         access_key=self.cfg.access_key, secret_key=self.cfg.secret_key)
            await p.start()
            self._producer = p
        return self._producer

    async def resend(self, group: str, msg_id: str, target: str = "retry") -> dict[str, Any]:
        """Send a copy of a dead letter again: to %RETRY%<group> (`retry`: only this group consumes it again,
        under its original topic) or to its original topic (`topic`: every subscribed group gets it). The copy
        gets a fresh UNIQ_KEY (so de-duplication cannot drop it) and ORIGIN_MESSAGE_ID naming the dead letter."""
        if target not in ("retry", "topic"):
            raise ValueError("target must be 'retry' or 'topic'")
        m = await self.admin.query_msg_by_id(msg_id)
        if m.topic != DLQ_GROUP_TOPIC_PREFIX + group:
            raise QueryNotFoundError(f"message {msg_id} is in {m.topic}, not in {DLQ_GROUP_TOPIC_PREFIX}{group}")
        original = m.properties.get(Prop.RETRY_TOPIC) or m.properties.get(Prop.REAL_TOPIC)
        if not original or original.startswith(DLQ_GROUP_TOPIC_PREFIX):
            raise QueryNotFoundError(f"message {msg_id} names no original topic (RETRY_TOPIC)")
        props = {k: v for k, v in m.properties.items() if k not in _RESEND_DROP}
        props[Prop.RETRY_TOPIC] = original
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, m.msg_id)
        dest = RETRY_GROUP_TOPIC_PREFIX + group if target == "retry" else original
        result = await (await self._resend_producer()).send(Message(dest, m.body, props, m.flag))
        return {"msgId": result.msg_id, "topic": dest, "originalTopic": original, "status": result.status.name,
                "brokerName": result.message_queue.broker_name, "queueId": result.message_queue.queue_id,
                "queueOffset": result.queue_offset}

    # ---- controllers ----------------------------------------------------------------------------------------
    async def controller(self) -> dict[str, Any]:
        """Each configured controller's metadata, the leader's SyncStateSets of every broker name, and what the
        brokers themselves report (epoch, SyncStateSet, acting master) so the page has something without
        controllers too."""
        cluster = await self.cluster()
        names = sorted({b["brokerName"] for b in cluster["brokers"]})
        nodes: list[dict[str, Any]] = []
        leader: str | None = None
        for addr in self.cfg.controllers:
            try:
                meta = await queries.controller_metadata(self.admin, addr)
            except OrbitMQError as e:
                nodes.append({"addr": addr, "error": str(e)})
                continue
            nodes.append({"addr": addr, "group": meta.group, "leaderId": meta.controller_leader_id,
                          "leaderAddress": meta.controller_leader_address, "isLeader": meta.is_leader,
                          "peers": meta.peers})
            if meta.is_leader:
                leader = addr
            leader = leader or meta.controller_leader_address or None
        sync: list[dict[str, Any]] = []
        error = None
        if leader and names:
            try:
                info = await queries.sync_state_data(self.admin, leader, names)
                for name, ri in sorted(info.replicas_info_table.items()):
                    sync.append({"brokerName": name, "masterBrokerId": ri.master_broker_id,
                                 "masterAddress": ri.master_address, "masterEpoch": ri.master_epoch,
                                 "syncStateSetEpoch": ri.sync_state_set_epoch,
                                 "inSync": [{"brokerId": r.broker_id, "addr": r.broker_address, "alive": r.alive}
                                            for r in ri.in_sync_replicas],
                                 "notInSync": [{"brokerId": r.broker_id, "addr": r.broker_address, "alive": r.alive}
                                               for r in ri.not_in_sync_replicas]})
            except OrbitMQError as e:
                error = str(e)
        return {"controllers": nodes, "leader": leader, "syncStateSets": sync, "error": error,
                "brokers": cluster["brokers"]}
