"""Admin: the mqadmin-style operations (routes, clusters, topics, stats, consumer progress, message queries,
offset reset, runtime info) built from name-server and broker requests.
"""

from __future__ import annotations

import asyncio
import logging

from orbitmq.base.clock import now_ms
from orbitmq.base.errors import OrbitMQError
from orbitmq.client import broker_api
from orbitmq.client.broker_api import check
from orbitmq.client.errors import ConsumerNotOnlineError, NoRouteError, QueryNotFoundError
from orbitmq.client.instance import ClientInstance
from orbitmq.model import MessageExt, MessageQueue, Prop, decode_offset_msg_id
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    KVTable,
    ResetOffsetBody,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
)

log = logging.getLogger(__name__)


class Admin:
    def __init__(self, namesrv: str, *, instance_name: str | None = None, timeout_ms: int = 5000) -> None:
        self.namesrv = namesrv
        self.instance_name = instance_name
        self.timeout_ms = timeout_ms
        self._inst: ClientInstance | None = None

    async def start(self) -> None:
        if self._inst is None:
            self._inst = await ClientInstance.acquire(self.namesrv, self.instance_name)

    async def close(self) -> None:
        inst, self._inst = self._inst, None
        if inst is not None:
            await inst.release()

    shutdown = close

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _i(self) -> ClientInstance:
        if self._inst is None:
            raise OrbitMQError("admin is not started")
        return self._inst

    async def _ns(self, code: int, ext: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> RemotingCommand:
        resp = await self._i().invoke_namesrv(lambda: RemotingCommand.request(code, dict(ext) if ext else None),
                                              self.timeout_ms)
        return check(resp, "namesrv", ok)

    async def _broker(self, addr: str, code: int, ext: dict[str, str] | None = None,
                      body: bytes | None = None) -> RemotingCommand:
        return check(await self._i().invoke(addr, RemotingCommand.request(code, ext, body), self.timeout_ms), addr)

    # ---- name server --------------------------------------------------------------------------------------
    async def topic_route(self, topic: str) -> TopicRouteData:
        resp = await self._ns(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"})
        return TopicRouteData.from_json(resp.body)

    async def topic_list(self) -> list[str]:
        resp = await self._ns(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(TopicList.from_json(resp.body).topic_list) if resp.body else []

    async def cluster_info(self) -> ClusterInfo:
        resp = await self._ns(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.from_json(resp.body)

    async def cluster_brokers(self) -> list[tuple[str, str, int, str]]:
        """(cluster, broker_name, broker_id, addr) for every registered broker, sorted."""
        ci = await self.cluster_info()
        out = []
        for cluster, names in ci.cluster_addr_table.items():
            for name in names:
                bd = ci.broker_addr_table.get(name)
                if bd is None:
                    continue
                out.extend((cluster, name, bid, addr) for bid, addr in bd.broker_addrs.items())
        return sorted(out)

    async def _master_addrs(self, cluster: str | None = None) -> list[str]:
        return sorted({addr for c, _, bid, addr in await self.cluster_brokers()
                       if bid == 0 and (cluster is None or c == cluster)})

    async def _topic_masters(self, topic: str) -> list[tuple[str, str]]:
        """(broker_name, master addr) for every broker hosting the topic."""
        rd = await self.topic_route(topic)
        return sorted((bd.broker_name, bd.broker_addrs[0]) for bd in rd.broker_datas if 0 in bd.broker_addrs)

    # ---- topics -------------------------------------------------------------------------------------------
    async def update_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                           read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = 6,
                           order: bool = False) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on one broker or on every master of a cluster (all clusters if neither is
        given); returns the broker addresses updated."""
        addrs = [broker_addr] if broker_addr else await self._master_addrs(cluster)
        if not addrs:
            raise NoRouteError(f"no master broker found (cluster={cluster})")
        h = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read_queue_nums),
             "writeQueueNums": str(write_queue_nums), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
             "topicSysFlag": "0", "order": "true" if order else "false"}
        for addr in addrs:
            await self._broker(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(h))
        return addrs

    async def delete_topic(self, topic: str, cluster: str) -> None:
        """DELETE_TOPIC_IN_BROKER on every broker of the cluster, then DELETE_TOPIC_IN_NAMESRV on every name
        server."""
        for c, _, _, addr in await self.cluster_brokers():
            if c == cluster:
                await self._broker(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        inst = self._i()
        for ns in inst.namesrv_addrs:
            cmd = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                          {"topic": topic, "clusterName": cluster})
            check(await inst.invoke(ns, cmd, self.timeout_ms), ns)
        inst.routes.remove(topic)

    async def topic_status(self, topic: str) -> list[tuple[MessageQueue, int, int, int]]:
        """(queue, min offset, max offset, last update ms) per queue of the topic."""
        out: list[tuple[MessageQueue, int, int, int]] = []
        for _, addr in await self._topic_masters(topic):
            resp = await self._broker(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            for mq, to in TopicStatsTable.from_json(resp.body).offset_table.items():
                out.append((mq, to.min_offset, to.max_offset, to.last_update_timestamp))
        return sorted(out, key=lambda t: t[0])

    # ---- consumers ----------------------------------------------------------------------------------------
    async def consumer_progress(self, group: str, topic: str | None = None
                                ) -> list[tuple[MessageQueue, int, int, int, int]]:
        """(queue, broker offset, consumer offset, lag, last timestamp) from GET_CONSUME_STATS on every broker
        of the topic (or of %RETRY%<group>, or every master when that has no route)."""
        try:
            addrs = [a for _, a in await self._topic_masters(topic or f"%RETRY%{group}")]
        except OrbitMQError:
            addrs = await self._master_addrs()
        h = {"consumerGroup": group}
        if topic:
            h["topic"] = topic
        out: list[tuple[MessageQueue, int, int, int, int]] = []
        for addr in addrs:
            resp = await self._broker(addr, RequestCode.GET_CONSUME_STATS, dict(h))
            for mq, ow in ConsumeStats.from_json(resp.body).offset_table.items():
                lag = max(ow.broker_offset - ow.consumer_offset, 0)
                out.append((mq, ow.broker_offset, ow.consumer_offset, lag, ow.last_timestamp))
        return sorted(out, key=lambda t: t[0])

    async def consumer_connections(self, group: str) -> ConsumerConnection:
        last: Exception | None = None
        try:
            addrs = [a for _, a in await self._topic_masters(f"%RETRY%{group}")]
        except OrbitMQError:
            addrs = []
        for addr in addrs or await self._master_addrs():
            try:
                resp = await self._broker(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
                return ConsumerConnection.from_json(resp.body)
            except OrbitMQError as e:
                last = e
        raise last or ConsumerNotOnlineError(f"no broker knows consumer group {group}")

    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
                                   ) -> dict[MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET on every broker of the topic (the broker pushes the new offsets to online
        consumers). With no consumer online, offsets are searched and committed directly (as mqadmin's fallback)."""
        out: dict[MessageQueue, int] = {}
        inst = self._i()
        for name, addr in await self._topic_masters(topic):
            h = {"topic": topic, "group": group, "timestamp": str(timestamp_ms), "isForce": str(force).lower()}
            cmd = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, h)
            resp = await inst.invoke(addr, cmd, self.timeout_ms)
            if resp.code == ResponseCode.SUCCESS:
                if resp.body:
                    out.update(ResetOffsetBody.from_json(resp.body).offset_table)
                continue
            if resp.code != ResponseCode.CONSUMER_NOT_ONLINE:
                check(resp, addr)
            out.update(await self._reset_offline(addr, name, group, topic, timestamp_ms))
        return out

    async def _reset_offline(self, addr: str, broker_name: str, group: str, topic: str,
                             timestamp_ms: int) -> dict[MessageQueue, int]:
        inst = self._i()
        rd = await self.topic_route(topic)
        out: dict[MessageQueue, int] = {}
        for qd in rd.queue_datas:
            if qd.broker_name != broker_name:
                continue
            for qid in range(qd.read_queue_nums):
                mq = MessageQueue(topic, broker_name, qid)
                off = await broker_api.search_offset(inst, addr, mq, timestamp_ms)
                await broker_api.update_consumer_offset(inst, addr, group, mq, off, oneway=False)
                out[mq] = off
        return out

    # ---- messages -----------------------------------------------------------------------------------------
    async def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By offset message id (VIEW_MESSAGE_BY_ID at the store host inside the id); with `topic`, a UNIQ_KEY
        (client id) is tried first through the index."""
        if topic:
            found = await self.query_msg_by_key(topic, msg_id, unique_key=True)
            if found:
                return found[0]
        try:
            host, port, phys = decode_offset_msg_id(msg_id)
        except ValueError as e:
            raise QueryNotFoundError(f"not an offset message id: {msg_id} ({e})") from None
        return await broker_api.view_message(self._i(), f"{host}:{port}", phys, self.timeout_ms)

    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                               end_ms: int | None = None, *, unique_key: bool = False) -> list[MessageExt]:
        """QUERY_MESSAGE on every broker of the topic; results are re-checked against the key client-side."""
        end = now_ms() if end_ms is None else end_ms
        inst = self._i()
        masters = await self._topic_masters(topic)
        results = await asyncio.gather(*(broker_api.query_message(inst, addr, topic, key, max_num, begin_ms, end,
                                                                   unique_key=unique_key)
                                         for _, addr in masters))
        out: list[MessageExt] = []
        for msgs in results:
            for m in msgs:
                if m.topic != topic:
                    continue
                if unique_key:
                    if m.properties.get(Prop.UNIQ_KEY) == key:
                        out.append(m)
                elif key in m.keys:
                    out.append(m)
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num] if not unique_key else out

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        resp = await self._broker(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return KVTable.from_json(resp.body).table if resp.body else {}
