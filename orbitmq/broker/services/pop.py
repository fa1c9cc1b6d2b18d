"""Pop consumption (RocketMQ 5 style): POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
per-group pop offsets (config/popOffset.json), CK/ack records in rmq_sys_REVIVE_LOG_<cluster> and the revive loop
that re-puts unacked messages into %RETRY%<group> (or %DLQ%<group> past the group's retryMaxTimes).
Pop offsets are reserved synchronously on the event loop, so concurrent pops never share a message.

RIP-32: on a slave with enableSlaveActingMaster the service exists without request handlers; it follows the
replicated revive topic and, while acting as master, revives expired CKs: retry messages go through the escape
bridge, the "revived" acks stay local (memory + revive progress) and are handed to the master as ACK_MESSAGE once
it is back, so it does not revive them again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import orjson

from orbitmq.base.errors import OrbitMQError
from orbitmq.base.fsio import atomic_write, read_with_backup
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.pop_revive import (
    ACK_TAG,
    CK_TAG,
    RETRY_FLAG_NONE,
    RETRY_FLAG_V1,
    REVIVE_GROUP,
    CkKey,
    PopCheckpoint,
    ReviveTable,
    ack_json,
    apply_record,
    bitmap_of,
    decode_extra_info,
    encode_extra_info,
    revive_topic,
    split_spans,
)
from orbitmq.model import Perm, Prop, decode_record, encode_properties, encode_record, tags_of_expression
from orbitmq.model.record import pack_host_port
from orbitmq.model.tags import java_hash
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_int, ext_str
from orbitmq.store import GetStatus, MessageInner, PutResult, PutStatus

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
FIRST_POP_TIME = "1ST_POP_TIME"
REVIVE_QUEUE_NUMS = 8
REVIVE_INTERVAL_S = 0.2
MAX_POP_NUMS = 32
MAX_POLL_MS = 30_000
MAX_WAITERS = 10_000
POP_OFFSET_FILE = "popOffset.json"

QueueKey = tuple[str, str, int]  # group, real topic, queue id


class PopService:
    name = "pop"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        self.clock = env.clock
        self.revive_topic = revive_topic(ctx.config.broker_cluster_name)
        self.table = ReviveTable()
        self.reserved: dict[QueueKey, int] = {}  # next offset to pop (in memory, advanced at once)
        self.committed: dict[QueueKey, int] = {}  # advanced once the CK is stored; persisted
        self._dirty = False
        self.read_offsets: list[int] = [0] * REVIVE_QUEUE_NUMS
        self._rr: dict[tuple[str, str], int] = {}
        self._revive_rr = 0
        self._pop_count = 0
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.revived_count = 0
        self.pending_acks: list[tuple[PopCheckpoint, list[int]]] = []  # revived while acting, for the master
        self._path = os.path.join(env.config_dir, POP_OFFSET_FILE)
        ctx.topics.create_system_topic(self.revive_topic, REVIVE_QUEUE_NUMS, Perm.READ | Perm.WRITE)
        ctx.store.add_dispatch_listener(self._on_dispatch, while_nonempty=self._waiters)  # waiting pops only

    @property
    def replica(self) -> bool:
        """A slave's store is a replica: CK/ack records are never written to it. Read at each use: in controller
        mode the role changes at runtime."""
        return self.ctx.config.is_slave

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def handlers(self) -> dict[int, Any]:
        if self.replica and not self.ctx.config.dynamic_role:
            return {}
        table = {int(RequestCode.POP_MESSAGE): self.handle_pop, int(RequestCode.ACK_MESSAGE): self.handle_ack,
                 int(RequestCode.BATCH_ACK_MESSAGE): self.handle_batch_ack,
                 int(RequestCode.CHANGE_MESSAGE_INVISIBLETIME): self.handle_change_invisible_time,
                 int(RequestCode.NOTIFICATION): self.handle_notification}
        if self.ctx.config.dynamic_role:  # the role changes at runtime: refuse while not the master
            return {code: self._master_only(h) for code, h in table.items()}
        return table

    def _master_only(self, handler: Any) -> Any:
        def guarded(conn: Any, req: Any) -> Any:
            if self.replica or not self.ctx.serves_as_master():
                if req.is_oneway:
                    return None
                return req.response(ResponseCode.SLAVE_NOT_AVAILABLE, "pop is served by the master only")
            return handler(conn, req)
        return guarded

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._load_offsets()
        for q in range(REVIVE_QUEUE_NUMS):
            start = self.ctx.offsets.query(REVIVE_GROUP, self.revive_topic, q)
            self.read_offsets[q] = max(start, self.ctx.store.get_min_offset_in_queue(self.revive_topic, q), 0)
        self._read_revive_log()  # rebuild live CKs (and pop offsets they imply) before the first pop

    async def run(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL_S)
            await self.revive_once()

    async def stop(self) -> None:
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._persist_offsets()
        self._commit_revive_progress()

    # ---- pop offsets -------------------------------------------------------------------------------------
    def _load_offsets(self) -> None:
        for data in read_with_backup(self._path):
            try:
                obj = orjson.loads(data)
                for key, queues in obj.get("offsetTable", {}).items():
                    topic, _, group = key.rpartition("@")
                    for qid, off in queues.items():
                        self.committed[(group, topic, int(qid))] = int(off)
                break
            except (ValueError, AttributeError):
                log.warning("unreadable %s, trying its backup", self._path)
        self.reserved.update(self.committed)

    def _offsets_snapshot(self) -> bytes | None:
        """popOffset.json content if anything changed (built on the loop; written by any thread)."""
        if not self._dirty:
            return None
        self._dirty = False
        table: dict[str, dict[str, int]] = {}
        for (group, topic, qid), off in self.committed.items():
            table.setdefault(f"{topic}@{group}", {})[str(qid)] = off
        return orjson.dumps({"offsetTable": table})

    def _persist_offsets(self) -> None:
        data = self._offsets_snapshot()
        if data is not None:
            atomic_write(self._path, data)

    def _commit(self, key: QueueKey, offset: int) -> None:
        if self.committed.get(key, -1) < offset:
            self.committed[key] = offset
            self._dirty = True
        if self.reserved.get(key, -1) < offset:
            self.reserved[key] = offset

    def _start_offset(self, key: QueueKey, init_mode: int) -> int:
        off = self.reserved.get(key)
        store = self.ctx.store
        min_off = store.get_min_offset_in_queue(key[1], key[2])
        if off is None:
            retry = key[1].startswith(RETRY_PREFIX)
            off = store.get_max_offset_in_queue(key[1], key[2]) if init_mode == 1 and not retry else min_off
            self.reserved[key] = off
            self._commit(key, off)
        elif off < min_off:
            off = self.reserved[key] = min_off
        return off

    # ---- long polling ------------------------------------------------------------------------------------
    def _on_dispatch(self, req: Any) -> None:
        if self._waiters and req.topic in self._waiters and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, req.topic)

    def _wake(self, topic: str) -> None:
        for fut in self._waiters.pop(topic, ()):
            if not fut.done():
                fut.set_result(None)

    async def _wait(self, topics: list[str], timeout_s: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for t in topics:
            self._waiters.setdefault(t, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            pass
        finally:
            for t in topics:
                ws = self._waiters.get(t)
                if ws is not None:
                    ws.discard(fut)
                    if not ws:
                        del self._waiters[t]

    # ---- POP_MESSAGE -------------------------------------------------------------------------------------
    def _check(self, conn: Any, req: RemotingCommand, group: str, topic: str, queue_id: int) -> RemotingCommand | Any:
        ctx = self.ctx
        if not ctx.config.broker_permission & Perm.READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the broker[{ctx.config.broker_ip1}] peeking message is"
                                " forbidden")
        tc = ctx.topics.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & Perm.READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        if queue_id >= tc.read_queue_nums:
            return req.response(ResponseCode.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        sgc = ctx.groups.find_or_create(group)
        if sgc is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group}] does not exist, apply first please!")
        if not sgc.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return tc

    async def handle_pop(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields
        group = ext_str(ext, "consumerGroup")
        topic = ext_str(ext, "topic")
        queue_id = ext_int(ext, "queueId", -1)
        max_nums = max(1, min(ext_int(ext, "maxMsgNums", MAX_POP_NUMS), MAX_POP_NUMS))
        invisible_ms = ext_int(ext, "invisibleTime")
        poll_ms = min(max(ext_int(ext, "pollTime", 0), 0), MAX_POLL_MS)
        init_mode = ext_int(ext, "initMode", 0)
        exp_type = ext_str(ext, "expType", "TAG") or "TAG"
        tc = self._check(conn, req, group, topic, queue_id)
        if isinstance(tc, RemotingCommand):
            return tc
        if exp_type != "TAG":
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"The broker does not support consumer to filter message by {exp_type}")
        if invisible_ms <= 0:
            return req.response(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible_ms} must be > 0")
        tags = tags_of_expression(ext_str(ext, "exp", "*") or "*")
        codes = None if tags is None else frozenset(java_hash(t) for t in tags)
        queues = list(range(tc.read_queue_nums)) if queue_id < 0 else [queue_id]
        retry = RETRY_PREFIX + group
        deadline = self.clock.monotonic_ms() + poll_ms
        waited = False
        while True:
            pop_time = self.clock.now_ms()
            taken = self._pop_now(group, topic, queues, max_nums, codes, init_mode)
            if taken or poll_ms <= 0:
                break
            left = deadline - self.clock.monotonic_ms()
            if left <= 0:
                break
            if sum(len(w) for w in self._waiters.values()) >= MAX_WAITERS:
                return req.response(ResponseCode.POLLING_FULL, "polling full")
            waited = True
            await self._wait([topic, retry], left / 1000)
        return await self._answer(req, group, topic, taken, pop_time, invisible_ms, waited)

    def _has_message(self, group: str, topic: str, queues: list[int]) -> bool:
        sources = [(topic, q) for q in queues]
        retry = RETRY_PREFIX + group
        rtc = self.ctx.topics.get(retry)
        if rtc is not None:
            sources += [(retry, q) for q in range(rtc.read_queue_nums)]
        store = self.ctx.store
        for t, q in sources:
            nxt = self.reserved.get((group, t, q))
            if nxt is None:
                nxt = store.get_min_offset_in_queue(t, q)
            if nxt < store.get_max_offset_in_queue(t, q):
                return True
        return False

    async def handle_notification(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        """NOTIFICATION (200054): answer hasMsg once something is poppable (or pollTime passed); pops nothing."""
        ext = req.ext_fields
        group = ext_str(ext, "consumerGroup")
        topic = ext_str(ext, "topic")
        queue_id = ext_int(ext, "queueId", -1)
        poll_ms = min(max(ext_int(ext, "pollTime", 0), 0), MAX_POLL_MS)
        tc = self._check(conn, req, group, topic, queue_id)
        if isinstance(tc, RemotingCommand):
            return tc
        queues = list(range(tc.read_queue_nums)) if queue_id < 0 else [queue_id]
        deadline = self.clock.monotonic_ms() + poll_ms
        full = False
        while not (has := self._has_message(group, topic, queues)):
            left = deadline - self.clock.monotonic_ms()
            if left <= 0:
                break
            if sum(len(w) for w in self._waiters.values()) >= MAX_WAITERS:
                full = True
                break
            await self._wait([topic, RETRY_PREFIX + group], left / 1000)
        resp = req.response(ResponseCode.SUCCESS)
        resp.ext_fields = {"hasMsg": "true" if has else "false", "pollingFull": "true" if full else "false"}
        return resp

    def _pop_now(self, group: str, topic: str, queues: list[int], max_nums: int, codes: frozenset[int] | None,
                 init_mode: int) -> list[tuple[QueueKey, int, int, list[Any]]]:
        """Reserve up to max_nums messages (no await: atomic on the loop). → [(key, start, end, messages)]."""
        self._pop_count += 1
        rr_key = (group, topic)
        rr = self._rr.get(rr_key, 0)
        self._rr[rr_key] = rr + 1
        ordered = queues[rr % len(queues):] + queues[:rr % len(queues)] if queues else []
        sources = [(topic, q) for q in ordered]
        retry = RETRY_PREFIX + group
        rtc = self.ctx.topics.get(retry)
        if rtc is not None:
            retry_sources = [(retry, q) for q in range(rtc.read_queue_nums)]
            sources = retry_sources + sources if self._pop_count % 5 == 0 else sources + retry_sources
        taken: list[tuple[QueueKey, int, int, list[Any]]] = []
        left = max_nums
        match = codes.__contains__ if codes is not None else None
        for real_topic, q in sources:
            if left <= 0:
                break
            key = (group, real_topic, q)
            start = self._start_offset(key, init_mode)
            if start >= self.ctx.store.get_max_offset_in_queue(real_topic, q):
                continue
            res = self.ctx.store.get_message(group, real_topic, q, start, left, match)
            if res.status is GetStatus.FOUND:
                msgs = [decode_record(b) for b in res.buffers]
                self.reserved[key] = res.next_begin_offset
                taken.append((key, start, res.next_begin_offset, msgs))
                left -= len(msgs)
            elif res.status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_TOO_SMALL,
                                GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_FOUND_NULL) \
                    and res.next_begin_offset > start:
                self._commit(key, res.next_begin_offset)  # nothing to deliver before it
        return taken

    async def _answer(self, req: RemotingCommand, group: str, topic: str,
                      taken: list[tuple[QueueKey, int, int, list[Any]]], pop_time: int, invisible_ms: int,
                      waited: bool) -> RemotingCommand:
        if not taken:
            code = ResponseCode.POLLING_TIMEOUT if waited else ResponseCode.PULL_NOT_FOUND
            return req.response(code, "no new message")
        self._revive_rr += 1
        rqid = self._revive_rr % REVIVE_QUEUE_NUMS
        bn = self.ctx.config.broker_name
        cks: list[PopCheckpoint] = []
        for (g, real_topic, q), _start, _end, msgs in taken:
            for span in split_spans([m.queue_offset for m in msgs]):
                cks.append(PopCheckpoint(g, real_topic, q, span[0], pop_time, invisible_ms,
                                         bitmap_of(span[0], span), rqid, bn))
        result = await self.ctx.store.put_messages([self._record(rqid, CK_TAG, ck.to_json()) for ck in cks])
        if result.status is not PutStatus.PUT_OK and result.status is not PutStatus.FLUSH_DISK_TIMEOUT:
            for key, start, _end, _msgs in taken:  # nothing delivered: pop these again (others may repeat some)
                if self.reserved.get(key, start) > start:
                    self.reserved[key] = start
            return req.response(ResponseCode.SYSTEM_ERROR, f"writing the pop checkpoint failed: {result.status.name}")
        for key, _start, end, _msgs in taken:
            self._commit(key, end)
        body, start_info, msg_info, rest = self._encode(taken, cks, pop_time, invisible_ms, rqid, bn)
        self.ctx.stats.on_get(sum(len(t[3]) for t in taken), len(body))
        for (g, real_topic, _q), _start, _end, msgs in taken:
            self.ctx.group_stats.on_get(g, real_topic, len(msgs))
        resp = req.response(ResponseCode.SUCCESS, None, body=body)
        resp.ext_fields = {"popTime": str(pop_time), "invisibleTime": str(invisible_ms), "reviveQid": str(rqid),
                           "restNum": str(rest), "startOffsetInfo": start_info, "msgOffsetInfo": msg_info}
        return resp

    def _encode(self, taken: list[tuple[QueueKey, int, int, list[Any]]], cks: list[PopCheckpoint], pop_time: int,
                invisible_ms: int, rqid: int, bn: str) -> tuple[bytes, str, str, int]:
        """Re-encode popped records with POP_CK (and the original topic for retry messages)."""
        ck_start: dict[tuple[str, int, int], int] = {}
        for ck in cks:
            for off in ck.pending_offsets():
                ck_start[(ck.topic, ck.queue_id, off)] = ck.start_offset
        parts: list[bytes] = []
        start_info: list[str] = []
        msg_info: list[str] = []
        rest = 0
        for (_g, real_topic, q), _start, end, msgs in taken:
            flag = RETRY_FLAG_V1 if real_topic.startswith(RETRY_PREFIX) else RETRY_FLAG_NONE
            rest += max(0, self.ctx.store.get_max_offset_in_queue(real_topic, q) - end)
            start_info.append(f"{flag} {q} {msgs[0].queue_offset}")
            msg_info.append(f"{flag} {q} " + ",".join(str(m.queue_offset) for m in msgs))
            for m in msgs:
                props = dict(m.properties)
                props[Prop.POP_CK] = encode_extra_info(ck_start[(real_topic, q, m.queue_offset)], pop_time,
                                                       invisible_ms, rqid, flag, bn, q, m.queue_offset)
                props.setdefault(FIRST_POP_TIME, str(pop_time))
                topic = props.get(Prop.RETRY_TOPIC, m.topic) if flag else m.topic
                parts.append(encode_record(
                    topic=topic.encode(), body=m.body, properties=encode_properties(props).encode(),
                    queue_id=m.queue_id, flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                    born_host=pack_host_port(m.born_host), store_host=pack_host_port(m.store_host),
                    reconsume_times=m.reconsume_times, prepared_transaction_offset=m.prepared_transaction_offset,
                    queue_offset=m.queue_offset, phys_offset=m.phys_offset, store_timestamp=m.store_timestamp))
        return b"".join(parts), ";".join(start_info), ";".join(msg_info), rest

    # ---- ACK / CHANGE_INVISIBLE_TIME --------------------------------------------------------------------
    def _record(self, rqid: int, tag: str, body: bytes) -> MessageInner:
        host = self.ctx.store_host
        return MessageInner(self.revive_topic, rqid, body, {Prop.TAGS: tag}, born_timestamp=self.clock.now_ms(),
                            born_host=host, store_host=host)

    def _ack_key(self, ext: dict[str, str]) -> tuple[CkKey, int, Any]:
        group = ext_str(ext, "consumerGroup")
        topic = ext_str(ext, "topic")
        info = decode_extra_info(ext_str(ext, "extraInfo"))
        real = RETRY_PREFIX + group if info.retry_flag else topic
        qid = ext_int(ext, "queueId", info.queue_id)
        return (group, real, qid, info.ck_offset, info.pop_time), ext_int(ext, "offset"), info

    async def _put_ok(self, msgs: list[MessageInner]) -> bool:
        result = await self.ctx.store.put_messages(msgs)
        return result.status is PutStatus.PUT_OK or result.status is PutStatus.FLUSH_DISK_TIMEOUT

    async def handle_ack(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        try:
            key, offset, info = self._ack_key(req.ext_fields or {})
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, str(e))
        if not await self._put_ok([self._record(info.revive_qid, ACK_TAG, ack_json(key, [offset]))]):
            return req.response(ResponseCode.SYSTEM_ERROR, "writing the ack failed")
        return req.response(ResponseCode.SUCCESS)

    async def handle_batch_ack(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        """Body {"acks":[{c,t,r,so,q,rq,pt,it,b}]}; b = bit indices relative to so (list) or a bitmask (int)."""
        try:
            acks = orjson.loads(req.body or b"{}").get("acks") or []
            records: list[MessageInner] = []
            for a in acks:
                group = str(a["c"])
                real = RETRY_PREFIX + group if int(a.get("r", 0)) else str(a["t"])
                so, bits = int(a["so"]), a.get("b", [])
                idx = [int(i) for i in bits] if isinstance(bits, list) else \
                    [i for i in range(int(bits).bit_length()) if int(bits) >> i & 1]
                key = (group, real, int(a["q"]), so, int(a["pt"]))
                records.append(self._record(int(a["rq"]), ACK_TAG, ack_json(key, [so + i for i in idx])))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return req.response(ResponseCode.SYSTEM_ERROR, f"bad batch ack body: {e}")
        for rec in records:  # one revive queue per record: put separately
            if not await self._put_ok([rec]):
                return req.response(ResponseCode.SYSTEM_ERROR, "writing the ack failed")
        return req.response(ResponseCode.SUCCESS)

    async def handle_change_invisible_time(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields or {}
        try:
            key, offset, info = self._ack_key(ext)
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, str(e))
        invisible_ms = ext_int(ext, "invisibleTime")
        now = self.clock.now_ms()
        group, real, qid, _so, _pt = key
        ck = PopCheckpoint(group, real, qid, offset, now, invisible_ms, 1, info.revive_qid, info.broker_name)
        # new CK first, then the ack of the old handle: a crash in between gives a duplicate, never a loss
        if not await self._put_ok([self._record(info.revive_qid, CK_TAG, ck.to_json())]):
            return req.response(ResponseCode.SYSTEM_ERROR, "writing the checkpoint failed")
        if not await self._put_ok([self._record(info.revive_qid, ACK_TAG, ack_json(key, [offset]))]):
            return req.response(ResponseCode.SYSTEM_ERROR, "writing the ack failed")
        resp = req.response(ResponseCode.SUCCESS)
        resp.ext_fields = {"popTime": str(now), "invisibleTime": str(invisible_ms), "reviveQid": str(info.revive_qid)}
        return resp

    # ---- revive ------------------------------------------------------------------------------------------
    def _read_revive_log(self) -> None:
        store = self.ctx.store
        for q in range(REVIVE_QUEUE_NUMS):
            off = self.read_offsets[q]
            while True:
                res = store.get_message(REVIVE_GROUP, self.revive_topic, q, off, 256)
                if res.status is not GetStatus.FOUND:
                    if res.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_FOUND_NULL) \
                            and res.next_begin_offset > off:
                        off = res.next_begin_offset
                        continue
                    break
                for buf in res.buffers:
                    rec = decode_record(buf)
                    ck = apply_record(self.table, rec.properties.get(Prop.TAGS), rec.body, rec.queue_offset)
                    if ck is not None:  # a CK implies its pop offsets were handed out (matters after a restart)
                        self._commit((ck.group, ck.topic, ck.queue_id), max(ck.pending_offsets() or [-1]) + 1)
                off = res.next_begin_offset
            self.read_offsets[q] = off

    async def revive_once(self) -> None:
        """Read new revive records, revive expired CKs, then persist pop offsets and revive progress."""
        self._read_revive_log()
        if not self.ctx.serves_as_master():  # a plain slave only follows the log; an isolated master waits
            if self.replica:
                await self.hand_off_acks()
            return
        for ck in self.table.expired(self.clock.now_ms()):
            await self._revive(ck)
            self.table.retry_later(ck)  # still live only if re-putting failed
        data = self._offsets_snapshot()
        if data is not None:
            try:
                await self.env.writes.run(atomic_write, self._path, data)
            except BaseException:
                self._dirty = True  # write again next round
                raise
        self._commit_revive_progress()

    def _commit_revive_progress(self) -> None:
        for q, off in enumerate(self.table.progress_all(self.read_offsets)):
            self.ctx.offsets.commit(REVIVE_GROUP, self.revive_topic, q, off)

    async def _revive(self, ck: PopCheckpoint) -> None:
        pending = ck.pending_offsets()
        store = self.ctx.store
        revived: list[int] = []
        for off in pending:
            res = store.get_message(REVIVE_GROUP, ck.topic, ck.queue_id, off, 1)
            if res.status is not GetStatus.FOUND:
                revived.append(off)  # gone (retention): nothing to re-deliver
                continue
            msg = decode_record(res.buffers[0])
            if msg.queue_offset != off:
                revived.append(off)
                continue
            if not await self._put_out(self._retry_message(ck.group, msg)):
                log.warning("reviving %s/%d@%d failed; will retry", ck.topic, ck.queue_id, off)
                break
            revived.append(off)
            self.revived_count += 1
        if revived and self.replica:  # acting: no record in the replica; the master gets ACK_MESSAGEs later
            self.table.on_ack(ck.key, revived)
            self.pending_acks.append((ck, revived))
        elif revived:  # marker so that a restart replaying this CK does not revive these offsets again
            if await self._put_ok([self._record(ck.revive_qid, ACK_TAG, ack_json(ck.key, revived))]):
                self.table.on_ack(ck.key, revived)

    async def _put_out(self, msg: MessageInner) -> bool:
        """A revived message: the own store on a master, another group's master (escape bridge) when acting."""
        escape = self.ctx.escape
        if escape is None:
            return await self._put_ok([msg])
        result: PutResult = await escape.put(msg)
        return result.status is PutStatus.PUT_OK or result.status is PutStatus.FLUSH_DISK_TIMEOUT

    async def hand_off_acks(self) -> int:
        """A slave no longer acting: ACK_MESSAGE to the live master for every offset revived while acting."""
        if not self.pending_acks:
            return 0
        am = self.ctx.services.get("acting_master")
        master = am.state.master_addr() if am is not None else None
        if not master:
            return 0
        done = 0
        left: list[tuple[PopCheckpoint, list[int]]] = []
        for ck, offsets in self.pending_acks:
            rest = [off for off in offsets if not await self._send_ack(master, ck, off)]
            done += len(offsets) - len(rest)
            if rest:
                left.append((ck, rest))
        self.pending_acks = left
        return done

    async def _send_ack(self, addr: str, ck: PopCheckpoint, offset: int) -> bool:
        retry = ck.topic.startswith(RETRY_PREFIX)
        extra = encode_extra_info(ck.start_offset, ck.pop_time, ck.invisible_time, ck.revive_qid,
                                  RETRY_FLAG_V1 if retry else RETRY_FLAG_NONE, ck.broker_name, ck.queue_id, offset)
        ext = {"consumerGroup": ck.group, "topic": ck.topic, "queueId": str(ck.queue_id), "extraInfo": extra,
               "offset": str(offset)}
        try:
            resp = await self.env.client.invoke(addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, ext), 3000)
        except OrbitMQError as e:
            log.info("handing a revived pop offset to %s failed: %r", addr, e)
            return False
        return resp.code == ResponseCode.SUCCESS

    def _retry_message(self, group: str, msg: Any) -> MessageInner:
        """The next delivery of `msg`: %RETRY%<group> with reconsume times + 1, or %DLQ%<group> past the max."""
        ctx = self.ctx
        sgc = ctx.groups.find_or_create(group)
        max_times = sgc.retry_max_times if sgc is not None else 16
        props = dict(msg.properties)
        props.pop(Prop.POP_CK, None)
        if not msg.topic.startswith(RETRY_PREFIX):
            props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.msg_id)
        if msg.reconsume_times >= max_times:
            topic, queue_id, times = DLQ_PREFIX + group, 0, msg.reconsume_times
            ctx.topics.create_system_topic(topic, 1, Perm.READ)
        else:
            topic, times = RETRY_PREFIX + group, msg.reconsume_times + 1
            nums = sgc.retry_queue_nums if sgc is not None else 1
            tc = ctx.topics.create_system_topic(topic, max(1, nums), Perm.READ | Perm.WRITE)
            queue_id = msg.queue_offset % max(1, tc.write_queue_nums)
        return MessageInner(topic, queue_id, msg.body, props, msg.flag, msg.sys_flag & ~0xC,
                            msg.born_timestamp, msg.born_host, ctx.store_host, times)


def create(ctx: BrokerContext, env: ServiceEnv) -> PopService | None:
    cfg = ctx.config
    if cfg.is_slave and not cfg.enable_slave_acting_master and not cfg.dynamic_role:  # a replica
        return None
    return PopService(ctx, env)
