"""Message look-ups of the SDK's admin client: by id (offset msgId or the UNIQ_KEY client id), by key, by queue
offset, and reading a queue's messages between offsets or store times (mqadmin queryMsgBy*, consumeMessage,
printMsg). Reads use PULL_MESSAGE as the group TOOLS_CONSUMER and never commit an offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from orbitmq.base.clock import now_ms
from orbitmq.base.errors import OrbitMQError
from orbitmq.client import broker_api
from orbitmq.client.admin_base import AdminBase
from orbitmq.client.broker_api import PULL_FLAG_SUBSCRIPTION, PullStatus
from orbitmq.client.errors import NoRouteError, QueryNotFoundError, TopicNotExistError
from orbitmq.model import MessageExt, MessageQueue, Prop, decode_offset_msg_id
from orbitmq.model.tags import tags_of_expression
from orbitmq.protocol.bodies import SubscriptionData

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"


def offset_id_address(msg_id: str) -> tuple[str, int] | None:
    """(store host:port, commit-log offset) when `msg_id` is an offset message id, else None (a UNIQ_KEY client
    id has the same length; its bytes 4..8 are no port)."""
    try:
        host, port, phys = decode_offset_msg_id(msg_id)
    except ValueError:
        return None
    if not 0 < port < 65536 or phys < 0:
        return None
    return f"{host}:{port}", phys


class MessageAdmin(AdminBase):
    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                               end_ms: int | None = None, *, unique_key: bool = False) -> list[MessageExt]:
        """QUERY_MESSAGE on every broker of the topic; the index is hashed, so results are re-checked against the
        key client-side (a unique key against the message's UNIQ_KEY)."""
        end = now_ms() if end_ms is None else end_ms
        inst = self._i()
        masters = await self.topic_masters(topic)
        results = await asyncio.gather(*(broker_api.query_message(inst, addr, topic, key, max_num, begin_ms, end,
                                                                   unique_key=unique_key,
                                                                   timeout_ms=self.timeout_ms)
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
        out.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return out[:max_num] if not unique_key else out

    async def query_msg_by_unique_key(self, topic: str, msg_id: str) -> list[MessageExt]:
        """Every stored copy of a UNIQ_KEY in a topic (a retried send may be stored more than once)."""
        return await self.query_msg_by_key(topic, msg_id, 32, unique_key=True)

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID at the store host named inside an offset message id."""
        where = offset_id_address(offset_msg_id)
        if where is None:
            raise QueryNotFoundError(f"not an offset message id: {offset_msg_id}")
        return await broker_api.view_message(self._i(), where[0], where[1], self.timeout_ms)

    async def query_msg_by_id(self, msg_id: str, topic: str | None = None,
                              on_topic: Callable[[str, int, int], None] | None = None) -> MessageExt:
        """A message by either id kind: an offset message id is read at the store host inside it; a UNIQ_KEY
        (the msgId producers print) is looked up in the topic's index, or, with no topic, in every topic's
        index (`on_topic(topic, i, n)` reports that search's progress)."""
        msg_id = msg_id.strip().upper()
        if topic:
            found = await self.query_msg_by_unique_key(topic, msg_id)
            if found:
                return found[0]
        view_error: OrbitMQError | None = None
        if offset_id_address(msg_id) is not None:
            try:
                return await self.view_message(msg_id)
            except OrbitMQError as e:  # a unique key can decode as an address too (rarely): search it below
                view_error = e
        if topic:
            if view_error is not None:
                raise view_error
            raise QueryNotFoundError(f"message {msg_id} not found: no such unique key in topic {topic} and not an "
                                     f"offset message id")
        topics = await self.topic_list()
        for i, t in enumerate(topics):
            if on_topic is not None:
                on_topic(t, i, len(topics))
            try:
                found = await self.query_msg_by_unique_key(t, msg_id)
            except TopicNotExistError:
                continue  # a cluster/broker name in the topic list, or deleted meanwhile
            if found:
                return found[0]
        why = (f"as an offset message id: {' '.join(str(getattr(view_error, 'remark', '') or view_error).split())}"
               if view_error is not None else "not an offset message id")
        raise QueryNotFoundError(f"message {msg_id} not found: {why}; no topic's index holds it as a unique key "
                                 f"({len(topics)} topics searched)")

    # ---- reading queues -----------------------------------------------------------------------------------
    async def topic_queues(self, topic: str, broker_name: str | None = None,
                           queue_id: int | None = None) -> list[tuple[MessageQueue, str]]:
        """(readable queue, master addr) of a topic, optionally one broker group / one queue."""
        route = await self.topic_route(topic)
        masters = {bd.broker_name: bd.master_addr() for bd in route.broker_datas}
        out = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            addr = masters.get(qd.broker_name)
            if not addr or (broker_name is not None and qd.broker_name != broker_name):
                continue
            out += [(MessageQueue(topic, qd.broker_name, qid), addr) for qid in range(qd.read_queue_nums)
                    if queue_id is None or qid == queue_id]
        if not out:
            which = f" broker {broker_name}" if broker_name else ""
            which += f" queue {queue_id}" if queue_id is not None else ""
            raise NoRouteError(f"no readable queue of topic {topic}{which} with a master online")
        return out

    async def queue_range(self, mq: MessageQueue, addr: str, begin_ms: int | None = None,
                          end_ms: int | None = None) -> tuple[int, int]:
        """[start, end) queue offsets: min..max, narrowed by store times when given."""
        inst = self._i()
        lo = await broker_api.min_offset(inst, addr, mq, self.timeout_ms)
        hi = await broker_api.max_offset(inst, addr, mq, self.timeout_ms)
        if begin_ms is not None and begin_ms > 0:
            lo = max(lo, await broker_api.search_offset(inst, addr, mq, begin_ms, self.timeout_ms))
        if end_ms is not None and end_ms > 0:
            hi = min(hi, await broker_api.search_offset(inst, addr, mq, end_ms, self.timeout_ms))
        return max(lo, 0), max(hi, 0)

    async def read_queue(self, mq: MessageQueue, addr: str, start: int, end: int | None = None,
                         expression: str = "*", batch: int = 32) -> AsyncIterator[MessageExt]:
        """Messages of one queue from offset `start` up to `end` (exclusive; None: the end at the time of each
        pull), tag-filtered by `expression`; no offset is committed."""
        sd = SubscriptionData.of_expression(mq.topic, expression)
        tags = tags_of_expression(expression)
        offset = start
        while end is None or offset < end:
            n = batch if end is None else max(1, min(batch, end - offset))
            header = broker_api.pull_header(TOOLS_CONSUMER_GROUP, mq, offset, n, PULL_FLAG_SUBSCRIPTION, 0, 0,
                                            sd.sub_string, sd.sub_version, sd.expression_type)
            res = await broker_api.pull(self._i(), addr, header, self.timeout_ms, tags)
            if res.status is PullStatus.FOUND:
                for m in res.msgs:
                    if end is not None and m.queue_offset >= end:
                        return
                    yield m
            elif res.status is not PullStatus.NO_MATCHED_MSG:
                if res.status is PullStatus.OFFSET_ILLEGAL and res.next_begin_offset > offset:
                    offset = res.next_begin_offset
                    continue
                return
            if res.next_begin_offset <= offset:
                return
            offset = res.next_begin_offset

    async def query_msg_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageExt:
        """The message at one queue offset (mqadmin queryMsgByOffset)."""
        (mq, addr), = await self.topic_queues(topic, broker_name, queue_id)
        async for m in self.read_queue(mq, addr, offset, offset + 1):
            return m
        raise QueryNotFoundError(f"no message at offset {offset} of {topic} {broker_name}/{queue_id}")
