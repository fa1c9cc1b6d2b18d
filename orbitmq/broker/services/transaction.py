"""Transactional messages: the send hook turning TRAN_MSG sends into half messages (RMQ_SYS_TRANS_HALF_TOPIC),
END_TRANSACTION (commit writes the real message + an op message, rollback only the op message) and the check
service sending CHECK_TRANSACTION_STATE for unresolved half messages, rolling back after transactionCheckMax checks.

Progress (half and op queue offsets of group CID_RMQ_SYS_TRANS) lives in the consumer offset table; the op set
is rebuilt from the op queue at start. Bookkeeping rules: transaction_state.py (pure). Never imports client.

RIP-32: on a slave acting as master the check service runs without writing to the replica (no re-appended copies:
the original half is checked, check counts kept in memory), END_TRANSACTION works, a commit's real message goes
through the escape bridge and the decision is recorded locally (transaction_acting.py), then handed to the master
once it is back. docs/design/acting-master.md.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable
from typing import Any

from orbitmq.base.clock import monotonic_ms
from orbitmq.base.errors import CorruptionError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.metadata.topics import (
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.transaction_acting import HAND_OFF_FLAG, ActingOp, ActingOps
from orbitmq.broker.services.transaction_state import TransactionState, check_threshold_ms, parse_op_body
from orbitmq.model.enums import TRANSACTION_MASK, SysFlag
from orbitmq.model.msg_id import UniqIdGenerator
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.model.record import decode_record, encode_record, pack_host_port
from orbitmq.protocol import HeaderError, RemotingCommand, RequestCode, ResponseCode, ext_int, ext_str
from orbitmq.store import STORED_STATUSES, GetStatus, MessageInner, PutResult

log = logging.getLogger("orbitmq.broker.transaction")

CHECK_GROUP = "CID_RMQ_SYS_TRANS"
OP_REMOVE_TAG = "d"
# Extension on op messages (only this broker reads them): the half message's UNIQ_KEY, so that a transaction
# finished through one copy of its half message is known finished for every other copy.
PROP_HALF_UNIQ = "HALF_UNIQ_KEY"
READ_BATCH = 32
RUN_LIMIT_MS = 60_000  # one check run per queue at most this long (§6.13)
_DROP_ON_COMMIT = (Prop.REAL_TOPIC, Prop.REAL_QID, Prop.TRAN_MSG)


class TransactionSendHook:
    """before_put: a TRAN_MSG=true message becomes a half message of RMQ_SYS_TRANS_HALF_TOPIC queue 0."""

    after_put_noop = True  # nothing to do after a put: the send handler skips the call
    before_put_acts_on = (frozenset(), frozenset({Prop.TRAN_MSG}))  # a single send without TRAN_MSG: skipped

    def before_put(self, conn: Any, req: Any, msgs: list[MessageInner]) -> Any | None:
        if len(msgs) != 1:  # the send handler refuses transactional batches: skip the per-message lookups
            return None
        for m in msgs:
            props = m.properties
            if props.get(Prop.TRAN_MSG) != "true":
                continue
            if m.topic == SCHEDULE_TOPIC and Prop.REAL_TOPIC in props:  # TRAN_MSG with sysflag 0 + DELAY
                props.pop(Prop.DELAY, None)
            else:
                props[Prop.REAL_TOPIC] = m.topic
                props[Prop.REAL_QID] = str(m.queue_id)
            m.sys_flag &= ~TRANSACTION_MASK
            m.topic = TRANS_HALF_TOPIC
            m.queue_id = 0
        return None

    def after_put(self, conn: Any, req: Any, msgs: list[Any], result: Any) -> None:
        return None


def _uniq(msg: Any) -> str:
    return msg.properties.get(Prop.UNIQ_KEY) or msg.offset_msg_id


class TransactionService:
    name = "transaction"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        self.state = TransactionState()
        self._ids = UniqIdGenerator(ctx.config.broker_ip1)
        self._rr = itertools.count()
        self._max_delay_level = len(ctx.config.message_delay_level.split())
        self.checks_sent = 0
        self.discarded = 0
        self.acting_ops = ActingOps(os.path.join(env.config_dir, "transactionActingOps.json"))
        self._acting_checks: dict[str, int] = {}  # UNIQ_KEY -> checks sent while acting (no re-appended copies)
        self._hand_offs: set[asyncio.Task[int]] = set()
        ctx.role_listeners.append(self._on_role_change)

    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {int(RequestCode.END_TRANSACTION): self.end_transaction}

    # ----- lifecycle -----
    async def start(self) -> None:
        self.acting_ops.load()
        store = self.ctx.store
        half = self.ctx.offsets.query(CHECK_GROUP, TRANS_HALF_TOPIC, 0)
        op = self.ctx.offsets.query(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0)
        half = max(half, store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0), 0)
        op = max(op, store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0), 0)
        self.state = TransactionState(half, op)
        self.read_ops()
        # Copies of half messages beyond the progress: an op must not be settled before all of them are passed.
        for msg in self._iter_queue(TRANS_HALF_TOPIC, half, store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)):
            self.state.note_half(msg.queue_offset, _uniq(msg))
        log.info("transaction service: half progress %d, op progress %d, %d unsettled ops", half, op,
                 self.state.unsettled_ops())

    async def run(self) -> None:
        while True:
            await asyncio.sleep(max(self.ctx.config.transaction_check_interval, 10) / 1000)
            await self.check_once()
            await self.hand_off_once()

    async def stop(self) -> None:
        for task in list(self._hand_offs):
            task.cancel()
        self._commit_progress()

    # ----- reading the system queues -----
    def _iter_queue(self, topic: str, begin: int, end: int) -> Any:
        """Decoded messages of `topic` queue 0 with queue offsets in [begin, end)."""
        store = self.ctx.store
        offset = begin
        while offset < end:
            r = store.get_message(CHECK_GROUP, topic, 0, offset, READ_BATCH)
            if r.status is GetStatus.OFFSET_TOO_SMALL:
                offset = r.next_begin_offset
                continue
            if r.status is not GetStatus.FOUND:
                if r.next_begin_offset <= offset:
                    return
                offset = r.next_begin_offset
                continue
            for buf in r.buffers:
                try:
                    msg = decode_record(buf)
                except CorruptionError as e:  # skip it rather than crash-loop the check service on it
                    log.error("unreadable record in %s near queue offset %d: %s", topic, offset, e)
                    continue
                if msg.queue_offset >= end:
                    return
                yield msg
            offset = max(r.next_begin_offset, offset + 1)

    def read_ops(self) -> None:
        """Add every op message not read yet to the op set."""
        st = self.state
        end = self.ctx.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        for op in self._iter_queue(TRANS_OP_HALF_TOPIC, st.op_read, end):
            if op.properties.get(Prop.TAGS) == OP_REMOVE_TAG:
                st.add_op(op.queue_offset, parse_op_body(op.body), op.properties.get(PROP_HALF_UNIQ))
            else:
                st.op_read = max(st.op_read, op.queue_offset + 1)

    def _commit_progress(self) -> None:
        st = self.state
        self.ctx.offsets.commit(CHECK_GROUP, TRANS_HALF_TOPIC, 0, st.half_offset)
        self.ctx.offsets.commit(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, st.op_offset)

    # ----- writes -----
    async def _put(self, msg: MessageInner) -> PutResult:
        """Own store: half copies and op messages (a master only)."""
        return await self.ctx.store.put_message(msg)

    async def _put_out(self, msg: MessageInner) -> PutResult:
        """Messages leaving the transaction machinery (a commit's real message, a discarded half's copy): the
        escape bridge, i.e. the own store on a master and another group's master when acting."""
        if self.ctx.escape is None:
            return await self._put(msg)
        result: PutResult = await self.ctx.escape.put(msg)
        return result

    def _op_message(self, half_offset: int, uniq: str) -> MessageInner:
        now = self.env.clock.now_ms()
        host = self.ctx.store_host
        props = {Prop.TAGS: OP_REMOVE_TAG, Prop.WAIT: "false", Prop.UNIQ_KEY: self._ids.next_id(now),
                 PROP_HALF_UNIQ: uniq}
        return MessageInner(TRANS_OP_HALF_TOPIC, 0, str(half_offset).encode("ascii"), props, 0, 0, now, host, host)

    def _real_message(self, half: Any) -> MessageInner:
        props = dict(half.properties)
        topic = props.get(Prop.REAL_TOPIC, half.topic)
        queue_id = int(props.get(Prop.REAL_QID, "0") or 0)
        for k in _DROP_ON_COMMIT:
            props.pop(k, None)
        props.pop(Prop.TRANSACTION_CHECK_TIMES, None)
        delay = props.get(Prop.DELAY)
        if delay and delay.isdigit() and int(delay) > 0 and self._max_delay_level > 0:
            level = min(int(delay), self._max_delay_level)
            props[Prop.DELAY] = str(level)
            props[Prop.REAL_TOPIC] = topic
            props[Prop.REAL_QID] = str(queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        sys_flag = (half.sys_flag & ~TRANSACTION_MASK) | SysFlag.TRANSACTION_COMMIT
        return MessageInner(topic, queue_id, half.body, props, half.flag, int(sys_flag), half.born_timestamp,
                            half.born_host, self.ctx.store_host, half.reconsume_times, half.phys_offset)

    # ----- END_TRANSACTION (37) -----
    async def end_transaction(self, conn: Any, req: RemotingCommand) -> RemotingCommand | None:
        def reply(code: int, remark: str | None = None) -> RemotingCommand | None:
            return None if req.is_oneway else req.response(code, remark)

        ctx = self.ctx
        if not ctx.serves_as_master():
            return reply(ResponseCode.SLAVE_NOT_AVAILABLE, "Store is not available in slave mode")
        fence = ctx.write_fence()  # controller mode: a master without its write lease stores nothing
        if fence is not None:
            return reply(*fence)
        acting = ctx.config.is_slave
        ext = req.ext_fields or {}
        try:
            group = ext_str(ext, "producerGroup")
            table_offset = ext_int(ext, "tranStateTableOffset")
            phys = ext_int(ext, "commitLogOffset")
            kind = ext_int(ext, "commitOrRollback")
        except HeaderError as e:
            return reply(ResponseCode.SYSTEM_ERROR, str(e))
        if kind not in (SysFlag.TRANSACTION_COMMIT, SysFlag.TRANSACTION_ROLLBACK):
            return None  # UNKNOWN: nothing to do, the check service will ask again (Java answers nothing)
        half = ctx.store.look_message_by_offset(phys)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            return reply(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        if half.properties.get(Prop.PGROUP) != group:
            return reply(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != table_offset:
            return reply(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        if half.phys_offset != phys:
            return reply(ResponseCode.SYSTEM_ERROR, "The commit log offset wrong")
        uniq = _uniq(half)
        st = self.state
        if st.is_done(table_offset, uniq):
            return reply(ResponseCode.SUCCESS, "transaction already finished")
        st.mark_done(table_offset, uniq)  # before any await: a concurrent repeat or the checker sees it
        hand_off = ext.get(HAND_OFF_FLAG) == "true" and not acting  # decided (and delivered) by the acting slave
        if kind == SysFlag.TRANSACTION_COMMIT and not hand_off:
            result = await self._put_out(self._real_message(half))
            if result.status not in STORED_STATUSES:
                st.unmark(table_offset, uniq)
                log.warning("commit of transaction %s failed to store: %s", uniq, result.status.name)
                return reply(ResponseCode.SYSTEM_ERROR, f"commit store failed: {result.status.name}")
            ctx.stats.on_put(1, result.wrote_bytes)
        if acting:  # no op message in the replica: recorded, handed to the master when it is back
            self.acting_ops.record(ActingOp(table_offset, phys, group, uniq, kind))
            return reply(ResponseCode.SUCCESS)
        op = await self._put(self._op_message(table_offset, uniq))
        if op.status not in STORED_STATUSES:
            log.warning("op message for transaction %s failed to store: %s", uniq, op.status.name)
        return reply(ResponseCode.SUCCESS)

    # ----- check service -----
    async def check_once(self) -> int:
        """One scan of the half queue; returns the number of check requests sent."""
        ctx = self.ctx
        cfg = ctx.config
        if not ctx.serves_as_master():  # a plain slave follows the master's op messages; isolated: later
            return 0
        if cfg.is_slave:
            return await self.check_once_acting()
        store = ctx.store
        st = self.state
        self.read_ops()
        now = self.env.clock.now_ms()
        started = monotonic_ms()
        retention_ms = self.env.store_config.file_reserved_time_hours * 3_600_000
        end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)  # later arrivals wait for the next run
        offset = max(st.half_offset, store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        sent = 0
        for msg in self._iter_queue(TRANS_HALF_TOPIC, offset, end):
            if monotonic_ms() - started > RUN_LIMIT_MS:
                break
            q = msg.queue_offset
            uniq = _uniq(msg)
            st.note_half(q, uniq)
            if not st.is_done(q, uniq):
                age = now - msg.born_timestamp
                if age < check_threshold_ms(msg.properties, cfg.transaction_timeout):
                    break  # younger ones follow; re-appended copies keep their born time and come later
                times = int(msg.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0") or 0)
                if times >= cfg.transaction_check_max or age > retention_ms:
                    await self._discard(msg, uniq)
                elif not await self._check(msg, uniq, times + 1):
                    break  # could not re-append: retry from here next run
                else:
                    sent += 1
            st.advance_half(q + 1)
            self._commit_progress()
        self._commit_progress()
        return sent

    # ----- acting master (RIP-32) -----
    async def check_once_acting(self) -> int:
        """One scan on a slave acting as master: the replica is read-only, so unresolved half messages are checked
        as they are (no re-appended copy), the check count lives in memory, a half past transactionCheckMax is
        rolled back by a local record, and the scan progress only passes finished half messages."""
        ctx = self.ctx
        cfg = ctx.config
        store = ctx.store
        st = self.state
        self.read_ops()
        now = self.env.clock.now_ms()
        end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        offset = max(st.half_offset, store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        sent = 0
        prefix_done = True
        for msg in self._iter_queue(TRANS_HALF_TOPIC, offset, end):
            q = msg.queue_offset
            uniq = _uniq(msg)
            st.note_half(q, uniq)
            if not st.is_done(q, uniq):
                if now - msg.born_timestamp < check_threshold_ms(msg.properties, cfg.transaction_timeout):
                    break
                times = self._acting_checks.get(uniq)
                if times is None:
                    times = int(msg.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0") or 0)
                if times >= cfg.transaction_check_max:
                    st.mark_done(q, uniq)
                    self.acting_ops.record(ActingOp(q, msg.phys_offset, msg.properties.get(Prop.PGROUP, ""), uniq,
                                                    SysFlag.TRANSACTION_ROLLBACK))
                    self.discarded += 1
                    log.info("transaction %s (half offset %d) rolled back by the acting master after %d checks",
                             uniq, q, times)
                else:
                    self._acting_checks[uniq] = times + 1
                    if self._send_check(msg, times + 1, q, msg.phys_offset, msg.store_timestamp,
                                        msg.offset_msg_id):
                        sent += 1
            if prefix_done and st.is_done(q, uniq):
                st.advance_half(q + 1)
            else:
                prefix_done = False
        self._commit_progress()
        return sent

    def _on_role_change(self, acting: bool) -> None:
        """Stepping down: hand the recorded decisions over at once (before the master's first check run)."""
        if acting or not self.acting_ops.pending:
            return
        task = asyncio.get_running_loop().create_task(self.hand_off_once(), name="transaction hand-off")
        self._hand_offs.add(task)
        task.add_done_callback(self._hand_offs.discard)

    async def hand_off_once(self) -> int:
        """A slave no longer acting: hand the decisions it recorded to the live master."""
        ctx = self.ctx
        if not self.acting_ops.pending or not ctx.config.is_slave or ctx.acting_master:
            return 0
        am = ctx.services.get("acting_master")
        master = am.state.master_addr() if am is not None else None
        if not master:
            return 0
        done = await self.acting_ops.hand_off(self.env.client, master)
        if done:
            log.info("handed %d transaction decisions made while acting to the master %s", done, master)
        return done

    def _send_check(self, msg: Any, times: int, queue_offset: int, phys_offset: int, store_ts: int,
                    offset_msg_id: str) -> bool:
        """CHECK_TRANSACTION_STATE for the half `msg` to a live producer of its group; False if none."""
        props = dict(msg.properties)
        props[Prop.TRANSACTION_CHECK_TIMES] = str(times)
        copy = MessageInner(TRANS_HALF_TOPIC, 0, msg.body, props, msg.flag, msg.sys_flag, msg.born_timestamp,
                            msg.born_host, self.ctx.store_host, msg.reconsume_times, 0)
        group = props.get(Prop.PGROUP, "")
        channels = self.ctx.clients.producer_channels(group)
        if not channels:
            log.warning("check of transaction %s: no live producer of group %s", _uniq(msg), group)
            return False
        conn = channels[next(self._rr) % len(channels)]
        try:
            conn.invoke_oneway(self._check_request(copy, queue_offset, phys_offset, store_ts, offset_msg_id))
            self.checks_sent += 1
        except Exception as e:  # noqa: BLE001 - a closed channel: the next run asks again
            log.warning("CHECK_TRANSACTION_STATE to %s failed: %s", getattr(conn, "remote_addr", "?"), e)
            return False
        return True

    async def _discard(self, msg: Any, uniq: str) -> None:
        """Check limit reached (or older than the retention): roll back, keep a copy in TRANS_CHECK_MAX_TIME_TOPIC."""
        st = self.state
        st.mark_done(msg.queue_offset, uniq)
        self.ctx.topics.create_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
        keep = MessageInner(TRANS_CHECK_MAX_TIME_TOPIC, 0, msg.body, dict(msg.properties), msg.flag, msg.sys_flag,
                            msg.born_timestamp, msg.born_host, self.ctx.store_host, msg.reconsume_times, 0)
        await self._put(keep)
        await self._put(self._op_message(msg.queue_offset, uniq))
        self.discarded += 1
        log.info("transaction %s (half offset %d) rolled back after %s checks", uniq, msg.queue_offset,
                 msg.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0"))

    async def _check(self, msg: Any, uniq: str, times: int) -> bool:
        """Re-append a copy with TRANSACTION_CHECK_TIMES=times and ask a live producer of PGROUP about it."""
        props = dict(msg.properties)
        props[Prop.TRANSACTION_CHECK_TIMES] = str(times)
        copy = MessageInner(TRANS_HALF_TOPIC, 0, msg.body, props, msg.flag, msg.sys_flag, msg.born_timestamp,
                            msg.born_host, self.ctx.store_host, msg.reconsume_times, 0)
        result = await self._put(copy)
        if result.status not in STORED_STATUSES:
            log.warning("re-append of half message %s failed: %s", uniq, result.status.name)
            return False
        self.state.note_half(result.queue_offset, uniq)
        self._send_check(msg, times, result.queue_offset, result.phys_offset, result.store_timestamp,
                         result.msg_ids[0] if result.msg_ids else "")
        return True

    def _check_request(self, copy: MessageInner, queue_offset: int, phys_offset: int, store_ts: int,
                       offset_msg_id: str) -> RemotingCommand:
        props = copy.properties
        topic = props.get(Prop.REAL_TOPIC, copy.topic)
        queue_id = int(props.get(Prop.REAL_QID, "0") or 0)
        body = encode_record(
            topic=topic.encode(), body=copy.body, properties=encode_properties(props).encode(), queue_id=queue_id,
            flag=copy.flag, sys_flag=copy.sys_flag, born_timestamp=copy.born_timestamp,
            born_host=pack_host_port(copy.born_host), store_host=pack_host_port(copy.store_host),
            reconsume_times=copy.reconsume_times, queue_offset=queue_offset,
            phys_offset=phys_offset, store_timestamp=store_ts)
        uniq = props.get(Prop.UNIQ_KEY, "")
        ext = {"tranStateTableOffset": str(queue_offset), "commitLogOffset": str(phys_offset),
               "msgId": uniq, "transactionId": uniq, "offsetMsgId": offset_msg_id, "topic": topic}
        return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, body, oneway=True)


def create(ctx: BrokerContext, env: ServiceEnv) -> TransactionService:
    svc = TransactionService(ctx, env)
    ctx.send_hooks.append(TransactionSendHook())
    return svc
