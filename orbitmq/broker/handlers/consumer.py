"""Consumer-group coordination: GET_CONSUMER_LIST_BY_GROUP (38) and the orderly-consumer queue locks
LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) (§3.7, §3.8, §8.5). Locks live in memory only, as in Java; the table
is broker/queue_locks.py. With lockInStrictMode the strict_lock service answers 41/42 instead (quorum of the group).
"""

from __future__ import annotations

from typing import Any

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers.guard import guarded
from orbitmq.broker.queue_locks import LOCK_MAX_LIVE_MS, QueueLockTable
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_str
from orbitmq.protocol.bodies import ConsumerListBody, LockBatchBody, LockBatchResponseBody

__all__ = ["LOCK_MAX_LIVE_MS", "QueueLockTable", "handlers"]


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

    return guarded({
        int(RequestCode.GET_CONSUMER_LIST_BY_GROUP): get_consumer_list,
        int(RequestCode.LOCK_BATCH_MQ): lock_batch,
        int(RequestCode.UNLOCK_BATCH_MQ): unlock_batch,
    })
