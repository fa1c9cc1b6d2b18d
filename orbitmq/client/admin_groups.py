"""Consumer- and producer-group administration of the SDK's admin client: progress (with the brokers that could
not answer named, never silently left out), connections, subscription groups, offset reset and clone, and the
per-broker / per-topic consumption statistics of mqadmin's brokerConsumeStats and statsAll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orbitmq.base.errors import OrbitMQError, RemotingError
from orbitmq.client import broker_api
from orbitmq.client.admin_base import AdminBase, AdminError
from orbitmq.client.admin_messages import offset_id_address
from orbitmq.client.errors import ConsumerNotOnlineError, ResponseError, TopicNotExistError
from orbitmq.model import MessageQueue
from orbitmq.protocol import RequestCode, ResponseCode, fastjson
from orbitmq.protocol.bodies import (
    BrokerData,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    ProducerConnection,
    ResetOffsetBody,
    TopicStatsTable,
)
from orbitmq.protocol.bodies.consume_stats_list import ConsumeStatsList

MIXALL_RETRY_PREFIX = "%RETRY%"
MIXALL_DLQ_PREFIX = "%DLQ%"


@dataclass(slots=True)
class QueueProgress:
    mq: MessageQueue
    broker_offset: int
    consumer_offset: int
    lag: int
    last_timestamp: int
    source: str = ""  # the address that answered


@dataclass(slots=True)
class BrokerProblem:
    broker_name: str
    addr: str
    reason: str
    error: BaseException | None = None


@dataclass(slots=True)
class GroupProgress:
    """consumerProgress of one group: queues, consume TPS, and every broker group that did not (fully) answer."""

    group: str
    queues: list[QueueProgress] = field(default_factory=list)
    consume_tps: float = 0.0
    problems: list[BrokerProblem] = field(default_factory=list)


@dataclass(slots=True)
class ConsumerRunningInfo:
    """A consumer client's GET_CONSUMER_RUNNING_INFO answer: its properties, subscriptions and, per queue it
    holds, the process-queue state (commitOffset, cachedMsgCount, lastPullTimestamp, ...)."""

    properties: dict[str, str]
    subscriptions: list[dict[str, Any]]
    mq_table: list[tuple[MessageQueue, dict[str, Any]]]
    status_table: dict[str, Any]

    @classmethod
    def from_json(cls, body: bytes | None) -> ConsumerRunningInfo:
        d = fastjson.loads(body) if body else {}
        raw = d.get("mqTable") or {}
        pairs = raw if isinstance(raw, list) else list(raw.items())
        table = [(k if isinstance(k, MessageQueue) else MessageQueue.from_json_obj(dict(k)), dict(v or {}))
                 for k, v in pairs]
        return cls({str(k): str(v) for k, v in (d.get("properties") or {}).items()},
                   list(d.get("subscriptionSet") or []), sorted(table, key=lambda kv: kv[0]),
                   dict(d.get("statusTable") or {}))


def subscription_group_body(group: str, *, consume_enable: bool = True, consume_from_min_enable: bool = True,
                            consume_broadcast_enable: bool = True, consume_message_orderly: bool = False,
                            retry_queue_nums: int = 1, retry_max_times: int = 16, broker_id: int = 0,
                            which_broker_when_consume_slowly: int = 1,
                            notify_consumer_ids_changed_enable: bool = True) -> dict[str, Any]:
    """A SubscriptionGroupConfig in its Java JSON field names."""
    return {"groupName": group, "consumeEnable": consume_enable, "consumeFromMinEnable": consume_from_min_enable,
            "consumeBroadcastEnable": consume_broadcast_enable, "consumeMessageOrderly": consume_message_orderly,
            "retryQueueNums": retry_queue_nums, "retryMaxTimes": retry_max_times, "brokerId": broker_id,
            "whichBrokerWhenConsumeSlowly": which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": notify_consumer_ids_changed_enable}


class GroupAdmin(AdminBase):
    # ---- progress -----------------------------------------------------------------------------------------
    async def _group_broker_datas(self, group: str, topic: str | None) -> list[BrokerData]:
        """Broker groups to ask about a consumer group: the topic's, else those hosting %RETRY%<group>, else
        every registered broker group."""
        if topic:
            return await self.topic_brokers(topic)
        try:
            bds = await self.topic_brokers(f"{MIXALL_RETRY_PREFIX}{group}")
        except TopicNotExistError:
            bds = []
        if bds:
            return bds
        info = await self.cluster_info()
        return sorted(info.broker_addr_table.values(), key=lambda b: b.broker_name)

    async def group_progress(self, group: str, topic: str | None = None) -> GroupProgress:
        """GET_CONSUME_STATS on every broker group of the consumer group. A group whose master is not registered
        is answered by its first reachable slave (noted as a problem); one that cannot be reached at all is a
        problem naming the broker and the error. Answers with an error code are problems too."""
        out = GroupProgress(group)
        # broker groups are asked concurrently: a hung one costs one timeout, not one per group
        parts = await asyncio.gather(*(self._broker_progress(bd, group, topic)
                                       for bd in await self._group_broker_datas(group, topic)))
        for part in parts:
            out.queues += part.queues
            out.consume_tps += part.consume_tps
            out.problems += part.problems
        out.queues.sort(key=lambda q: (q.mq.topic, q.mq.broker_name, q.mq.queue_id))
        return out

    async def _broker_progress(self, bd: BrokerData, group: str, topic: str | None) -> GroupProgress:
        out = GroupProgress(group)
        master = bd.master_addr()
        addrs = [master] if master else [a for _, a in sorted(bd.broker_addrs.items())]
        if not master:
            out.problems.append(BrokerProblem(bd.broker_name, "", "no master registered with the name server"
                                              + ("; offsets read from its slave" if addrs else "")))
        for addr in addrs:
            try:
                await self._progress_of(out, bd.broker_name, addr, group, topic)
                break
            except RemotingError as e:
                out.queues = [q for q in out.queues if q.source != addr]  # nothing half-read from it
                out.problems.append(BrokerProblem(bd.broker_name, addr, f"unreachable: {e}", e))
        return out

    async def _progress_of(self, out: GroupProgress, broker_name: str, addr: str, group: str,
                           topic: str | None) -> None:
        # No topic: the broker reports the topics with committed offsets; add what online members subscribe to,
        # so a group shows up before its first offset commit.
        topics: list[str | None] = [topic] if topic else [None, *await self._subscribed_topics(addr, group)]
        seen: set[MessageQueue] = {q.mq for q in out.queues}
        for t in topics:
            try:
                resp = await self.request(addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": t})
            except ResponseError as e:
                out.problems.append(BrokerProblem(broker_name, addr, str(e.remark or e), e))
                continue
            stats = ConsumeStats.from_json(resp.body)
            for mq, w in stats.offset_table.items():
                if mq in seen:
                    continue
                seen.add(mq)
                lag = max(0, w.broker_offset - max(w.consumer_offset, 0))
                out.queues.append(QueueProgress(mq, w.broker_offset, w.consumer_offset, lag, w.last_timestamp, addr))
            if t is None or topic:
                out.consume_tps += stats.consume_tps

    async def _subscribed_topics(self, addr: str, group: str) -> list[str]:
        try:
            resp = await self.request(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        except ResponseError:
            return []  # CONSUMER_NOT_ONLINE: nobody connected
        conn = ConsumerConnection.from_json(resp.body)
        return sorted(t for t in conn.subscription_table if not t.startswith(MIXALL_RETRY_PREFIX))

    async def consumer_progress(self, group: str, topic: str | None = None
                                ) -> list[tuple[MessageQueue, int, int, int, int]]:
        """(queue, broker offset, consumer offset, lag, last timestamp) per queue. Raises the first broker
        failure (see group_progress for a report that keeps going)."""
        report = await self.group_progress(group, topic)
        for p in report.problems:
            if p.error is not None:
                raise p.error
        return [(q.mq, q.broker_offset, q.consumer_offset, q.lag, q.last_timestamp) for q in report.queues]

    # ---- connections --------------------------------------------------------------------------------------
    async def consumer_connections(self, group: str, broker_addr: str | None = None) -> ConsumerConnection:
        last: Exception | None = None
        if broker_addr:
            addrs = [broker_addr]
        else:
            try:
                addrs = [a for _, a in await self.topic_masters(f"{MIXALL_RETRY_PREFIX}{group}")]
            except OrbitMQError:
                addrs = []
            addrs = addrs or await self._master_addrs()
        for addr in addrs:
            try:
                resp = await self.request(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
                return ConsumerConnection.from_json(resp.body)
            except OrbitMQError as e:
                last = e
        raise last or ConsumerNotOnlineError(f"no broker knows consumer group {group}")

    async def consumer_running_info(self, group: str, client_id: str,
                                    broker_addr: str | None = None) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO, relayed by a broker the group is connected to (the first of the group's
        brokers that knows the client, unless `broker_addr` is given)."""
        if broker_addr:
            addrs = [broker_addr]
        else:
            try:
                addrs = [a for _, a in await self.topic_masters(f"{MIXALL_RETRY_PREFIX}{group}")]
            except TopicNotExistError:
                addrs = []
            addrs = addrs or await self._master_addrs()
        last: Exception | None = None
        for addr in addrs:
            try:
                resp = await self.request(addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                          {"consumerGroup": group, "clientId": client_id, "jstackEnable": False})
                return ConsumerRunningInfo.from_json(resp.body)
            except OrbitMQError as e:
                last = e
        raise last or ConsumerNotOnlineError(f"no broker knows consumer {client_id} of group {group}")

    async def consume_message_directly(self, group: str, client_id: str, offset_msg_id: str) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY through the broker that stores the message (the host inside the offset id): the
        client runs its listener on that one message and answers with consumeResult (CR_SUCCESS, CR_LATER,
        CR_THROW_EXCEPTION...), remark and spentTimeMills. No offset moves."""
        where = offset_id_address(offset_msg_id)
        if where is None:
            raise AdminError(f"not an offset message id: {offset_msg_id}")
        resp = await self.request(where[0], RequestCode.CONSUME_MESSAGE_DIRECTLY,
                                  {"consumerGroup": group, "clientId": client_id, "msgId": offset_msg_id})
        return dict(fastjson.loads(resp.body)) if resp.body else {}

    async def producer_connections(self, group: str, topic: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST on the topic's masters; connections merged by client id."""
        merged: dict[str, Any] = {}
        last: Exception | None = None
        for _, addr in await self.topic_masters(topic):
            try:
                resp = await self.request(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
            except ResponseError as e:
                last = e
                continue
            for c in ProducerConnection.from_json(resp.body).connection_set:
                merged.setdefault(c.client_id, c)
        if not merged and last is not None:
            raise last
        return ProducerConnection(sorted(merged.values(), key=lambda c: c.client_id))

    # ---- subscription groups ------------------------------------------------------------------------------
    async def _targets(self, cluster: str | None, broker_addr: str | None) -> list[tuple[str, str]]:
        if broker_addr:
            return [("", broker_addr)]
        masters = await self.cluster_masters(cluster)
        if not masters:
            raise AdminError(f"cluster {cluster!r} has no master broker" if cluster else "no master broker")
        return masters

    async def update_sub_group(self, group: str, *, cluster: str | None = None, broker_addr: str | None = None,
                               **config: Any) -> list[tuple[str, str]]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on a broker or on every master of a cluster; `config` takes the
        keyword arguments of subscription_group_body. Returns the (broker name, addr) updated."""
        body = fastjson.dumps(subscription_group_body(group, **config))
        targets = await self._targets(cluster, broker_addr)
        for _, addr in targets:
            await self.request(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        return targets

    async def delete_sub_group(self, group: str, *, cluster: str | None = None, broker_addr: str | None = None,
                               remove_offset: bool = False) -> list[tuple[str, str]]:
        targets = await self._targets(cluster, broker_addr)
        for _, addr in targets:
            await self.request(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                               {"groupName": group, "removeOffset": remove_offset})
        return targets

    async def subscription_group_configs(self, group: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(broker name, master addr, SubscriptionGroupConfig JSON object) of the group on every master that has
        it (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        out = []
        for name, addr in await self.cluster_masters():
            resp = await self.request(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            table = (fastjson.loads(resp.body) or {}).get("subscriptionGroupTable") or {} if resp.body else {}
            if group in table:
                out.append((name, addr, dict(table[group])))
        return out

    # ---- offsets ------------------------------------------------------------------------------------------
    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
                                   ) -> dict[MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET on every broker of the topic (the broker pushes the new offsets to online
        consumers). With no consumer online, offsets are searched (-1: the queue's end) and committed directly
        (as mqadmin's fallback)."""
        return {mq: off for mq, (off, _) in (await self.reset_offset_report(group, topic, timestamp_ms,
                                                                           force=force)).items()}

    async def reset_offset_report(self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
                                  ) -> dict[MessageQueue, tuple[int, bool]]:
        """As reset_offset_by_time, with whether each queue went through the broker (True: consumers notified)
        or through a direct offset commit (False: no consumer online)."""
        out: dict[MessageQueue, tuple[int, bool]] = {}
        route = await self.topic_route(topic)
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.master_addr()
            if not addr:
                continue
            ext = {"topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": force, "isC": False}
            resp = await self.request(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE,
                                          ResponseCode.REQUEST_CODE_NOT_SUPPORTED))
            if resp.code == ResponseCode.SUCCESS and resp.body:
                out.update({mq: (off, True) for mq, off in ResetOffsetBody.from_json(resp.body).offset_table.items()})
                continue
            queues = next((q.read_queue_nums for q in route.queue_datas if q.broker_name == bd.broker_name), 0)
            for qid in range(queues):
                mq = MessageQueue(topic, bd.broker_name, qid)
                inst = self._i()
                if timestamp_ms < 0:
                    off = await broker_api.max_offset(inst, addr, mq, self.timeout_ms)
                else:
                    off = await broker_api.search_offset(inst, addr, mq, timestamp_ms, self.timeout_ms)
                await broker_api.update_consumer_offset(inst, addr, group, mq, off, oneway=False,
                                                        timeout_ms=self.timeout_ms)
                out[mq] = (off, False)
        return dict(sorted(out.items()))

    async def clone_group_offset(self, src_group: str, dest_group: str, topic: str, *, offline: bool = False
                                 ) -> list[tuple[str, str]]:
        """CLONE_GROUP_OFFSET on every master of the topic: dest_group gets src_group's committed offsets.
        Returns the (broker name, addr) cloned on."""
        targets = await self.topic_masters(topic)
        for _, addr in targets:
            await self.request(addr, RequestCode.CLONE_GROUP_OFFSET,
                               {"srcGroup": src_group, "destGroup": dest_group, "topic": topic, "offline": offline})
        return targets

    # ---- statistics ---------------------------------------------------------------------------------------
    async def broker_consume_stats(self, broker_addr: str) -> list[tuple[str, ConsumeStats]]:
        """(group, ConsumeStats) of every group with offsets on the broker (GET_BROKER_CONSUME_STATS)."""
        resp = await self.request(broker_addr, RequestCode.GET_BROKER_CONSUME_STATS,
                                  {"isOrder": False, "timeoutMillis": self.timeout_ms})
        body = ConsumeStatsList.from_json(resp.body)
        return [(group, stats) for entry in body.consume_stats_list for group, lst in sorted(entry.items())
                for stats in lst]

    async def topic_consumer_groups(self, topic: str) -> list[str]:
        """Groups that consume a topic (QUERY_TOPIC_CONSUME_BY_WHO on its masters, merged)."""
        groups: set[str] = set()
        for _, addr in await self.topic_masters(topic):
            resp = await self.request(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
            groups.update(GroupList.from_json(resp.body).group_list)
        return sorted(groups)

    async def stats_all(self, topic: str | None = None,
                        on_topic: Callable[[str, int, int], None] | None = None) -> list[dict[str, Any]]:
        """One row per (topic, consuming group) — a topic nobody consumes gets a row with group None: messages
        stored, the group's accumulation (lag) and consume TPS (mqadmin statsAll, from GET_TOPIC_STATS_INFO,
        QUERY_TOPIC_CONSUME_BY_WHO and GET_CONSUME_STATS). System topics (retry, DLQ, TBW102...) are skipped
        unless named."""
        if topic:
            topics = [topic]
        else:  # the name server also lists cluster and broker names (and their reply topics) as topics
            info = await self.cluster_info()
            names = set(info.cluster_addr_table) | set(info.broker_addr_table)
            topics = [t for t in await self.topic_list() if not _system_topic(t) and t not in names
                      and t.removesuffix("_REPLY_TOPIC") not in names]
        rows: list[dict[str, Any]] = []
        for i, t in enumerate(topics):
            if on_topic is not None:
                on_topic(t, i, len(topics))
            stored = 0
            try:
                masters = await self.topic_masters(t)
            except TopicNotExistError:
                if topic:
                    raise
                continue  # a cluster or broker name listed as a topic, or a topic deleted meanwhile
            for _, addr in masters:
                resp = await self.request(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": t})
                stored += sum(o.max_offset - o.min_offset
                              for o in TopicStatsTable.from_json(resp.body).offset_table.values())
            groups = await self.topic_consumer_groups(t)
            if not groups:
                rows.append({"topic": t, "group": None, "messages": stored, "accumulation": None, "outTps": None})
            for g in groups:
                acc, tps = 0, 0.0
                for _, addr in masters:
                    resp = await self.request(addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": g, "topic": t})
                    stats = ConsumeStats.from_json(resp.body)
                    acc += sum(max(0, w.broker_offset - max(w.consumer_offset, 0))
                               for w in stats.offset_table.values())
                    tps += stats.consume_tps
                rows.append({"topic": t, "group": g, "messages": stored, "accumulation": acc, "outTps": tps})
        return rows


SYSTEM_TOPICS = frozenset({"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest",
                           "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SCHEDULE_TOPIC_XXXX"})


def _system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith((MIXALL_RETRY_PREFIX, MIXALL_DLQ_PREFIX, "rmq_sys_"))
