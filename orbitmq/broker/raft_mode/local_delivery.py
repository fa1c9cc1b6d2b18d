"""Local delivery in a Raft broker group (issue 14; docs/design/local-delivery.md, "Wiring").

For the consumer groups named by `localDeliveryGroups` (broker.conf, OrbitMQ-only; "*" = every group), the pop
path (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME) of a Raft group member is served by the replicated
consumption machine of `orbitmq/delivery/` instead of the CK/revive path:

- one Raft entry type (ENTRY_TYPE) whose apply is DeliveryReplica.apply on every member; the router's state is a
  part of the group snapshot; a role change re-sends what the replica returns;
- every committed message of a topic that has machines joins them inside its MESSAGES entry's apply (a messages
  listener: no second entry per message);
- POP_MESSAGE = Attach (consumer = this connection on this member, node = dLegerSelfId) when the machine does not
  have it yet, then a bounded wait for this member's Deliver effects to that consumer; the bodies come from the
  local CommitLog; the receipt handle carries the delivery id;
- ACK / CHANGE_MESSAGE_INVISIBLETIME -> Settle / ChangeInvisible through forward_command (any member);
- a closed connection -> ConsumerDown; a consumer of this node that has no connection here (a restart) ->
  ConsumerDown; the leader proposes Expire for due checkouts, NodeDown for a member that stopped acknowledging
  the log, and puts dead-lettered messages into %DLQ%<group>.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.base.errors import OrbitMQError
from orbitmq.delivery import commands as dc
from orbitmq.delivery.effects import DeadLettered, Deliver, Effect, Refused, Returned, Settled
from orbitmq.delivery.replica import DeliveryReplica
from orbitmq.delivery.router import decode_entry, encode_entry, queue_key
from orbitmq.model import Perm, Prop, decode_record, encode_properties, encode_record
from orbitmq.model.record import pack_host_port
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_int, ext_str
from orbitmq.raft import NotLeaderError, Role
from orbitmq.store import GetStatus, MessageInner, PutResult, PutStatus

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.raft_mode.service import RaftGroupService
    from orbitmq.broker.services import ServiceEnv

log = logging.getLogger("orbitmq.broker.raft_mode.local_delivery")

ENTRY_TYPE = 0x10  # Raft entry type of delivery commands (router entries)
DLQ_DONE_TYPE = 0x11  # Raft entry type: a dead-lettered message is in its DLQ (JSON [key, queue, offset])
SNAPSHOT_PART = 0x10  # the router's state in the group snapshot
DLQ_PART = 0x11  # dead-lettered messages not yet in their DLQ (JSON [[key, queue, offset, count], ...])
TICK_S = 0.2  # leader: Expire of due checkouts; every member: consumer reconciliation
RECONCILE_EVERY_S = 1.0
NODE_DOWN_AFTER_S = 5.0  # a member whose match index stands still behind the log this long is down (NodeDown)
MAX_POP_NUMS = 32
MAX_POLL_MS = 30_000
IDLE_DOWN_S = 30.0  # a connected consumer that stopped popping this long (and 2x its invisible time) is down
READ_WAIT_S = 2.0  # a delivered message not readable in the local store yet (dispatch lag)
DLQ_PREFIX = "%DLQ%"
FIRST_POP_TIME = "1ST_POP_TIME"
CONN_ATTR = "localDeliveryConsumer"

_NOT_YET = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.NO_MESSAGE_IN_QUEUE,
            GetStatus.NO_MATCHED_LOGIC_QUEUE)  # the queue entry may still be on its way (dispatch): read again

Handler = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None] | RemotingCommand | None]


def parse_groups(spec: str) -> frozenset[str] | None:
    """localDeliveryGroups -> the group names; None = every group ("*")."""
    names = frozenset(g.strip() for g in spec.split(",") if g.strip())
    return None if "*" in names else names


def receipt_handle(offset: int, pop_time: int, invisible_ms: int, did: int, broker_name: str, queue_id: int,
                   consumer: str) -> str:
    """RocketMQ's extraInfo layout (ckOffset popTime invisibleTime reviveQid retryFlag brokerName queueId offset)
    with the delivery id in the reviveQid field and the consumer id appended."""
    return f"{offset} {pop_time} {invisible_ms} {did} 0 {broker_name} {queue_id} {offset} {consumer}"


def parse_handle(handle: str) -> tuple[int, str]:
    """(delivery id, consumer id) of a local-delivery receipt handle; ValueError when it is not one."""
    parts = handle.split()
    if len(parts) < 9:
        raise ValueError(f"not a local-delivery receipt handle: {handle!r}")
    return int(parts[3]), parts[8]


class Inbox:
    """This member's deliveries to one consumer, waiting for its POP_MESSAGE (in delivery order)."""

    def __init__(self) -> None:
        self.items: deque[tuple[str, Deliver]] = deque()
        self.waiters: set[asyncio.Future[None]] = set()

    def push(self, key: str, d: Deliver) -> None:
        if any(x.did == d.did for _, x in self.items):
            return
        self.items.append((key, d))
        for f in self.waiters:
            if not f.done():
                f.set_result(None)

    def drop(self, did: int) -> None:
        self.items = deque(x for x in self.items if x[1].did != did)


