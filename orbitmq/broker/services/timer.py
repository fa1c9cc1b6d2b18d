"""Timer messages (RocketMQ 5 style: TIMER_DELIVER_MS / __STARTDELIVERTIME absolute, TIMER_DELAY_SEC /
TIMER_DELAY_MS relative): a SendHook diverting future messages into rmq_sys_wheel_timer, and the service that
moves them into the persistent timing wheel (timer_log.py) and puts each back to its real topic when due.

Never early: a slot is walked when its second starts and each entry is put back once now >= its deliver ms.
Memory is O(entries of the second being delivered); everything pending lives in the wheel and timer log files.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import time
from typing import Any

from orbitmq.base.errors import CorruptionError, StoreError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.timer_log import TimerStore
from orbitmq.broker.services.timer_wheel import (
    TIMER_DELIVER_MS,
    TIMER_ENQUEUE_MS,
    TIMER_GROUP,
    TIMER_KEYS,
    TIMER_TOPIC,
    deliver_ms_of,
    delivered_properties,
)
from orbitmq.model.enums import SysFlag, transaction_type
from orbitmq.model.record import decode_record
from orbitmq.protocol import ResponseCode
from orbitmq.store import STORED_STATUSES, DispatchRequest, GetStatus, MessageInner

log = logging.getLogger(__name__)

_MIN_SLEEP_MS = 5  # deliveries are batched per 5 ms: a due entry waits at most that long (plus loop latency)
_COMMIT_INTERVAL_MS = 1000
_CATCH_UP_BATCH = 1024
_PUT_RETRY_MS = 100


def _wake_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class TimerSendHook:
    """before_put: diverts timer messages (delivery time in the future) into rmq_sys_wheel_timer queue 0."""

    after_put_noop = True  # nothing to do after a put: the send handler skips the call
    # a single send to another topic without timer properties: before_put is skipped (it would return None)
    before_put_acts_on = (frozenset({TIMER_TOPIC}), TIMER_KEYS)

    def __init__(self, ctx: BrokerContext, clock: Any) -> None:
        self.ctx = ctx
        self.clock = clock
        self.diverted = 0

    def _reject(self, req: Any, remark: str) -> Any:
        resp = req.response(ResponseCode.MESSAGE_ILLEGAL, remark)
        cfg = self.ctx.config
        resp.ext_fields = {"MSG_REGION": cfg.region_id, "TRACE_ON": "true" if cfg.trace_on else "false"}
        return resp

    def before_put(self, conn: Any, req: Any, msgs: list[MessageInner]) -> Any | None:
        for msg in msgs:
            if msg.topic == TIMER_TOPIC:
                return self._reject(req, f"Sending message to topic[{TIMER_TOPIC}] is forbidden.")
            props = msg.properties
            if TIMER_KEYS.isdisjoint(props):
                continue
            if len(msgs) > 1:
                return self._reject(req, "timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS / "
                                         "__STARTDELIVERTIME) can not be sent in a batch")
            if "REAL_TOPIC" in props or transaction_type(msg.sys_flag) == SysFlag.TRANSACTION_PREPARED:
                return None  # a delay level (already rewritten) or a half message: those mechanisms win
            now = self.clock.now_ms()
            try:
                deliver_ms = deliver_ms_of(props, now)
            except ValueError:
                return self._reject(req, "timer message illegal: TIMER_DELIVER_MS / __STARTDELIVERTIME must be "
                                         "milliseconds since the epoch, TIMER_DELAY_SEC / TIMER_DELAY_MS integers")
            if deliver_ms is None or deliver_ms <= now:
                return None  # already due: stored as a plain message
            max_delay_sec = self.ctx.config.timer_max_delay_sec
            if deliver_ms - now > max_delay_sec * 1000:
                return self._reject(req, f"timer message illegal: delay {deliver_ms - now} ms is bigger than the "
                                         f"max delay {max_delay_sec} s (timerMaxDelaySec)")
            props["REAL_TOPIC"] = msg.topic
            props["REAL_QID"] = str(msg.queue_id)
            props[TIMER_DELIVER_MS] = str(deliver_ms)
            props[TIMER_ENQUEUE_MS] = str(now)
            msg.topic = TIMER_TOPIC
            msg.queue_id = 0
            self.diverted += 1
        return None

    def after_put(self, conn: Any, req: Any, msgs: list[Any], result: Any) -> None:
        return None


class TimerService:
    name = "timer"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.clock = env.clock
        self.store = TimerStore(os.path.join(env.store_config.store_path_root_dir, "timerwheel"),
                                os.path.join(env.config_dir, "timercheck.json"), ctx.config.timer_wheel_slots)
        self.hook = TimerSendHook(ctx, env.clock)
        self.cursor_sec = 0  # last walked second: entries due at or before it never enter the wheel again
        self.enqueue_offset = 0  # next rmq_sys_wheel_timer ConsumeQueue offset to enqueue
        self._due: list[tuple[int, int, int]] = []  # heap (deliver_ms, phys_offset, size): the walked second only
        self._lagging = True
        self._waiter: asyncio.Future[None] | None = None
        self._sleep_until_ms = 0
        self._last_commit_ms = 0
        self._opened = False
        self._inflight: asyncio.Future[None] | None = None
        self._commit_failed = False
        self.enqueued = 0
        self.delivered = 0
        self.lost = 0

    def handlers(self) -> dict[int, Any]:
        return {}

    # ---- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        now_sec = self.clock.now_ms() // 1000
        ckpt = self.store.open(default_delivered_sec=now_sec - 1)
        self._opened = True
        self.cursor_sec = ckpt.delivered_sec
        self.enqueue_offset = ckpt.enqueue_offset
        self.store.commit(self.cursor_sec, self.enqueue_offset)  # the recovered state is the new baseline
        self._last_commit_ms = self.clock.now_ms()
        self.ctx.store.add_dispatch_listener(self._on_dispatch, topics=(TIMER_TOPIC,))
        log.info("timer service: delivering from %s (%d s behind), enqueue offset %d, log %d records",
                 time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.cursor_sec)),
                 max(0, now_sec - self.cursor_sec), self.enqueue_offset, self.store.records)

    async def stop(self) -> None:
        # No commit: the walked slot may still hold undelivered entries. The last checkpoint plus the log
        # tail rules make the next start resume exactly there (at-least-once for the last second).
        if self._inflight is not None:  # a checkpoint write still running in its thread (run was cancelled)
            await asyncio.wait([self._inflight])
            self._inflight = None
        if self._opened:
            self._opened = False
            self.store.flush()
            self.store.close()
        log.info("timer service stopped: %d enqueued, %d delivered, %d lost", self.enqueued, self.delivered,
                 self.lost)

    async def run(self) -> None:
        while True:
            if self._lagging:
                await self._catch_up()
            if self.ctx.config.is_slave:  # a slave only files entries; its master puts them back
                await asyncio.sleep(1.0)
                continue
            now = self.clock.now_ms()
            if not self._drain(now):
                await asyncio.sleep(_PUT_RETRY_MS / 1000)
                continue
            walked = 0
            while now >= (self.cursor_sec + 1) * 1000:
                if not await self._advance(now):
                    break
                walked += 1
                if walked % 256 == 0:
                    await asyncio.sleep(0)  # a long catch-up must not starve the broker
                    now = self.clock.now_ms()
            await self._sleep(now)

    async def _sleep(self, now: int) -> None:
        target = (self.cursor_sec + 1) * 1000
        if self._due:
            target = min(target, self._due[0][0])
        target = max(target, now + _MIN_SLEEP_MS)
        # a bare future + call_later (not wait_for on an Event): no helper task per sleep
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later((target - now) / 1000, _wake_up, waiter)
        self._sleep_until_ms = target
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
            self._sleep_until_ms = 0

    def _wake(self) -> None:
        if self._waiter is not None:
            _wake_up(self._waiter)

    # ---- wheel -------------------------------------------------------------------------------------------
    async def _commit(self, now: int) -> None:
        """Checkpoint cursor_sec (fully delivered). The fsyncs run in a worker thread, off the event loop. Under
        SYNC_FLUSH the re-puts of the delivered seconds are flushed first (durable_barrier raises if the CommitLog
        cannot be flushed: the checkpoint then stays where it was)."""
        await self.ctx.store.durable_barrier()
        store = self.store
        ckpt = store.prepare_commit(self.cursor_sec, self.enqueue_offset)
        self._inflight = asyncio.get_running_loop().run_in_executor(None, store.write_checkpoint, ckpt)
        await self._inflight
        self._inflight = None
        store.finish_commit(ckpt)
        self._last_commit_ms = now

    async def _advance(self, now: int) -> bool:
        """Second cursor_sec has fully elapsed: commit it (if needed), then walk the next one."""
        if self._due and self._due[0][0] // 1000 <= self.cursor_sec:
            return False  # something of that second is still undelivered (put refused): retry later
        store = self.store
        if store.detached_slot >= 0 or now - self._last_commit_ms >= _COMMIT_INTERVAL_MS:
            try:
                await self._commit(now)
            except StoreError as e:  # the CommitLog cannot be flushed (read-only store): the checkpoint stays
                if not self._commit_failed:
                    log.error("timer checkpoint not moved: the CommitLog flush failed (%r)", e)
                self._commit_failed = True
                return False
            now = self.clock.now_ms()
        sec = self.cursor_sec + 1
        slot = sec % store.slot_count
        self.cursor_sec = sec
        if store.slot_empty(slot):
            return True
        try:
            entries = store.detach(slot)
        except CorruptionError:
            log.exception("timer wheel slot %d is broken: its entries are lost", slot)
            self.lost += 1
            return True
        due = self._due
        for deliver_ms, phys, size in entries:
            dsec = deliver_ms // 1000
            if dsec < sec:
                continue  # delivered already (left over from a crash between checkpoint and slot update)
            if dsec == sec:
                heapq.heappush(due, (deliver_ms, phys, size))
            else:
                store.append(deliver_ms, phys, size)  # a later revolution: back into this slot's new list
        self._drain(now)
        return True

    def _drain(self, now: int) -> bool:
        """Put every due entry back to its real topic. False when the store refused a put (retry later)."""
        due = self._due
        put = self.ctx.store.put_messages_nowait
        while due and due[0][0] <= now:
            deliver_ms, phys, size = due[0]
            msg = self._delivery(deliver_ms, phys)
            if msg is not None:
                result, _ = put([msg])
                if result.status not in STORED_STATUSES:
                    log.warning("timer: putting back the message at %d failed (%s), retrying", phys,
                                result.status.name)
                    return False
                self.delivered += 1
            heapq.heappop(due)
        return True

    def _delivery(self, deliver_ms: int, phys: int) -> MessageInner | None:
        ext = self.ctx.store.look_message_by_offset(phys)
        if ext is None or ext.topic != TIMER_TOPIC or "REAL_TOPIC" not in ext.properties:
            log.warning("timer: message at %d is gone or not a timer message: dropped", phys)
            self.lost += 1
            return None
        topic, queue_id, props = delivered_properties(ext.properties, deliver_ms)
        return MessageInner(topic, queue_id, ext.body, props, ext.flag, ext.sys_flag, ext.born_timestamp,
                            ext.born_host, self.ctx.store_host, ext.reconsume_times, 0)

    # ---- enqueue (timer topic → wheel) ---------------------------------------------------------------
    def _enqueue(self, deliver_ms: int, phys: int, size: int) -> None:
        if deliver_ms // 1000 <= self.cursor_sec:  # its slot was walked already: deliver from memory
            heapq.heappush(self._due, (deliver_ms, phys, size))
            if self._sleep_until_ms and deliver_ms < self._sleep_until_ms:
                self._wake()
        else:
            self.store.append(deliver_ms, phys, size)  # may raise (disk): the offset then stays for a retry
        self.enqueue_offset += 1
        self.enqueued += 1

    def _on_dispatch(self, req: DispatchRequest) -> None:
        if req.topic != TIMER_TOPIC:
            return
        if not self._opened or self._lagging or req.queue_offset != self.enqueue_offset:
            self._lagging = True
            self._wake()
            return
        try:
            deliver_ms = int(req.properties[TIMER_DELIVER_MS])
        except (KeyError, ValueError):
            log.warning("timer: message at %d has no valid %s: skipped", req.phys_offset, TIMER_DELIVER_MS)
            self.enqueue_offset += 1
            return
        try:
            self._enqueue(deliver_ms, req.phys_offset, req.size)
        except OSError:
            log.exception("timer: enqueue of the message at %d failed; will retry from the queue", req.phys_offset)
            self._lagging = True

    async def _catch_up(self) -> None:
        """Read the timer topic's ConsumeQueue from enqueue_offset to its end (after a restart, or when the
        dispatch listener saw an offset it did not expect)."""
        store = self.ctx.store
        self._lagging = False
        while True:
            end = store.get_max_offset_in_queue(TIMER_TOPIC, 0)
            if self.enqueue_offset >= end:
                return
            r = store.get_message(TIMER_GROUP, TIMER_TOPIC, 0, self.enqueue_offset, _CATCH_UP_BATCH)
            if r.status is not GetStatus.FOUND:
                if r.next_begin_offset > self.enqueue_offset:
                    log.warning("timer: timer topic offsets %d..%d are gone (%s): skipped", self.enqueue_offset,
                                r.next_begin_offset, r.status.name)
                    self.lost += r.next_begin_offset - self.enqueue_offset
                    self.enqueue_offset = r.next_begin_offset
                    continue
                self._lagging = True
                return
            for buf in r.buffers:
                ext = decode_record(buf)
                if ext.queue_offset < self.enqueue_offset:
                    continue
                self.enqueue_offset = ext.queue_offset
                try:
                    deliver_ms = int(ext.properties[TIMER_DELIVER_MS])
                except (KeyError, ValueError):
                    self.enqueue_offset += 1
                    continue
                self._enqueue(deliver_ms, ext.phys_offset, ext.store_size)
            self.enqueue_offset = max(self.enqueue_offset, r.next_begin_offset)
            await asyncio.sleep(0)


def create(ctx: BrokerContext, env: ServiceEnv) -> TimerService | None:
    if not ctx.config.timer_wheel_enable:
        return None
    svc = TimerService(ctx, env)
    ctx.topics.create_system_topic(TIMER_TOPIC, 1)
    ctx.send_hooks.append(svc.hook)
    return svc
