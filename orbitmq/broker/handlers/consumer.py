"""Consumer-group coordination: GET_CONSUMER_LIST_BY_GROUP (38) and the orderly-consumer queue locks
LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) (§3.7, §3.8, §8.5). Locks live in memory only, as in Java.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orbitmq.base.clock import now_ms
from orbitmq.broker.context import BrokerContext
from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_str
from orbitmq.protocol.bodies import ConsumerListBody, LockBatchBody, LockBatchResponseBody

LOCK_MAX_LIVE_MS = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime


class QueueLockTable:
    """group -> MessageQueue -> (client id, last refresh ms). A lock is free once it has not been refreshed
    for LOCK_MAX_LIVE_MS; the owner re-locks every 20 s."""

    def __init__(self, clock_ms: Callable[[], int] = now_ms, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self._table: dict[str, dict[MessageQueue, tuple[str, int]]] = {}
        self._clock = clock_ms
        self._max_live_ms = max_live_ms

    def try_lock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Grant every queue that is free, expired or already ours; returns the granted ones."""
        now = self._clock()
        locks = self._table.setdefault(group, {})
        granted: list[MessageQueue] = []
        for mq in mqs:
            owner = locks.get(mq)
            if owner is None or owner[0] == client_id or now - owner[1] > self._max_live_ms:
                locks[mq] = (client_id, now)
                granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        locks = self._table.get(group)
        if not locks:
            return
        for mq in mqs:
            owner = locks.get(mq)
            if owner is not None and owner[0] == client_id:
                del locks[mq]
        if not locks:
            del self._table[group]

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        entry = self._table.get(group, {}).get(mq)
        if entry is None or self._clock() - entry[1] > self._max_live_ms:
            return None
        return entry[0]


def handlers(ctx: BrokerContext, locks: QueueLockTable | None = None) -> dict[int, Any]:
    lock_table = locks or QueueLockTable(max_live_ms=ctx.config.rebalance_lock_max_live_time)

    def get_consumer_list(conn: Any, req: RemotingCommand) -> RemotingCommand:
        group = ext_str(req.ext_fields, "consumerGroup")
        ids = ctx.clients.consumer_ids(group)
        if not ids:
            return req.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return req.response(ResponseCode.SUCCESS, body=ConsumerListBody(ids).to_json())

    def lock_batch(conn: Any, req: RemotingCommand) -> RemotingCommand:
        body = LockBatchBody.from_json(req.body)
        granted = lock_table.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return req.response(ResponseCode.SUCCESS, body=LockBatchResponseBody(granted).to_json())

    def unlock_batch(conn: Any, req: RemotingCommand) -> RemotingCommand:
        body = LockBatchBody.from_json(req.body)
        lock_table.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return req.response(ResponseCode.SUCCESS)

    return {
        int(RequestCode.GET_CONSUMER_LIST_BY_GROUP): get_consumer_list,
        int(RequestCode.LOCK_BATCH_MQ): lock_batch,
        int(RequestCode.UNLOCK_BATCH_MQ): unlock_batch,
    }
