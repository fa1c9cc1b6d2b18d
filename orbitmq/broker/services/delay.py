"""Schedule (delay-level) service: one timer per messageDelayLevel level walks SCHEDULE_TOPIC_XXXX queue level-1
from its persisted offset and re-puts every due message to its REAL_TOPIC/REAL_QID; progress lives in
config/delayOffset.json ({"offsetTable":{1:0,2:15}}); answers GET_ALL_DELAY_OFFSET (45). Why: delay-retry.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.base.fsio import atomic_write, read_with_backup
from orbitmq.broker.metadata.offset_versions import DelayOffsetTable  # C: data version of the delay offsets
from orbitmq.model.message import MessageExt
from orbitmq.model.properties import Prop
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.store import STORED_STATUSES, MessageInner, PutResult
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.layout import CQ_FILLER
from orbitmq.store.schedule import SCHEDULE_TOPIC, corrected_due, parse_delay_levels

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.services import ServiceEnv

log = logging.getLogger(__name__)

FILE_NAME = "delayOffset.json"
PERSIST_INTERVAL_S = 2.0  # progress is persisted this often (RocketMQ: 10 s) and at stop
RETRY_MS = 100  # after a failed re-put
IDLE_RECHECK_S = 1.0  # an idle level re-reads its queue at least this often (wakes come from dispatch)
MAX_SLEEP_S = 60.0
READ_BATCH = 64
_FILLER_SIZE = CQ_FILLER[1]
# statuses meaning "the copy is in the commit log": the schedule offset may advance


# ---- C (pre-online): offsets persistence with a data version; see metadata/offset_versions.py ----
def encode_offsets(table: dict[int, int]) -> bytes:
    """delayOffset.json in RocketMQ's fastjson form: {"dataVersion":{..},"offsetTable":{1:0,2:15}} (no
    dataVersion for a plain dict)."""
    if isinstance(table, DelayOffsetTable):
        return table.encode()
    return fastjson.dumps({"offsetTable": {int(k): int(v) for k, v in sorted(table.items())}})


def decode_offsets(data: bytes) -> DelayOffsetTable:
    """A 5.x (with dataVersion) or 4.x delayOffset.json / GET_ALL_DELAY_OFFSET body; ValueError if unusable."""
    return DelayOffsetTable.decode(data)
# ---- end C ----


def delivery_copy(msg: MessageExt) -> MessageInner | None:
    """The message a due schedule entry becomes: real topic/queue restored, DELAY removed, WAIT=false; body, flag,
    properties (REAL_TOPIC/REAL_QID kept, as RocketMQ does), sys flag, born info, store host, reconsume times
    unchanged. None when the record carries no REAL_TOPIC (nothing to deliver to)."""
    props = dict(msg.properties)
    topic = props.get(Prop.REAL_TOPIC)
    if not topic:
        return None
    try:
        queue_id = int(props.get(Prop.REAL_QID) or 0)
    except ValueError:
        queue_id = 0
    props.pop(Prop.DELAY, None)
    props[Prop.WAIT] = "false"
    return MessageInner(topic, queue_id, msg.body, props, msg.flag, msg.sys_flag, msg.born_timestamp,
                        msg.born_host, msg.store_host, msg.reconsume_times, msg.prepared_transaction_offset)


class ScheduleService:
    name = "delay"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        self.clock = env.clock
        self.levels = parse_delay_levels(ctx.config.message_delay_level)
        self.path = os.path.join(env.config_dir, FILE_NAME)
        self.offsets: DelayOffsetTable = DelayOffsetTable()  # level -> next schedule-queue offset (C: versioned)
        self._wakes = [asyncio.Event() for _ in self.levels]
        self._persisted: dict[int, int] = {}
        self._barrier_failed = False
        self._listening = False
        self.delivered = 0

    # ---- lifecycle ----
    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {int(RequestCode.GET_ALL_DELAY_OFFSET): self._get_all_delay_offset}

    async def start(self) -> None:
        self.offsets = self._load()
        self._persisted = dict(self.offsets)
        if not self._listening:
            self.ctx.store.add_dispatch_listener(self._on_dispatch, topics=(SCHEDULE_TOPIC,))
            listeners = getattr(self.ctx, "role_listeners", None)  # absent on test doubles of the context
            if listeners is not None:
                listeners.append(self._on_role_change)
            self._listening = True

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for level in range(1, len(self.levels) + 1):
                tg.create_task(self._level_loop(level), name=f"delay level {level}")
            tg.create_task(self._persist_loop(), name="delay offset persist")

    async def stop(self) -> None:
        try:
            await self.ctx.store.durable_barrier()  # SYNC_FLUSH: the re-puts are flushed before progress moves
        except Exception as e:  # a failed flush: keep the old progress (re-delivery after restart, never loss)
            log.error("delay offsets not persisted at stop: the CommitLog flush failed (%r)", e)
            return
        self.persist()

    # ---- persistence ----
    def _load(self) -> DelayOffsetTable:
        for data in read_with_backup(self.path):
            try:
                return decode_offsets(data)
            except (ValueError, TypeError, AttributeError) as e:
                log.warning("%s unreadable (%s); trying its backup", self.path, e)
        return DelayOffsetTable()

    def persist(self) -> None:
        snap = dict(self.offsets)
        if snap != self._persisted:
            atomic_write(self.path, self.offsets.encode(settle=True))  # C: a persisted change advances the version
            self._persisted = snap

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL_S)
            snap = dict(self.offsets)
            if snap != self._persisted:
                data = self.offsets.encode(settle=True)  # C: versioned; taken before the barrier (loops go on)
                try:  # SYNC_FLUSH: every re-put counted in `data` is flushed before the offsets claim it
                    await self.ctx.store.durable_barrier()
                except Exception as e:  # the store is read-only now: the progress never moves past its flush
                    if not self._barrier_failed:
                        log.error("delay offsets no longer persisted: the CommitLog flush failed (%r)", e)
                    self._barrier_failed = True
                    continue
                await self.env.writes.run(atomic_write, self.path, data)
                self._persisted = snap

    # ---- delivery ----
    def _on_role_change(self, acting: bool) -> None:
        for wake in self._wakes:
            wake.set()

    def _on_dispatch(self, req: DispatchRequest) -> None:
        if req.topic == SCHEDULE_TOPIC and 0 <= req.queue_id < len(self._wakes):
            self._wakes[req.queue_id].set()

    async def _level_loop(self, level: int) -> None:
        wake = self._wakes[level - 1]
        while True:
            if not self.ctx.serves_as_master():  # a plain slave's copy follows through replication
                wake.clear()
                recheck = asyncio.get_running_loop().call_later(IDLE_RECHECK_S, wake.set)
                try:
                    await wake.wait()  # a role change (acting master) wakes every level at once
                finally:
                    recheck.cancel()
                continue
            wake.clear()
            wait_ms = await self.deliver_due(level)
            timeout = IDLE_RECHECK_S if wait_ms is None else min(wait_ms / 1000, MAX_SLEEP_S)
            if wait_ms is not None:  # the next entry is not due yet: newer entries of this level are due even later
                await asyncio.sleep(timeout)
                continue
            recheck = asyncio.get_running_loop().call_later(timeout, wake.set)  # no helper task per wait
            try:
                await wake.wait()
            finally:
                recheck.cancel()

    async def deliver_due(self, level: int) -> int | None:
        """Re-put every due entry of one level. Returns ms until the next entry is due, RETRY_MS after a failed
        put, None when the level's queue is drained. The offset advances only after a successful put."""
        store = self.ctx.store
        cq = store.cq_table.find(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return None
        delay_ms = self.levels[level - 1]
        offset = self.offsets.get(level, 0)
        if offset < cq.min_offset:
            offset = cq.min_offset
            self.offsets[level] = offset
        while offset < cq.max_offset:
            entries = cq.read(offset, READ_BATCH)
            if not entries:  # hole at a segment boundary
                offset = min(cq.segment_end_offset(offset), cq.max_offset)
                self.offsets[level] = offset
                continue
            for phys, size, tags_code in entries:
                if size != _FILLER_SIZE:
                    now = self.clock.now_ms()
                    due = corrected_due(tags_code, delay_ms, now)
                    if due > now:
                        return due - now
                    if not await self._redeliver(level, offset, phys):
                        return RETRY_MS
                offset += 1
                self.offsets[level] = offset
        return None

    async def _redeliver(self, level: int, offset: int, phys: int) -> bool:
        store = self.ctx.store
        msg = store.look_message_by_offset(phys)
        if msg is None:
            if phys < store.commitlog.min_offset:
                log.warning("delay level %d offset %d: message at %d was deleted; skipped", level, offset, phys)
                return True
            log.warning("delay level %d offset %d: message at %d unreadable; skipped", level, offset, phys)
            return True
        inner = delivery_copy(msg)
        if inner is None:
            log.warning("delay level %d offset %d: message %s has no REAL_TOPIC; skipped", level, offset,
                        msg.msg_id)
            return True
        result = await self._put(inner)
        if result.status not in STORED_STATUSES:
            log.warning("delay level %d: re-put of %s failed (%s); retrying", level, msg.msg_id, result.status)
            return False
        self.delivered += 1
        return True

    async def _put(self, inner: MessageInner) -> PutResult:
        """Through the escape bridge: the local store on a master, another group's master when acting."""
        escape = getattr(self.ctx, "escape", None)
        if escape is None:
            return await self.ctx.store.put_message(inner)
        result: PutResult = await escape.put(inner)
        return result

    # ---- GET_ALL_DELAY_OFFSET (45) ----
    def _get_all_delay_offset(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, None, body=encode_offsets(self.offsets))


def create(ctx: BrokerContext, env: ServiceEnv) -> ScheduleService | None:
    return ScheduleService(ctx, env)