class LocalDeliveryService:
    name = "local_delivery"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv, group: RaftGroupService, groups: frozenset[str] | None,
                 fallback: dict[int, Handler]) -> None:
        self.ctx = ctx
        self.env = env
        self.group = group
        self.groups = groups
        self.fallback = fallback
        self.self_id = group.self_id
        self.replica = DeliveryReplica(group.self_id, tuple(group.peers))
        self.boot = secrets.token_hex(3)
        self._seq = itertools.count(1)
        self.live: set[str] = set()  # consumers with an open connection here
        self.inboxes: dict[str, Inbox] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._popping: dict[str, int] = {}  # consumer -> POP_MESSAGEs being answered
        self._last_pop: dict[str, float] = {}  # consumer -> loop time its last pop ended
        self._lag_since: dict[str, float] = {}  # peer -> since when its match index stands still behind the log
        self._last_match: dict[str, int] = {}
        self._node_down_sent: set[str] = set()
        self.sent = 0  # deliveries answered by this member (messages)
        self.sent_bytes = 0
        self.dead_lettered = 0
        # dead-lettered on every member (log order), until the leader's DLQ put is confirmed by a DLQ_DONE entry: a
        # new leader puts what is left (at least once into the DLQ, never lost)
        self.dead_pending: dict[tuple[str, int, int], int] = {}
        self._dlq_inflight: set[tuple[str, int, int]] = set()
        group.register_command(ENTRY_TYPE, self._apply, stamp=self._stamp)
        group.register_command(DLQ_DONE_TYPE, self._apply_dlq_done)
        group.register_snapshot_part(SNAPSHOT_PART, lambda: self.replica.router.snapshot(), self._restore)
        group.register_snapshot_part(DLQ_PART, self._snapshot_dead, self._restore_dead)
        group.add_role_listener(self._on_role)
        group.add_messages_listener(self._on_messages)
        group.add_delete_listener(self._on_deleted)
        ctx.runtime_extras.append(self.runtime)

    def serves(self, group_name: str) -> bool:
        return self.groups is None or group_name in self.groups

    # ---- applies (every member, log order) --------------------------------------------------------------
    def _apply(self, index: int, payload: bytes) -> bytes:
        try:
            key, effects, mine = self.replica.apply(payload)
        except dc.CommandError as e:  # raised before any change: the same on every member
            log.error("local delivery: entry %d refused: %s", index, e)
            return orjson.dumps({"refused": [str(e)]})
        self._effects(key, effects, mine)
        refused = [e.why for e in effects if isinstance(e, Refused)]
        return orjson.dumps({"refused": refused}) if refused else b""

    def _stamp(self, payload: bytes) -> bytes:
        """Leader, before a forwarded command is proposed: its time becomes the leader's clock, so the machines'
        time (checkout deadlines) follows one clock, not whichever member forwarded the command."""
        key, cmd = decode_entry(payload)
        return encode_entry(key, dataclasses.replace(cmd, ts=self.env.clock.now_ms()))

    def _on_messages(self, index: int, msgs: list[MessageInner], result: PutResult) -> None:
        if not result.ok or not msgs or result.queue_offset < 0:
            return
        topics = self.replica.router.topics()
        if not topics or not any(m.topic in topics for m in msgs):
            return
        first = msgs[0]
        if any(m.topic != first.topic or m.queue_id != first.queue_id for m in msgs):
            log.error("local delivery: entry %d mixes queues: its messages are not enqueued", index)
            return
        for i, m in enumerate(msgs):
            for key, effects, mine in self.replica.enqueue(m.topic, m.queue_id, result.queue_offset + i,
                                                           max(1, len(m.body))):
                self._effects(key, effects, mine)

    def _effects(self, key: str, effects: list[Effect], mine: list[Deliver]) -> None:
        for e in effects:
            if isinstance(e, Settled | Returned):
                box = self.inboxes.get(e.consumer)
                if box is not None:
                    box.drop(e.did)
            elif isinstance(e, DeadLettered):
                self.dead_pending[(key, e.queue, e.offset)] = e.count
                if self.group.driver.is_leader:
                    self._spawn(self._dead_letter(key, e.queue, e.offset, e.count))
        for d in mine:
            self._deliver(key, d)

    def _deliver(self, key: str, d: Deliver) -> None:
        if d.consumer not in self.live:
            return  # not connected here (any more): reconciliation or the expiry returns it
        self.inboxes.setdefault(d.consumer, Inbox()).push(key, d)

    def _restore(self, data: bytes) -> None:
        for key, d in self.replica.restore(data):
            self._deliver(key, d)

    def _on_deleted(self, topic: str | None, group_name: str | None) -> None:
        """A topic or subscription group deleted (applied on every member at the same index): its local-delivery
        queues go, with what they hold, the deliveries waiting here and their pending dead letters."""
        gone = set()
        for key in list(self.replica.router.machines):
            t, _, g = key.rpartition("@")
            if t == topic or g == group_name:
                del self.replica.router.machines[key]
                gone.add(key)
        if not gone:
            return
        for box in self.inboxes.values():
            box.items = deque(x for x in box.items if x[0] not in gone)
        for item in [i for i in self.dead_pending if i[0] in gone]:
            del self.dead_pending[item]
        log.info("local delivery: queues %s deleted", ", ".join(sorted(gone)))

    def _apply_dlq_done(self, index: int, payload: bytes) -> None:
        key, queue, offset = orjson.loads(payload)
        self.dead_pending.pop((str(key), int(queue), int(offset)), None)

    def _snapshot_dead(self) -> bytes:
        return orjson.dumps([[k, q, o, n] for (k, q, o), n in self.dead_pending.items()])

    def _restore_dead(self, data: bytes) -> None:
        self.dead_pending = {(str(k), int(q), int(o)): int(n) for k, q, o, n in orjson.loads(data)}

    def _retry_dead_letters(self) -> None:
        """Leader: put what is dead-lettered but not confirmed in its DLQ (a new leader; a put that failed)."""
        for (key, queue, offset), count in list(self.dead_pending.items()):
            if (key, queue, offset) not in self._dlq_inflight:
                self._spawn(self._dead_letter(key, queue, offset, count))

    def _on_role(self, role: Role, term: int, leader_id: str) -> None:
        if role == Role.LEADER:
            self._retry_dead_letters()
        self._lag_since.clear()
        self._last_match.clear()
        self._node_down_sent.clear()
        for key, d in self.replica.set_role(role == Role.LEADER, term):
            self._deliver(key, d)

    # ---- proposing ------------------------------------------------------------------------------------------
    async def propose(self, key: str, cmd: dc.Command) -> list[str]:
        """Commit one command (from any member); the refusals of its apply."""
        out = await self.group.forward_command(ENTRY_TYPE, encode_entry(key, cmd))
        if not out:
            return []
        return [str(x) for x in orjson.loads(out).get("refused", [])]

    def _spawn(self, coro: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ---- connections -------------------------------------------------------------------------------------------
    def _consumer_of(self, conn: Any) -> str:
        cid: str | None = conn.attrs.get(CONN_ATTR) if conn is not None else None
        if cid is None:
            cid = f"{self.self_id}.{self.boot}.{next(self._seq)}"
            self.live.add(cid)
            if conn is not None:
                conn.attrs[CONN_ATTR] = cid
                conn.add_close_callback(lambda _c, cid=cid: self._closed(cid))
        return cid

    def _closed(self, cid: str) -> None:
        self.live.discard(cid)
        self._last_pop.pop(cid, None)
        box = self.inboxes.pop(cid, None)
        if box is not None:
            for f in box.waiters:
                if not f.done():
                    f.set_result(None)
        self._spawn(self._consumer_down(cid))

    async def _consumer_down(self, cid: str) -> None:
        now = self.env.clock.now_ms()
        for key, m in list(self.replica.router.machines.items()):
            if cid in m.consumers:
                with contextlib.suppress(OrbitMQError, TimeoutError, dc.CommandError):
                    await self.propose(key, dc.ConsumerDown(now, cid))

    # ---- timers ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        return None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last_reconcile = loop.time()
        while True:
            await asyncio.sleep(TICK_S)
            try:
                if self.group.driver.is_leader:
                    await self._expire()
                    await self._nodes_down(loop.time())
                    if loop.time() - last_reconcile >= RECONCILE_EVERY_S:
                        self._retry_dead_letters()
                if loop.time() - last_reconcile >= RECONCILE_EVERY_S:
                    last_reconcile = loop.time()
                    await self._reconcile()
            except (OrbitMQError, TimeoutError) as e:
                log.info("local delivery: timer round skipped: %s", e)

    async def _expire(self) -> None:
        now = self.env.clock.now_ms()
        for key, m in list(self.replica.router.machines.items()):
            if any(co.deadline <= now for co in m.checkouts.values()):
                await self.propose(key, dc.Expire(now))

    async def _nodes_down(self, mono: float) -> None:
        """A member whose match index stays behind the leader's log without moving for NODE_DOWN_AFTER_S is down:
        NodeDown returns what its consumers hold (they are gone with it, or attach again on their next pop)."""
        st = self.group.driver.status()
        progress = st.get("progress")
        if not isinstance(progress, dict):
            return
        last = int(st.get("last_index", 0))  # type: ignore[call-overload]
        for peer, pr in progress.items():
            if peer == self.self_id:
                continue
            match = int(pr["match"])
            if match >= last or self._last_match.get(peer) != match:  # caught up, or acknowledging entries
                self._last_match[peer] = match
                self._lag_since.pop(peer, None)
                if match >= last:
                    self._node_down_sent.discard(peer)
                continue
            since = self._lag_since.setdefault(peer, mono)
            if mono - since < NODE_DOWN_AFTER_S or peer in self._node_down_sent:
                continue
            now = self.env.clock.now_ms()
            for key, m in list(self.replica.router.machines.items()):
                if any(c.node == peer for c in m.consumers.values()):
                    log.warning("local delivery: member %s is %.1f s behind: its consumers of %s are down", peer,
                                mono - since, key)
                    await self.propose(key, dc.NodeDown(now, peer))
            self._node_down_sent.add(peer)

    async def _reconcile(self) -> None:
        """Consumers on this node without a connection here (an earlier run of this member, a missed close), and
        idle ones: connected but not popping for IDLE_DOWN_S (at least twice their invisible time), so what they
        hold goes to consumers that pop instead of expiring again and again; their next pop attaches again."""
        now = self.env.clock.now_ms()
        mono = asyncio.get_running_loop().time()
        for key, m in list(self.replica.router.machines.items()):
            for cid, c in list(m.consumers.items()):
                if c.node != self.self_id:
                    continue
                idle = mono - self._last_pop.get(cid, mono)
                if cid not in self.live or (cid not in self._popping
                                            and idle > max(IDLE_DOWN_S, 2 * c.invisible_ms / 1000)):
                    await self.propose(key, dc.ConsumerDown(now, cid))

    async def _dead_letter(self, key: str, queue: int, offset: int, count: int) -> None:
        """Leader: the message into %DLQ%<group>, then a DLQ_DONE entry. A leader change between the two puts it
        again (at least once)."""
        item = (key, queue, offset)
        if item in self._dlq_inflight:
            return
        self._dlq_inflight.add(item)
        try:
            await self._put_dead_letter(key, queue, offset, count)
        finally:
            self._dlq_inflight.discard(item)

    async def _put_dead_letter(self, key: str, queue: int, offset: int, count: int) -> None:
        topic, _, group_name = key.rpartition("@")
        res = self.group.real_store.get_message(group_name, topic, queue, offset, 1)
        if res.status is GetStatus.FOUND:
            m = decode_record(res.buffers[0])
            dlq = DLQ_PREFIX + group_name
            self.ctx.topics.create_system_topic(dlq, 1, Perm.READ)
            props = dict(m.properties)
            props.setdefault(Prop.RETRY_TOPIC, m.topic)
            props.setdefault(Prop.ORIGIN_MESSAGE_ID, m.msg_id)
            msg = MessageInner(dlq, 0, m.body, props, m.flag, m.sys_flag & ~0xC, m.born_timestamp, m.born_host,
                               self.ctx.store_host, count)
            result = await self.ctx.store.put_messages([msg])
            if result.status is not PutStatus.PUT_OK:
                log.warning("local delivery: %s %d@%d not put into %s: %s (retried)", key, queue, offset, dlq,
                            result.status.name)
                return
            self.dead_lettered += 1
        else:
            log.warning("local delivery: dead-lettered %s %d@%d is gone from the store", key, queue, offset)
        with contextlib.suppress(OrbitMQError, TimeoutError):
            await self.group.forward_command(DLQ_DONE_TYPE, orjson.dumps([key, queue, offset]))

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for box in self.inboxes.values():
            for f in box.waiters:
                if not f.done():
                    f.set_result(None)

    # ---- request handlers ------------------------------------------------------------------------------------
    def handlers(self) -> dict[int, Handler]:
        return {int(RequestCode.POP_MESSAGE): self._route(self.handle_pop, RequestCode.POP_MESSAGE),
                int(RequestCode.ACK_MESSAGE): self._route(self.handle_ack, RequestCode.ACK_MESSAGE),
                int(RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
                    self._route(self.handle_change_invisible_time, RequestCode.CHANGE_MESSAGE_INVISIBLETIME),
                int(RequestCode.NOTIFICATION): self._route(self.handle_notification, RequestCode.NOTIFICATION),
                int(RequestCode.BATCH_ACK_MESSAGE): self._batch_ack}

    def _batch_ack(self, conn: Any, req: RemotingCommand) -> Any:
        """BATCH_ACK_MESSAGE names its groups in the body: one of a local-delivery group is refused (its receipt
        handles are delivery ids, acknowledged one by one with ACK_MESSAGE); others go to the pop service."""
        try:
            acks = orjson.loads(req.body or b"{}").get("acks") or []
            names = {str(a.get("c", "")) for a in acks}
        except (ValueError, AttributeError):
            names = set()
        local = sorted(n for n in names if self.serves(n))
        if local:
            return req.response(ResponseCode.SYSTEM_ERROR, f"group {local[0]} uses local delivery: acknowledge with "
                                "ACK_MESSAGE")
        other = self.fallback.get(int(RequestCode.BATCH_ACK_MESSAGE))
        if other is None:
            return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "batch ack not supported")
        return other(conn, req)

    async def handle_notification(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        """NOTIFICATION: hasMsg once this connection's consumer has a delivery waiting here or the queue has
        messages nobody holds (or pollTime passed)."""
        ext = req.ext_fields
        key = queue_key(ext_str(ext, "topic"), ext_str(ext, "consumerGroup"))
        poll_ms = min(max(ext_int(ext, "pollTime", 0), 0), MAX_POLL_MS)
        cid = conn.attrs.get(CONN_ATTR) if conn is not None else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000

        def has() -> bool:
            box = self.inboxes.get(cid) if cid else None
            m = self.replica.router.machines.get(key)
            return bool(box is not None and box.items) or bool(m is not None and (m.ready or m.returns))
        while not (found := has()) and loop.time() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        resp = req.response(ResponseCode.SUCCESS)
        resp.ext_fields = {"hasMsg": "true" if found else "false", "pollingFull": "false"}
        return resp

    def _route(self, mine: Handler, code: int) -> Handler:
        other = self.fallback.get(int(code))

        def handler(conn: Any, req: RemotingCommand) -> Any:
            if self.serves(ext_str(req.ext_fields, "consumerGroup")):
                return mine(conn, req)
            if other is None:
                return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {code} not supported")
            return other(conn, req)
        return handler

    async def _commit(self, req: RemotingCommand, key: str, cmd: dc.Command,
                      refused_code: int = ResponseCode.NO_MESSAGE) -> RemotingCommand | None:
        """Propose; an error response, or None when committed without refusal. A refused handle is NO_MESSAGE
        (RocketMQ's answer to an ack of an offset it cannot take)."""
        try:
            refused = await self.propose(key, cmd)
        except NotLeaderError as e:
            return req.response(ResponseCode.SERVICE_NOT_AVAILABLE, f"no Raft leader to commit to, retry: {e}")
        except TimeoutError:
            return req.response(ResponseCode.SYSTEM_BUSY, "the Raft group did not commit in time, retry")
        except (OrbitMQError, dc.CommandError) as e:
            return req.response(ResponseCode.SYSTEM_ERROR, str(e))
        if refused:
            return req.response(refused_code, "; ".join(refused))
        return None

    async def handle_pop(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields
        group_name = ext_str(ext, "consumerGroup")
        topic = ext_str(ext, "topic")
        max_nums = max(1, min(ext_int(ext, "maxMsgNums", MAX_POP_NUMS), MAX_POP_NUMS))
        invisible_ms = ext_int(ext, "invisibleTime")
        poll_ms = min(max(ext_int(ext, "pollTime", 0), 0), MAX_POLL_MS)
        if not self.ctx.config.broker_permission & Perm.READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the broker[{self.ctx.config.broker_ip1}] peeking "
                                "message is forbidden")
        tc = self.ctx.topics.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & Perm.READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        sgc = self.ctx.groups.find_or_create(group_name)
        if sgc is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group_name}] does not exist, apply first please!")
        if not sgc.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group_name}")
        if invisible_ms <= 0:
            return req.response(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible_ms} must be > 0")
        exp = ext_str(ext, "exp", "*") or "*"
        if (ext_str(ext, "expType", "TAG") or "TAG") != "TAG" or exp.strip() != "*":
            return req.response(ResponseCode.SYSTEM_ERROR, f"group {group_name} uses local delivery, which does not "
                                "filter: subscribe with '*'")
        if ext_int(ext, "queueId", -1) >= 0:
            return req.response(ResponseCode.SYSTEM_ERROR, f"group {group_name} uses local delivery: pop from every "
                                "queue (queueId -1)")
        key = queue_key(topic, group_name)
        cid = self._consumer_of(conn)
        m = self.replica.router.machines.get(key)
        c = m.consumers.get(cid) if m is not None else None
        if c is None or c.prefetch != max_nums or c.invisible_ms != invisible_ms:
            err = await self._commit(req, key, dc.Attach(self.env.clock.now_ms(), cid, self.self_id, max_nums,
                                                         invisible_ms), ResponseCode.SYSTEM_ERROR)
            if err is not None:
                return err
        box = self.inboxes.setdefault(cid, Inbox())
        self._popping[cid] = self._popping.get(cid, 0) + 1
        try:
            return await self._wait_and_answer(req, key, topic, group_name, cid, box, max_nums, poll_ms)
        finally:
            self._popping[cid] -= 1
            if not self._popping[cid]:
                del self._popping[cid]
            self._last_pop[cid] = asyncio.get_running_loop().time()

    async def _wait_and_answer(self, req: RemotingCommand, key: str, topic: str, group_name: str, cid: str,
                               box: Inbox, max_nums: int, poll_ms: int) -> RemotingCommand:
        deadline = asyncio.get_running_loop().time() + poll_ms / 1000
        while not any(k == key for k, _ in box.items) and cid in self.live:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            box.waiters.add(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), left)
            except TimeoutError:
                pass
            finally:
                box.waiters.discard(fut)
        taken: list[tuple[str, Deliver]] = []
        while box.items and len(taken) < max_nums:
            item = box.items.popleft()
            if item[0] == key:
                taken.append(item)
            else:
                box.items.append(item)  # another topic's delivery to this connection: its own pop takes it
                if all(k != key for k, _ in box.items):
                    break
        if not taken:
            code = ResponseCode.POLLING_TIMEOUT if poll_ms > 0 else ResponseCode.PULL_NOT_FOUND
            return req.response(code, "no new message")
        return await self._answer(req, topic, group_name, cid, taken)

    async def _read(self, group_name: str, topic: str, d: Deliver) -> Any:
        store = self.group.real_store
        loop = asyncio.get_running_loop()
        end = loop.time() + READ_WAIT_S
        while True:
            res = store.get_message(group_name, topic, d.queue, d.offset, 1)
            if res.status is GetStatus.FOUND:
                return decode_record(res.buffers[0])
            if res.status not in _NOT_YET or loop.time() >= end:
                return None  # gone (retention) or never dispatched here
            await asyncio.sleep(0.02)

    async def _answer(self, req: RemotingCommand, topic: str, group_name: str, cid: str,
                      taken: list[tuple[str, Deliver]]) -> RemotingCommand:
        pop_time = self.env.clock.now_ms()
        bn = self.ctx.config.broker_name
        parts: list[bytes] = []
        start_info: list[str] = []
        msg_info: list[str] = []
        invisible = 0
        for _key, d in taken:
            m = await self._read(group_name, topic, d)
            if m is None:  # not readable here: it comes back after its invisible time
                log.warning("local delivery: %s %d@%d not readable here", topic, d.queue, d.offset)
                continue
            c = self.replica.router.machines[queue_key(topic, group_name)].consumers.get(cid)
            invisible = c.invisible_ms if c is not None else max(1, d.deadline - pop_time)
            props = dict(m.properties)
            props[Prop.POP_CK] = receipt_handle(d.offset, pop_time, invisible, d.did, bn, d.queue, cid)
            props.setdefault(FIRST_POP_TIME, str(pop_time))
            parts.append(encode_record(
                topic=m.topic.encode(), body=m.body, properties=encode_properties(props).encode(),
                queue_id=m.queue_id, flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                born_host=pack_host_port(m.born_host), store_host=pack_host_port(m.store_host),
                reconsume_times=d.count, prepared_transaction_offset=m.prepared_transaction_offset,
                queue_offset=m.queue_offset, phys_offset=m.phys_offset, store_timestamp=m.store_timestamp))
            start_info.append(f"0 {d.queue} {d.offset}")
            msg_info.append(f"0 {d.queue} {d.offset}")
        if not parts:
            return req.response(ResponseCode.PULL_NOT_FOUND, "no new message")
        body = b"".join(parts)
        self.sent += len(parts)
        self.sent_bytes += len(body)
        self.ctx.stats.on_get(len(parts), len(body))
        self.ctx.group_stats.on_get(group_name, topic, len(parts))
        resp = req.response(ResponseCode.SUCCESS, None, body=body)
        resp.ext_fields = {"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": "0",
                           "restNum": "0", "startOffsetInfo": ";".join(start_info),
                           "msgOffsetInfo": ";".join(msg_info)}
        return resp

    async def handle_ack(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields or {}
        try:
            did, cid = parse_handle(ext_str(ext, "extraInfo"))
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, str(e))
        key = queue_key(ext_str(ext, "topic"), ext_str(ext, "consumerGroup"))
        if key not in self.replica.router.machines:  # never create a queue from a handle
            return req.response(ResponseCode.NO_MESSAGE, f"no local-delivery queue {key} here")
        err = await self._commit(req, key, dc.Settle(self.env.clock.now_ms(), cid, (did,)))
        return err or req.response(ResponseCode.SUCCESS)

    async def handle_change_invisible_time(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields or {}
        try:
            did, cid = parse_handle(ext_str(ext, "extraInfo"))
        except ValueError as e:
            return req.response(ResponseCode.SYSTEM_ERROR, str(e))
        invisible_ms = ext_int(ext, "invisibleTime")
        if invisible_ms <= 0:
            return req.response(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible_ms} must be > 0")
        now = self.env.clock.now_ms()
        key = queue_key(ext_str(ext, "topic"), ext_str(ext, "consumerGroup"))
        if key not in self.replica.router.machines:  # never create a queue from a handle
            return req.response(ResponseCode.NO_MESSAGE, f"no local-delivery queue {key} here")
        err = await self._commit(req, key, dc.ChangeInvisible(now, cid, did, invisible_ms))
        if err is not None:
            return err
        resp = req.response(ResponseCode.SUCCESS)
        resp.ext_fields = {"popTime": str(now), "invisibleTime": str(invisible_ms), "reviveQid": str(did)}
        return resp

    def runtime(self) -> dict[str, str]:
        machines = self.replica.router.machines
        return {"localDeliverySent": str(self.sent), "localDeliverySentBytes": str(self.sent_bytes),
                "localDeliveryQueues": str(len(machines)),
                "localDeliveryCheckouts": str(sum(len(m.checkouts) for m in machines.values())),
                "localDeliveryWaiting": str(sum(len(m.ready) + len(m.returns) for m in machines.values())),
                "localDeliveryConsumers": str(sum(len(m.consumers) for m in machines.values())),
                "localDeliveryDeadLettered": str(self.dead_lettered),
                "localDeliveryDeadPending": str(len(self.dead_pending)),
                "localDeliveryApplied": str(self.group.sm.applied),
                "localDeliveryDigest": hashlib.blake2b(self.replica.router.snapshot(), digest_size=8).hexdigest()}


def create(ctx: BrokerContext, env: ServiceEnv) -> LocalDeliveryService | None:
    """After the pop service (its handlers serve the groups not in local delivery)."""
    group: RaftGroupService | None = ctx.services.get("raft_group")  # type: ignore[assignment]
    if group is None or not ctx.config.local_delivery_groups.strip():
        return None
    pop = ctx.services.get("pop")
    fallback = dict(pop.handlers()) if pop is not None else {}
    return LocalDeliveryService(ctx, env, group, parse_groups(ctx.config.local_delivery_groups), fallback)
