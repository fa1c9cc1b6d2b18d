"""Strict-lock service (RIP-32 lockInStrictMode): LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) across the replica group.

Enabled by lockInStrictMode=true; it then answers 41/42 instead of handlers/consumer.py. A client lock
(onlyThisBroker=false) is granted here, forwarded with onlyThisBroker=true to every other live member of this broker
group for the queues granted here, and a queue counts as locked only when a quorum (queue_locks.lock_quorum of
totalReplicas) granted it. Requests with onlyThisBroker=true (forwarded ones) lock locally only. Unlocks are applied
here and forwarded likewise. Members come from the acting-master service when it runs, else from
GET_BROKER_MEMBER_GROUP (901) on the name servers (cached for syncBrokerMemberGroupPeriod), else their cluster info.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from orbitmq.base.errors import OrbitMQError, ProtocolError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.member_group import fetch_group_members
from orbitmq.broker.queue_locks import (
    QueueLockTable,
    forward_targets,
    lock_quorum,
    quorum_granted,
    replica_count,
)
from orbitmq.broker.services import ServiceEnv
from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import LockBatchBody, LockBatchResponseBody

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_MS = 1000  # Java: lockBatchMQAsync(addr, body, 1000, ...)
NAMESRV_TIMEOUT_MS = 3000


class StrictLockService:
    name = "strict_lock"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        self.locks = QueueLockTable(env.clock.now_ms, max_live_ms=ctx.config.rebalance_lock_max_live_time)
        self.largest_group_seen = 1
        self.forward_failures = 0
        self._members: dict[int, str] = {}
        self._members_at_ms: int | None = None

    # ---- service protocol ----------------------------------------------------------------------------
    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {int(RequestCode.LOCK_BATCH_MQ): self._lock_batch, int(RequestCode.UNLOCK_BATCH_MQ): self._unlock_batch}

    async def start(self) -> None:
        return None

    async def run(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    # ---- handlers ------------------------------------------------------------------------------------
    async def _lock_batch(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        body = _decode(req)
        if body is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "LOCK_BATCH_MQ: bad LockBatchRequestBody")
        granted = await self.lock(body)
        return req.response(ResponseCode.SUCCESS, body=LockBatchResponseBody(granted).to_json())

    async def _unlock_batch(self, conn: Any, req: RemotingCommand) -> RemotingCommand | None:
        body = _decode(req)
        if body is None:
            return None if req.is_oneway else req.response(ResponseCode.SYSTEM_ERROR,
                                                           "UNLOCK_BATCH_MQ: bad LockBatchRequestBody")
        await self.unlock(body)
        return None if req.is_oneway else req.response(ResponseCode.SUCCESS)

    # ---- lock logic ----------------------------------------------------------------------------------
    async def lock(self, body: LockBatchBody) -> list[MessageQueue]:
        """Queues this client may consume: granted here (onlyThisBroker) or by a quorum of the group."""
        mine = self.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        if body.only_this_broker:
            return mine
        members = await self.members()
        quorum = lock_quorum(replica_count(self.ctx.config.total_replicas, self.largest_group_seen))
        if quorum <= 1 or not mine:
            return mine
        forward = LockBatchBody(body.consumer_group, body.client_id, mine, only_this_broker=True)
        answers = await asyncio.gather(*(self._forward(addr, RequestCode.LOCK_BATCH_MQ, forward)
                                         for addr in self._targets(members)))
        return quorum_granted([mine, *(a for a in answers if a is not None)], quorum)

    async def unlock(self, body: LockBatchBody) -> None:
        self.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        if body.only_this_broker:
            return
        forward = LockBatchBody(body.consumer_group, body.client_id, body.mq_set, only_this_broker=True)
        await asyncio.gather(*(self._forward(addr, RequestCode.UNLOCK_BATCH_MQ, forward)
                               for addr in self._targets(await self.members())))

    def _targets(self, members: Mapping[int, str]) -> list[str]:
        cfg = self.ctx.config
        return forward_targets(dict(members), cfg.broker_id, cfg.broker_addr)

    async def _forward(self, addr: str, code: int, body: LockBatchBody) -> list[MessageQueue] | None:
        """One member's answer (granted queues; [] for an unlock) or None when it failed or timed out."""
        try:
            resp = await self.env.client.invoke(addr, RemotingCommand.request(code, None, body.to_json()),
                                                FORWARD_TIMEOUT_MS)
            if resp.code != ResponseCode.SUCCESS:
                raise OrbitMQError(f"code {resp.code}: {resp.remark}")
            if code != RequestCode.LOCK_BATCH_MQ or not resp.body:
                return []
            return LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set
        except (OrbitMQError, OSError, ValueError, TypeError) as e:
            self.forward_failures += 1
            log.info("strict lock: %s to %s failed: %s", RequestCode(code).name, addr, e)
            return None

    # ---- replica group members -----------------------------------------------------------------------
    async def members(self) -> dict[int, str]:
        """Live members of this broker group (brokerId -> address), this broker included."""
        acting = self.ctx.services.get("acting_master")  # its member list, when it polls one (feature on)
        addrs = getattr(getattr(acting, "state", acting), "member_addrs", None)
        if isinstance(addrs, Mapping) and addrs:
            members = {int(k): str(v) for k, v in addrs.items()}
        else:
            members = await self._cached_members()
        members.setdefault(self.ctx.config.broker_id, self.ctx.config.broker_addr)
        self.largest_group_seen = max(self.largest_group_seen, len(members))
        return members

    async def _cached_members(self) -> dict[int, str]:
        now = self.env.clock.now_ms()
        if self._members_at_ms is None or now - self._members_at_ms >= self.ctx.config.sync_broker_member_group_period:
            fetched = await self._fetch_members()
            if fetched is not None:
                self._members, self._members_at_ms = fetched, now
        return dict(self._members)

    async def _fetch_members(self) -> dict[int, str] | None:
        return await fetch_group_members(self.env.client, self.ctx.config, NAMESRV_TIMEOUT_MS)


def _decode(req: RemotingCommand) -> LockBatchBody | None:
    try:
        return LockBatchBody.from_json(req.body or b"{}")
    except (ProtocolError, ValueError, TypeError, KeyError, AttributeError):
        return None


def create(ctx: BrokerContext, env: ServiceEnv) -> StrictLockService | None:
    return StrictLockService(ctx, env) if ctx.config.lock_in_strict_mode else None
