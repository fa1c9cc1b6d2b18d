"""Acknowledged consumer-offset replication of a controller-mode master: commits are gated in the offset table
(metadata/offsets.py set_gate), sent in batches (ORBIT_REPLICATE_CONSUMER_OFFSETS, one request per member and round)
to every other SyncStateSet member, and published by offset_publish.PublishTable once all acknowledged; also the
replica's handler for those batches. Decides no role: the ReplicasManager turns it on and off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson

from orbitmq.base.errors import OrbitMQError
from orbitmq.broker.controller_mode.offset_publish import PublishTable, Queue
from orbitmq.broker.metadata.offsets import SEPARATOR, ConsumerOffsetManager
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)

SEND_TIMEOUT_MS = 3000
RETRY_S = 0.1  # a member that did not acknowledge gets the batch again this soon
PUBLISH_WAIT_S = 3.0  # UPDATE_CONSUMER_OFFSET waits at most this long for its offset to be published
BATCH_LIMIT = 10_000  # queue offsets per request


def encode_batch(epoch: int, batch: dict[Queue, int]) -> bytes:
    """{"masterEpoch":E,"offsets":[["topic@group",queueId,offset],...]}"""
    return orjson.dumps({"masterEpoch": epoch, "offsets": [[k, q, v] for (k, q), v in batch.items()]})


def decode_batch(body: bytes) -> tuple[int, dict[Queue, int]]:
    obj = orjson.loads(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("offsets"), list):
        raise ValueError("not an offset batch")
    out: dict[Queue, int] = {}
    for item in obj["offsets"]:
        key, qid, value = item
        if not isinstance(key, str) or SEPARATOR not in key:
            raise ValueError(f"bad key {key!r}")
        out[(key, int(qid))] = int(value)
    return int(obj.get("masterEpoch", -1)), out


def apply_batch(offsets: ConsumerOffsetManager, batch: dict[Queue, int]) -> None:
    """A replica stores an acknowledged batch (persisted with its normal consumerOffset.json cycle)."""
    for (key, qid), value in batch.items():
        topic, _, group = key.partition(SEPARATOR)
        offsets.commit(group, topic, qid, value)


class OffsetPublisher:
    """One master term's gate: `start(members, epoch)`, `stop()`; `members_changed()` after a SyncStateSet change;
    `wait_published()` for a client's UPDATE_CONSUMER_OFFSET. `addr_of(id)` gives a member's broker address (None:
    unknown yet; `refresh()` is awaited then)."""

    def __init__(self, offsets: ConsumerOffsetManager, client: RemotingClient,
                 addr_of: Callable[[int], str | None], refresh: Callable[[], Any]) -> None:
        self.offsets = offsets
        self.client = client
        self.addr_of = addr_of
        self.refresh = refresh
        self.table = PublishTable()
        self.epoch = -1
        self.rounds = 0
        self.acks = 0
        self.failures = 0
        self.published = 0
        self._wake = asyncio.Event()
        self._waiters: dict[Queue, list[asyncio.Future[None]]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self, members: set[int], epoch: int) -> None:
        self.stop()
        self.table = PublishTable(members)
        self.epoch = epoch
        self.offsets.set_gate(self._on_commit)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="consumer offset publish")

    def stop(self) -> None:
        """Leave master: unpublished commits are dropped (nobody saw them), waiters fail."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.offsets.set_gate(None)
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.set_exception(OrbitMQError("no longer master"))
        self._waiters.clear()

    def members_changed(self, members: set[int]) -> None:
        self.table.set_members(members)
        self._wake.set()

    def _on_commit(self, key: str, queue_id: int, offset: int) -> None:
        self.table.local((key, queue_id), offset)
        self._wake.set()

    async def wait_published(self, group: str, topic: str, queue_id: int) -> bool:
        """True once the latest commit of that queue is published (or superseded by a published one)."""
        q = (topic + SEPARATOR + group, queue_id)
        if q not in self.table.latest:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(q, []).append(fut)
        try:
            async with asyncio.timeout(PUBLISH_WAIT_S):
                await fut
            return True
        except (TimeoutError, OrbitMQError):
            return False
        finally:
            futs = self._waiters.get(q)
            if futs is not None and fut in futs:
                futs.remove(fut)
                if not futs:
                    del self._waiters[q]

    async def _run(self) -> None:
        while True:
            if not self.table.pending():
                await self._wake.wait()
            self._wake.clear()
            await self._round()
            if self.table.pending():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(RETRY_S):
                        await self._wake.wait()

    async def _round(self) -> None:
        """One batch to every member at once, then publish what all hold."""
        self.rounds += 1
        members = sorted(self.table.members)
        if any(self.addr_of(m) is None for m in members):
            with contextlib.suppress(OrbitMQError, TimeoutError, ValueError):
                await self.refresh()
        await asyncio.gather(*(self._send(m) for m in members))
        for (key, qid), value in self.table.publishable().items():
            self.offsets.publish(key, qid, value)
            self.published += 1
            if (key, qid) not in self.table.latest:
                for f in self._waiters.pop((key, qid), []):
                    if not f.done():
                        f.set_result(None)

    async def _send(self, member: int) -> None:
        addr = self.addr_of(member)
        batch = self.table.batch_for(member, BATCH_LIMIT)
        if addr is None or not batch:
            return
        cmd = RemotingCommand.request(RequestCode.ORBIT_REPLICATE_CONSUMER_OFFSETS, {},
                                      body=encode_batch(self.epoch, batch))
        try:
            resp = await self.client.invoke(addr, cmd, SEND_TIMEOUT_MS)
        except OrbitMQError as e:
            self.failures += 1
            log.debug("consumer offsets to member %d (%s) failed: %r", member, addr, e)
            return
        if resp.code != ResponseCode.SUCCESS:
            self.failures += 1
            log.debug("member %d (%s) refused consumer offsets: %d %s", member, addr, resp.code, resp.remark)
            return
        self.acks += 1
        self.table.acked(member, batch)

    def status(self) -> dict[str, str]:
        return {"offsetPublishPending": str(self.table.pending()), "offsetPublishRounds": str(self.rounds),
                "offsetPublishAcks": str(self.acks), "offsetPublishFailures": str(self.failures)}
