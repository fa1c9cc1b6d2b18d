"""PushConsumer: rebalance (clustering) or take-all (broadcasting), one long-polling pull loop per owned queue,
flow control, offset bookkeeping and hand-off to the concurrent or orderly consume service.

Every task lives in one TaskSet; shutdown stops them, persists offsets, unlocks queues and unregisters.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orbitmq.base import marks
from orbitmq.base.clock import monotonic_ms, now_ms
from orbitmq.base.errors import OrbitMQError, RemotingError
from orbitmq.client import broker_api
from orbitmq.client.broker_api import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND, PullStatus
from orbitmq.client.consume import (
    ConcurrentConsumeService,
    ConsumeOrderlyResult,
    ConsumeResult,
    Listener,
    OrderlyConsumeService,
    call_listener,
)
from orbitmq.client.errors import ClientError, ClientStateError, FlowControlError, ResponseError
from orbitmq.client.instance import ClientInstance, TlsOption, session_credentials
from orbitmq.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.client.producer import Producer
from orbitmq.client.rebalance import AllocateAveragely, AllocateStrategy, allocate
from orbitmq.client.tasks import TaskSet, run_periodic
from orbitmq.model import Message, MessageExt, MessageQueue, Prop, tags_of_expression
from orbitmq.protocol.bodies import ConsumerData, SubscriptionData

log = logging.getLogger(__name__)

CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")
PULL_RETRY_MS = 3_000
FLOW_CONTROL_RETRY_MS = 20
FLOW_PAUSE_MS = 50
OFFSET_MOVED_DELAY_MS = 10_000
MAX_SPAN = 2_000
MAX_CACHED_MIB_PER_QUEUE = 100
MAX_RECONSUME_TIMES = 16
SHUTDOWN_AWAIT_MS = 5_000  # how long shutdown waits for listener calls in progress before it commits and closes


@dataclass(slots=True)
class _Sub:
    topic: str
    expression: str
    data: SubscriptionData
    tags: frozenset[str] | None
    listener: Listener | None


class PushConsumer:
    def __init__(self, group: str, namesrv: str, *, message_model: str = "CLUSTERING",
                 consume_from_where: str = "CONSUME_FROM_LAST_OFFSET", consume_timestamp: int | None = None,
                 pull_batch_size: int = 32, consume_batch_size: int = 1, max_cached_messages_per_queue: int = 1000,
                 orderly: bool = False, persist_offset_interval_ms: int = 5000, instance_name: str | None = None,
                 offsets_dir: str | os.PathLike[str] | None = None, consume_concurrency: int = 20,
                 allocate_strategy: AllocateStrategy | None = None, rebalance_interval_ms: int = 20_000,
                 lock_interval_ms: int = 20_000, suspend_ms: int = 15_000, pull_timeout_ms: int = 30_000,
                 listener_in_thread: bool = True, max_reconsume_times: int = MAX_RECONSUME_TIMES,
                 lock_max_live_ms: int = 30_000,
                 access_key: str | None = None, secret_key: str | None = None,
                 tls: TlsOption = None) -> None:
        if message_model not in ("CLUSTERING", "BROADCASTING"):
            raise ClientStateError(f"message_model must be CLUSTERING or BROADCASTING, not {message_model!r}")
        if consume_from_where not in CONSUME_FROM:
            raise ClientStateError(f"consume_from_where must be one of {CONSUME_FROM}")
        self.group = group
        self.namesrv = namesrv
        self.message_model = message_model
        self.clustering = message_model == "CLUSTERING"
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = max(1, consume_batch_size)
        self.max_cached = max_cached_messages_per_queue
        self.orderly = orderly
        self.persist_offset_interval_ms = persist_offset_interval_ms
        self.instance_name = instance_name
        self.credentials = session_credentials(access_key, secret_key)  # RocketMQ ACL: sign every request
        self.tls = tls  # True or an ssl.SSLContext: TLS to name servers and brokers
        self.offsets_dir = Path(offsets_dir) if offsets_dir else Path.home() / ".orbitmq_offsets"
        self.consume_concurrency = consume_concurrency
        self.strategy: AllocateStrategy = allocate_strategy or AllocateAveragely()
        self.rebalance_interval_ms = rebalance_interval_ms
        self.lock_interval_ms = lock_interval_ms
        self.lock_max_live_ms = lock_max_live_ms  # orderly: stop consuming a queue not re-locked for this long
        self.suspend_ms = suspend_ms
        self.pull_timeout_ms = pull_timeout_ms
        self.listener_in_thread = listener_in_thread
        self.max_reconsume_times = max_reconsume_times
        self.retry_topic = f"%RETRY%{group}"
        self._subs: dict[str, _Sub] = {}
        self._default_listener: Listener | None = None
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._queue_tasks: dict[MessageQueue, list[asyncio.Task[Any]]] = {}
        self._inst: ClientInstance | None = None
        self._offsets: OffsetStore | None = None
        self._tasks = TaskSet(f"consumer {group}")
        self._rebalance_wake = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._concurrent: ConcurrentConsumeService | None = None
        self._orderly: OrderlyConsumeService | None = None
        self._wakes: dict[MessageQueue, asyncio.Event] = {}
        self._retry_producer: Producer | None = None
        self._start_ms = 0

    # ---- configuration ----------------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", listener: Listener | None = None, *,
                  expression_type: str = "TAG") -> None:
        """Subscribe before start(); `listener(msgs) -> ConsumeResult` (or ConsumeOrderlyResult), sync or async.
        A listener given once is the default for topics subscribed without one. expression_type="SQL92" filters
        by properties on the broker (enablePropertyFilter=true there)."""
        if self._inst is not None:
            raise ClientStateError("subscribe before start()")
        sd = SubscriptionData.of_expression(topic, expression, now_ms(), expression_type)
        tags = tags_of_expression(expression) if sd.expression_type == "TAG" else None
        self._subs[topic] = _Sub(topic, sd.sub_string, sd, tags, listener)
        if listener is not None and self._default_listener is None:
            self._default_listener = listener

    def register_listener(self, listener: Listener) -> None:
        self._default_listener = listener

    def listener_for(self, topic: str) -> Listener:
        sub = self._subs.get(topic)
        listener = (sub.listener if sub else None) or self._default_listener
        if listener is None:
            raise ClientStateError(f"no listener for topic {topic}")
        return listener

    # ---- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._inst is not None:
            return
        if not self._subs:
            raise ClientStateError("subscribe to at least one topic before start()")
        if self._default_listener is None and any(s.listener is None for s in self._subs.values()):
            raise ClientStateError("a listener is required")
        if self.clustering and self.retry_topic not in self._subs:
            sd = SubscriptionData.of_expression(self.retry_topic, "*", now_ms())
            self._subs[self.retry_topic] = _Sub(self.retry_topic, "*", sd, None, None)
        inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials, tls=self.tls)
        try:
            inst.register_consumer(self.group, self)
        except ClientError:
            await inst.release()
            raise
        self._inst = inst
        self._start_ms = now_ms()
        self._tasks = TaskSet(f"consumer {self.group}")
        if self.clustering:
            self._offsets = RemoteOffsetStore(self._fetch_offset, self._commit_offset)
        else:
            self._offsets = LocalFileOffsetStore(self.offsets_dir, inst.client_id, self.group)
            self._offsets.load()
        self._retry_producer = Producer("CLIENT_INNER_PRODUCER", self.namesrv, instance_name=self.instance_name,
                                        _internal=True)
        self._retry_producer.credentials = self.credentials  # same instance, same keys
        await self._retry_producer.start()
        if self.orderly:
            self._orderly = OrderlyConsumeService(self, self.consume_batch_size, self.listener_in_thread)
        else:
            self._concurrent = ConcurrentConsumeService(self, self.consume_concurrency, self.listener_in_thread)
            for i in range(self.consume_concurrency):
                self._tasks.spawn(self._concurrent.run_worker_loop(self._spawn), name=f"consume-worker-{i}")
        for topic in self._subs:
            try:
                await inst.update_route(topic)
            except OrbitMQError as e:
                log.info("no route yet for %s: %s", topic, e)
        await inst.send_heartbeat_to_all()
        await self._safe_rebalance()
        self._tasks.spawn(run_periodic("rebalance", self.rebalance_interval_ms, self._safe_rebalance,
                                       wake=self._rebalance_wake), name="rebalance")
        self._tasks.spawn(run_periodic("persist offsets", self.persist_offset_interval_ms, self.persist_offsets),
                          name="persist-offsets")
        if self.orderly and self.clustering:
            self._tasks.spawn(run_periodic("lock queues", self.lock_interval_ms, self.lock_all), name="lock")

    async def shutdown(self, await_terminate_ms: int = SHUTDOWN_AWAIT_MS) -> None:
        """Stop consuming, commit the offsets and leave the group. A concurrent consumer first starts no new batch
        and waits up to `await_terminate_ms` for the batches its listener is consuming, so that the commit covers
        them (RocketMQ's shutdown(awaitTerminateMillis)); 0 cancels them at once (their messages come again)."""
        inst = self._inst
        if inst is None:
            return
        if self._concurrent is not None and await_terminate_ms > 0:  # running batches finish, committed below
            if not await self._concurrent.drain(await_terminate_ms / 1000):
                log.warning("%s: listener calls still running after %d ms at shutdown: their messages will be "
                            "consumed again", self.group, await_terminate_ms)
        await self._tasks.close()
        for pq in self._pqs.values():
            pq.dropped = True
        try:
            if self._offsets is not None:
                await self._offsets.persist_all(list(self._pqs), oneway=False)
        except OrbitMQError as e:
            log.warning("final offset persist failed: %s", e)
        if self.orderly and self.clustering:
            await self._unlock(list(self._pqs), oneway=False)
        self._pqs.clear()
        self._queue_tasks.clear()
        self._wakes.clear()
        if self._retry_producer is not None:
            await self._retry_producer.shutdown()
            self._retry_producer = None
        await inst.unregister(consumer_group=self.group)
        self._inst = None
        await inst.release()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        return self._tasks.spawn(coro, name=name)

    def _instance(self) -> ClientInstance:
        if self._inst is None:
            raise ClientStateError(f"consumer {self.group} is not started")
        return self._inst

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        return sorted(self._pqs)

    # ---- ConsumerHook (called by the instance) ----------------------------------------------------------------
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, "CONSUME_PASSIVELY", self.message_model, self.consume_from_where,
                            [s.data for s in self._subs.values()])

    def subscribed_topics(self) -> set[str]:
        return set(self._subs)

    def trigger_rebalance(self) -> None:
        self._rebalance_wake.set()

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]:
        if self._offsets is None:
            return {}
        return {mq: o for mq, o in self._offsets.table.items() if mq.topic == topic}

    async def reset_offset(self, topic: str, table: dict[MessageQueue, int]) -> None:
        """Broker-driven reset (RESET_CONSUMER_CLIENT_OFFSET): drop the queues, store the offsets, rebalance."""
        async with self._rebalance_lock:
            for mq in [m for m in self._pqs if m.topic == topic]:
                await self._remove_queue(mq, persist=False)
            assert self._offsets is not None
            for mq, off in table.items():
                self._offsets.update(mq, off)
                try:
                    await self._offsets.persist(mq)
                except OrbitMQError as e:
                    log.warning("persist of reset offset %s failed: %s", mq, e)
        self.trigger_rebalance()

    def running_info(self) -> dict[str, Any]:
        mq_table = {}
        for mq, pq in self._pqs.items():
            mq_table[mq] = {
                "commitOffset": self._offsets.read_memory(mq) if self._offsets else -1,
                "cachedMsgCount": pq.cached_count, "cachedMsgSizeInMiB": pq.cached_bytes // (1 << 20),
                "cachedMsgMinOffset": pq.commit_offset(), "cachedMsgMaxOffset": pq.max_offset_seen,
                "locked": pq.locked, "droped": pq.dropped, "lastLockTimestamp": pq.last_lock_ms,
                "lastPullTimestamp": pq.last_pull_ms, "lastConsumeTimestamp": pq.last_consume_ms,
                "tryUnlockTimes": 0, "transactionMsgCount": 0, "transactionMsgMinOffset": 0,
                "transactionMsgMaxOffset": 0,
            }
        return {
            "properties": {
                "PROP_NAMESERVER_ADDR": self.namesrv, "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
                "PROP_CONSUMEORDERLY": str(self.orderly).lower(), "PROP_THREADPOOL_CORE_SIZE":
                str(self.consume_concurrency), "PROP_CONSUMER_START_TIMESTAMP": str(self._start_ms),
                "PROP_CLIENT_VERSION": "V4_9_8", "messageModel": self.message_model,
                "consumeFromWhere": self.consume_from_where, "pullBatchSize": str(self.pull_batch_size),
                "consumeMessageBatchMaxSize": str(self.consume_batch_size), "language": "PYTHON",
            },
            "subscriptionSet": [s.data.to_json_obj() for s in self._subs.values()],
            "mqTable": mq_table,
            "statusTable": {},
            "jstack": "",
        }

    async def consume_directly(self, body: bytes | None) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on one message sent by the broker (admin tooling)."""
        msgs = broker_api.decode_messages(body)
        if not msgs:
            raise ClientStateError("no message in CONSUME_MESSAGE_DIRECTLY body")
        start = monotonic_ms()
        remark = None
        try:
            status = await call_listener(self.listener_for(msgs[0].topic), msgs, self.listener_in_thread)
            ok = status in (ConsumeResult.SUCCESS, ConsumeOrderlyResult.SUCCESS)
            result = "CR_SUCCESS" if ok else "CR_LATER"
        except Exception as e:  # noqa: BLE001 - reported to the admin
            result, remark = "CR_THROW_EXCEPTION", f"{type(e).__name__}: {e}"
        return {"order": self.orderly, "autoCommit": True, "consumeResult": result, "remark": remark,
                "spentTimeMills": monotonic_ms() - start}

    # ---- ConsumeOwner (called by the consume services) --------------------------------------------------------
    def on_consumed(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if self._offsets is not None and mq in self._pqs:
            self._offsets.update(mq, offset, increase_only=increase_only)

    async def send_back(self, mq: MessageQueue, msg: MessageExt, delay_level: int = 0) -> bool:
        """CONSUMER_SEND_MSG_BACK (delay level 0 = broker decides, -1 = straight to %DLQ%); if that fails, publish
        the message to %RETRY%<group> ourselves. False = both failed (the caller retries locally)."""
        inst = self._instance()
        try:
            addr = await inst.find_broker_addr(mq)
            await broker_api.send_msg_back(inst, addr, self.group, msg, delay_level, self.max_reconsume_times)
            return True
        except (OrbitMQError, OSError) as e:
            log.info("send-back of %s failed (%s); publishing to %s", msg.msg_id, e, self.retry_topic)
        props = dict(msg.properties)
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.msg_id)
        props[Prop.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[Prop.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        props[Prop.DELAY] = str(3 + msg.reconsume_times)
        props.pop(Prop.UNIQ_KEY, None)
        try:
            assert self._retry_producer is not None
            # Until the name server knows %RETRY%<group> (the broker creates it on our heartbeat), address its
            # queue 0 on the same broker directly rather than guessing queues from the TBW102 route.
            queue = None if inst.routes.get(self.retry_topic) else MessageQueue(self.retry_topic, mq.broker_name, 0)
            await self._retry_producer.send(Message(self.retry_topic, msg.body, props, msg.flag), queue=queue)
            return True
        except (OrbitMQError, OSError) as e:
            log.warning("publishing %s to %s failed: %s", msg.msg_id, self.retry_topic, e)
            return False

    # ---- offsets ----------------------------------------------------------------------------------------------
    async def _fetch_offset(self, mq: MessageQueue) -> int:
        inst = self._instance()
        return await broker_api.query_consumer_offset(inst, await inst.find_broker_addr(mq), self.group, mq)

    async def _commit_offset(self, mq: MessageQueue, offset: int, oneway: bool) -> None:
        inst = self._instance()
        await broker_api.update_consumer_offset(inst, await inst.find_broker_addr(mq), self.group, mq, offset,
                                                oneway=oneway)

    async def persist_offsets(self) -> None:
        if self._offsets is not None:
            await self._offsets.persist_all(list(self._pqs))

    async def _compute_pull_from(self, mq: MessageQueue) -> int:
        """Stored offset, else per consume_from_where (retry topics start at 0 / max)."""
        assert self._offsets is not None
        stored = await self._offsets.read(mq, from_store=True)
        if stored >= 0:
            return stored
        inst = self._instance()
        addr = await inst.find_broker_addr(mq)
        is_retry = mq.topic.startswith("%RETRY%")
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return 0
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP" and not is_retry:
            ts = self.consume_timestamp if self.consume_timestamp is not None else self._start_ms - 30 * 60_000
            return await broker_api.search_offset(inst, addr, mq, ts)
        if is_retry and self.consume_from_where == "CONSUME_FROM_LAST_OFFSET":
            return 0
        return await broker_api.max_offset(inst, addr, mq)

    # ---- rebalance --------------------------------------------------------------------------------------------
    async def _safe_rebalance(self) -> None:
        try:
            await self.rebalance()
        except (OrbitMQError, OSError) as e:
            log.info("rebalance of %s failed: %s", self.group, e)

    async def rebalance(self) -> None:
        """Recompute the owned queues of every subscribed topic and start/stop queue loops accordingly."""
        inst = self._instance()
        async with self._rebalance_lock:
            for topic in list(self._subs):
                route = inst.routes.get(topic) or await inst.update_route(topic)
                if route is None:
                    continue
                mq_all = route.subscribe_queues(topic)
                if self.clustering:
                    try:
                        cids = await inst.consumer_id_list(topic, self.group)
                    except (OrbitMQError, OSError) as e:
                        log.info("consumer list of %s for %s unavailable: %s", self.group, topic, e)
                        continue
                    if not cids:
                        continue
                    mine = set(allocate(self.strategy, self.group, inst.client_id, mq_all, cids))
                else:
                    mine = set(mq_all)
                await self._update_assignment(topic, mine)

    async def _update_assignment(self, topic: str, mine: set[MessageQueue]) -> None:
        for mq in [m for m in self._pqs if m.topic == topic and m not in mine]:
            marks.hit("rebalance removed queue")
            await self._remove_queue(mq, persist=True)
        added = [mq for mq in sorted(mine) if mq not in self._pqs]
        if added and self.orderly and self.clustering:
            locked = await self._lock(added)
            added = [mq for mq in added if mq in locked]
        for mq in added:
            try:
                offset = await self._compute_pull_from(mq)
            except (OrbitMQError, OSError) as e:
                log.info("cannot compute start offset of %s: %s", mq, e)
                continue
            self._add_queue(mq, offset, locked=self.orderly and self.clustering)

    def _add_queue(self, mq: MessageQueue, offset: int, *, locked: bool) -> None:
        marks.hit("rebalance added queue")
        pq = ProcessQueue()
        pq.locked = locked
        pq.last_lock_ms = monotonic_ms()
        self._pqs[mq] = pq
        tasks = [self._tasks.spawn(self._run_pull_loop(mq, pq, offset), name=f"pull-{mq.topic}-{mq.queue_id}")]
        if self._orderly is not None:
            wake = self._wakes[mq] = asyncio.Event()
            tasks.append(self._tasks.spawn(self._orderly.run_queue_loop(mq, pq, wake),
                                           name=f"orderly-{mq.topic}-{mq.queue_id}"))
        self._queue_tasks[mq] = tasks

    async def _remove_queue(self, mq: MessageQueue, *, persist: bool) -> None:
        pq = self._pqs.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        for t in self._queue_tasks.pop(mq, []):
            if t is not asyncio.current_task():
                t.cancel()
        self._wakes.pop(mq, None)
        assert self._offsets is not None
        if persist and self.clustering:
            try:
                await self._offsets.persist(mq)
            except (OrbitMQError, OSError) as e:
                log.warning("persist offset of removed %s failed: %s", mq, e)
        if self.clustering:
            self._offsets.remove(mq)
        if self.orderly and self.clustering:
            await self._unlock([mq], oneway=True)
        pq.clear()

    # ---- orderly locks ----------------------------------------------------------------------------------------
    async def _lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        inst = self._instance()
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        locked: set[MessageQueue] = set()
        for name, group in by_broker.items():
            try:
                addr = await inst.find_broker_addr(group[0])
                locked |= await broker_api.lock_batch(inst, addr, inst.client_id, self.group, group)
            except (OrbitMQError, OSError) as e:
                log.info("lock of %d queues on %s failed: %s", len(group), name, e)
        return locked

    async def _unlock(self, mqs: list[MessageQueue], *, oneway: bool) -> None:
        inst = self._instance()
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for name, group in by_broker.items():
            try:
                addr = await inst.find_broker_addr(group[0])
                await broker_api.unlock_batch(inst, addr, inst.client_id, self.group, group, oneway=oneway)
            except (OrbitMQError, OSError) as e:
                log.info("unlock on %s failed: %s", name, e)

    async def lock_all(self) -> None:
        """Re-lock every owned queue (every 20 s). A queue whose lock lapsed (refused: another client holds it)
        is dropped with its cached messages, without persisting our offset over the new owner's; the next
        rebalance re-adds it (locked, from the broker's offset) if it is still ours."""
        async with self._rebalance_lock:
            mqs = list(self._pqs)
            if not mqs:
                return
            locked = await self._lock(mqs)
            now = monotonic_ms()
            for mq in mqs:
                pq = self._pqs.get(mq)
                if pq is None:
                    continue
                pq.locked = mq in locked
                if pq.locked:
                    pq.last_lock_ms = now
                    wake = self._wakes.get(mq)
                    if wake is not None:
                        wake.set()
                else:
                    marks.hit("orderly queue lock lapsed")
                    await self._remove_queue(mq, persist=False)

    # ---- pulling ----------------------------------------------------------------------------------------------
    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        if pq.cached_count > self.max_cached or pq.cached_bytes > MAX_CACHED_MIB_PER_QUEUE << 20:
            return True
        return not self.orderly and pq.offset_span() > MAX_SPAN

    async def _run_pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        inst = self._instance()
        sub = self._subs[mq.topic]
        broker_id = 0
        next_offset = offset
        while not pq.dropped:
            if self._flow_controlled(pq):
                marks.hit("consumer flow control")
                await asyncio.sleep(FLOW_PAUSE_MS / 1000)
                continue
            if self.orderly and self.clustering and not pq.locked:
                await asyncio.sleep(PULL_RETRY_MS / 1000)
                continue
            commit = self._offsets.read_memory(mq) if (self.clustering and self._offsets) else -1
            sys_flag = PULL_FLAG_SUSPEND
            if commit > 0 and broker_id == 0:
                sys_flag |= PULL_FLAG_COMMIT_OFFSET
            try:
                addr = await inst.find_broker_addr(mq, broker_id)
                header = broker_api.pull_header(self.group, mq, next_offset, self.pull_batch_size, sys_flag,
                                                max(commit, 0), self.suspend_ms, sub.expression,
                                                sub.data.sub_version)
                result = await broker_api.pull(inst, addr, header, self.pull_timeout_ms, sub.tags)
            except FlowControlError:
                await asyncio.sleep(FLOW_CONTROL_RETRY_MS / 1000)
                continue
            except (ResponseError, RemotingError, ClientError, OrbitMQError, OSError) as e:
                marks.hit("consumer pull error")
                log.debug("pull %s@%d failed: %s", mq, next_offset, e)
                broker_id = 0
                await asyncio.sleep(PULL_RETRY_MS / 1000)
                continue
            pq.last_pull_ms = monotonic_ms()
            if pq.dropped:
                return
            broker_id = result.suggest_which_broker_id
            status = result.status
            if status is PullStatus.OFFSET_ILLEGAL:
                await self._on_offset_moved(mq, pq, result.next_begin_offset)
                return
            next_offset = result.next_begin_offset
            if status is PullStatus.FOUND and result.msgs:
                self._deliver(mq, pq, result.msgs)
            else:
                self._correct_tags_offset(mq, pq, next_offset)

    def _deliver(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        pq.put(msgs)
        if self._concurrent is not None:
            self._concurrent.submit(mq, pq, msgs, self.consume_batch_size)
        else:
            wake = self._wakes.get(mq)
            if wake is not None:
                wake.set()

    def _correct_tags_offset(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """Nothing matched / nothing new and nothing cached: the consumed offset may jump to next_offset."""
        if pq.cached_count == 0 and self._offsets is not None:
            self._offsets.update(mq, next_offset, increase_only=True)

    async def _on_offset_moved(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """PULL_OFFSET_MOVED: drop the queue, wait 10 s, store next_offset, let the next rebalance re-add it."""
        marks.hit("consumer offset moved")
        log.warning("offset of %s moved; continuing at %d", mq, next_offset)
        pq.dropped = True
        await asyncio.sleep(OFFSET_MOVED_DELAY_MS / 1000)
        assert self._offsets is not None
        self._offsets.update(mq, next_offset)
        try:
            await self._offsets.persist(mq)
        except (OrbitMQError, OSError) as e:
            log.warning("persist of moved offset %s failed: %s", mq, e)
        if self._pqs.get(mq) is pq:
            del self._pqs[mq]
            for t in self._queue_tasks.pop(mq, []):
                if t is not asyncio.current_task():
                    t.cancel()
            self._wakes.pop(mq, None)
        self.trigger_rebalance()
