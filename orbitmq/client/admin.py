"""Admin: the mqadmin-style operations of the SDK, the one admin client under both applications and the
`orbitmq` CLI (which only parses options and renders what these methods return).

Split by concern: admin_base (request plumbing, name server and broker look-ups, KV config, write permission),
admin_groups (progress, connections, subscription groups, offset reset/clone, consumption statistics),
admin_messages (message queries and queue reads); topic administration is here.
"""

from __future__ import annotations

import logging

from orbitmq.client.admin_base import ORDER_TOPIC_NAMESPACE, AdminBase, AdminError
from orbitmq.client.admin_groups import BrokerProblem, GroupAdmin, GroupProgress, QueueProgress
from orbitmq.client.admin_messages import MessageAdmin
from orbitmq.client.errors import NoRouteError, ResponseError
from orbitmq.model import MessageQueue
from orbitmq.protocol import RequestCode
from orbitmq.protocol.bodies import TopicStatsTable

log = logging.getLogger(__name__)

__all__ = ["Admin", "AdminBase", "AdminError", "BrokerProblem", "GroupProgress", "QueueProgress"]


class Admin(GroupAdmin, MessageAdmin):
    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- topics -------------------------------------------------------------------------------------------
    async def create_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                           read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = 6,
                           order: bool = False) -> list[tuple[str, str]]:
        """UPDATE_AND_CREATE_TOPIC on one broker or on every master of a cluster (of every cluster if neither is
        given); an ordered topic created on a cluster also gets its queue layout in the name servers' KV config
        (ORDER_TOPIC_CONFIG). Returns the (broker name, addr) updated (name "" for a broker given by address)."""
        targets = [("", broker_addr)] if broker_addr else await self.cluster_masters(cluster)
        if not targets:
            raise NoRouteError(f"no master broker found (cluster={cluster})")
        h = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
             "writeQueueNums": write_queue_nums, "perm": perm, "topicFilterType": "SINGLE_TAG",
             "topicSysFlag": 0, "order": order}
        for _, addr in targets:
            await self.request(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, h)
        if order and cluster is not None:
            await self.put_kv_config(ORDER_TOPIC_NAMESPACE, topic,
                                     ";".join(f"{name}:{write_queue_nums}" for name, _ in targets))
        return targets

    async def update_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                           read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = 6,
                           order: bool = False) -> list[str]:
        """create_topic, returning the broker addresses updated."""
        targets = await self.create_topic(topic, cluster=cluster, broker_addr=broker_addr,
                                          read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
                                          perm=perm, order=order)
        return [addr for _, addr in targets]

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[tuple[str, str]]:
        """DELETE_TOPIC_IN_BROKER on every master of the cluster (no cluster: of the topic's route), then
        DELETE_TOPIC_IN_NAMESRV and the ordered-topic KV entry on every name server. Returns the (broker name,
        addr) it was deleted from."""
        targets = await self.cluster_masters(cluster) if cluster else await self.topic_masters(topic)
        for _, addr in targets:
            await self.request(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        await self.every_namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        try:  # an ordered topic's queue layout; usually absent
            await self.delete_kv_config(ORDER_TOPIC_NAMESPACE, topic)
        except ResponseError as e:
            log.debug("deleting the order config of %s: %s", topic, e)
        self._i().routes.remove(topic)
        return targets

    async def topic_status(self, topic: str) -> list[tuple[MessageQueue, int, int, int]]:
        """(queue, min offset, max offset, last update ms) per queue of the topic."""
        out: list[tuple[MessageQueue, int, int, int]] = []
        for _, addr in await self.topic_masters(topic):
            resp = await self.request(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            for mq, to in TopicStatsTable.from_json(resp.body).offset_table.items():
                out.append((mq, to.min_offset, to.max_offset, to.last_update_timestamp))
        return sorted(out, key=lambda t: t[0])
