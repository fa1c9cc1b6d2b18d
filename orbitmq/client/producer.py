"""Producer: sync-style async sends with Java-equivalent queue selection and retries, oneway, batch, orderly
(sharding key) and callback sends; opt-in auto-batching of concurrent sends (accumulator.py).

The hot path is lean: per-topic header templates and cached publish queue lists; one dict copy per send.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from orbitmq.base import marks
from orbitmq.base.clock import monotonic_ms, now_ms
from orbitmq.base.errors import RemotingError
from orbitmq.client.accumulator import ALONE, Pending, SendAccumulator
from orbitmq.client.errors import (
    SEND_RETRY_CODES,
    ClientError,
    ClientStateError,
    MessageValidationError,
    NoRouteError,
    ResponseError,
    error_for_response,
)
from orbitmq.client.instance import AUTO_CREATE_TOPIC_KEY, ClientInstance, TlsOption, session_credentials
from orbitmq.client.route_cache import PublishInfo
from orbitmq.client.tasks import TaskSet
from orbitmq.model import Message, MessageQueue, Prop, UniqIdGenerator, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
AUTO_BATCH_MAX_MESSAGES = 32
AUTO_BATCH_MAX_BYTES = 256 * 1024
# a message carrying any of these goes alone: delayed / timer / transactional, or already keyed (a re-send, which
# broker dedup answers per request: a batch is answered from memory only when every key in it was seen)
_SOLO_PROPS = frozenset({Prop.UNIQ_KEY, Prop.DELAY, Prop.TRAN_MSG, Prop.TIMER_DELIVER_MS, Prop.START_DELIVER_TIME,
                         Prop.TIMER_DELAY_SEC, "TIMER_DELAY_MS"})
_RECORD_OVERHEAD = 22  # batch record: 20-byte head + 2-byte properties length
SYSFLAG_COMPRESSED = 0x1
_TOPIC_CHARS = frozenset("%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
_H = struct.Struct(">h")


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str  # UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # broker's offset id(s)
    message_queue: MessageQueue
    queue_offset: int
    region_id: str = "DefaultRegion"


def validate_topic(topic: str) -> None:
    if not topic or not topic.strip():
        raise MessageValidationError("topic is blank")
    if len(topic) > 127:
        raise MessageValidationError(f"topic longer than 127 characters: {topic[:40]}...")
    if not _TOPIC_CHARS.issuperset(topic):
        raise MessageValidationError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")


def validate_message(msg: Message) -> None:
    validate_topic(msg.topic)
    if msg.body is None or len(msg.body) == 0:
        raise MessageValidationError("message body is empty")
    if len(msg.body) > MAX_MESSAGE_SIZE:
        raise MessageValidationError(f"message body {len(msg.body)} bytes exceeds {MAX_MESSAGE_SIZE}")


def build_send_header(base: dict[str, str], queue_id: int, sys_flag: int, born_ms: int, flag: int,
                      properties: str, reconsume_times: int = 0, max_reconsume_times: int | None = None,
                      batch: bool = False, broker_name: str | None = None) -> dict[str, str]:
    """V2 send header (single-letter keys) from a per-topic template holding a, b, c, d, k."""
    h = base.copy()
    h["e"] = str(queue_id)
    h["f"] = str(sys_flag)
    h["g"] = str(born_ms)
    h["h"] = str(flag)
    if properties:
        h["i"] = properties
    h["j"] = str(reconsume_times)
    if max_reconsume_times is not None:
        h["l"] = str(max_reconsume_times)
    h["m"] = "true" if batch else "false"
    if broker_name:
        h["n"] = broker_name
    return h


def header_template(group: str, topic: str, default_topic_queue_nums: int) -> dict[str, str]:
    return {"a": group, "b": topic, "c": AUTO_CREATE_TOPIC_KEY, "d": str(default_topic_queue_nums),
            "k": "false"}


def encode_batch_body(msgs: list[Message], props_list: list[str]) -> bytes:
    """SEND_BATCH_MESSAGE body: per message [size, magic 0, crc 0, flag, body len, body, props len, props]."""
    parts: list[bytes] = []
    for m, props in zip(msgs, props_list, strict=True):
        pb = props.encode("utf-8")
        total = 20 + len(m.body) + 2 + len(pb)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, m.flag, len(m.body)))
        parts.append(m.body)
        parts.append(_H.pack(len(pb)))
        parts.append(pb)
    return b"".join(parts)


def split_batch_response(resp: RemotingCommand, mq: MessageQueue, uniqs: list[str]) -> list[SendResult]:
    """One SendResult per message of a stored batch: its own UNIQ_KEY, its own offset id (the comma-separated
    `msgId` split) and queue offset (first + index); queue and status are the batch's."""
    status = _STATUS_BY_CODE[resp.code]  # type: ignore[index]
    ext = resp.ext_fields or {}
    qid = int(ext.get("queueId", mq.queue_id))
    queue = MessageQueue(mq.topic, mq.broker_name, qid) if qid != mq.queue_id else mq
    ids = ext.get("msgId", "").split(",")
    first = int(ext.get("queueOffset", -1))
    region = ext.get("MSG_REGION", "DefaultRegion")
    return [SendResult(status, u, ids[i] if i < len(ids) else "", queue, first + i if first >= 0 else -1, region)
            for i, u in enumerate(uniqs)]


@dataclass(slots=True)
class OutgoingSend:
    """What one send request carries, kept across retry attempts (re-keyed when dedup is off)."""

    code: int
    body: bytes
    sys_flag: int
    props: str
    flag: int
    rt: int
    mrt: int | None
    msgs: list[Message]
    batch: bool = False


def parse_send_response(resp: RemotingCommand, addr: str, mq: MessageQueue, uniq: str) -> SendResult:
    status = _STATUS_BY_CODE.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise error_for_response(resp.code, resp.remark, addr)
    ext = resp.ext_fields or {}
    qid = int(ext.get("queueId", mq.queue_id))
    return SendResult(status, uniq, ext.get("msgId", ""),
                      MessageQueue(mq.topic, mq.broker_name, qid) if qid != mq.queue_id else mq,
                      int(ext.get("queueOffset", -1)), ext.get("MSG_REGION", "DefaultRegion"))


class Producer:
    def __init__(self, group: str, namesrv: str, *, send_timeout_ms: int = 3000, retry_times: int = 2,
                 compress_over_bytes: int = 4096, default_topic_queue_nums: int = 4, dedup: bool = True,
                 instance_name: str | None = None, compress_level: int = 5, auto_batch: bool = False,
                 auto_batch_max_messages: int = AUTO_BATCH_MAX_MESSAGES, auto_batch_max_bytes: int = AUTO_BATCH_MAX_BYTES,
                 auto_batch_linger_ms: float = 0, access_key: str | None = None, secret_key: str | None = None,
                 tls: TlsOption = None, _internal: bool = False) -> None:
        """auto_batch: concurrent send() calls of batchable messages (same topic and WAIT, no explicit queue, no
        delay/timer/transaction, not %RETRY%, body <= compress_over_bytes) made in the same event-loop iteration
        (or within auto_batch_linger_ms of the first) go out as one SEND_BATCH_MESSAGE of at most
        auto_batch_max_messages messages / auto_batch_max_bytes bytes; each send() still gets its own SendResult.
        A lone send is a plain SEND_MESSAGE_V2. Off by default."""
        if not group:
            raise ClientStateError("producer group is empty")
        self.group = group
        self.namesrv = namesrv
        self.send_timeout_ms = send_timeout_ms
        self.retry_times = retry_times
        self.compress_over_bytes = compress_over_bytes
        self.compress_level = compress_level
        self.default_topic_queue_nums = default_topic_queue_nums
        self.dedup = dedup
        self.instance_name = instance_name
        self.credentials = session_credentials(access_key, secret_key)  # RocketMQ ACL: sign every request
        self.tls = tls  # True or an ssl.SSLContext: TLS to name servers and brokers
        self.auto_batch = auto_batch
        self.auto_batch_max_messages = auto_batch_max_messages
        self.auto_batch_max_bytes = min(auto_batch_max_bytes, MAX_MESSAGE_SIZE)
        self.auto_batch_linger_ms = auto_batch_linger_ms
        self._acc: SendAccumulator[SendResult] | None = self._new_accumulator() if auto_batch else None
        self._internal = _internal  # a consumer's helper: shares CLIENT_INNER_PRODUCER, never (un)registers
        self._inst: ClientInstance | None = None
        self._ids: UniqIdGenerator | None = None
        self._templates: dict[str, dict[str, str]] = {}
        self._valid_topics: set[str] = set()
        self._tasks = TaskSet(f"producer {group}")

    # ---- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._inst is not None:
            return
        inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials, tls=self.tls)
        if not self._internal:
            try:
                inst.register_producer(self.group, self)
            except ClientError:
                await inst.release()
                raise
        self._inst = inst
        self._ids = UniqIdGenerator(inst.client_ip)
        if self.auto_batch and self._acc is None:
            self._acc = self._new_accumulator()

    async def shutdown(self) -> None:
        """Accumulated sends are dispatched and awaited first; a batch still in flight send_timeout_ms + 1 s later
        is cancelled and its waiters get ClientStateError."""
        inst = self._inst
        if inst is None:
            return
        acc, self._acc = self._acc, None
        if acc is not None:
            await acc.close(self.send_timeout_ms / 1000 + 1)
        await self._tasks.close()
        self._tasks = TaskSet(f"producer {self.group}")
        self._inst = None
        if not self._internal:
            await inst.unregister(producer_group=self.group)
        await inst.release()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _instance(self) -> ClientInstance:
        inst = self._inst
        if inst is None:
            raise ClientStateError(f"producer {self.group} is not started")
        return inst

    def _new_accumulator(self) -> SendAccumulator[SendResult]:
        return SendAccumulator(self._send_accumulated, max_messages=self.auto_batch_max_messages,
                               max_bytes=self.auto_batch_max_bytes, linger_ms=self.auto_batch_linger_ms,
                               name=f"producer {self.group}")

    def _template(self, topic: str) -> dict[str, str]:
        t = self._templates.get(topic)
        if t is None:
            t = self._templates[topic] = header_template(self.group, topic, self.default_topic_queue_nums)
        return t

    # ---- message preparation ----------------------------------------------------------------------------------
    def _prepare(self, msg: Message) -> tuple[bytes, int, str, int, int | None]:
        """-> (wire body, sysflag, properties string, reconsume times, max reconsume times); sets UNIQ_KEY."""
        if msg.topic not in self._valid_topics:
            validate_topic(msg.topic)
            self._valid_topics.add(msg.topic)
        if not msg.body:
            raise MessageValidationError("message body is empty")
        if len(msg.body) > MAX_MESSAGE_SIZE:
            raise MessageValidationError(f"message body {len(msg.body)} bytes exceeds {MAX_MESSAGE_SIZE}")
        props = msg.properties
        if Prop.UNIQ_KEY not in props:
            assert self._ids is not None
            props[Prop.UNIQ_KEY] = self._ids.next_id(now_ms())
        body = msg.body
        sys_flag = 0
        if len(body) > self.compress_over_bytes:
            packed = zlib.compress(body, self.compress_level)
            if len(packed) < len(body):
                body, sys_flag = packed, SYSFLAG_COMPRESSED
        if props.get(Prop.TRAN_MSG) == "true":
            sys_flag |= 0x4
        reconsume, max_reconsume = 0, None
        if msg.topic.startswith("%RETRY%"):
            props = dict(props)
            rt = props.pop(Prop.RECONSUME_TIME, None)
            mrt = props.pop(Prop.MAX_RECONSUME_TIMES, None)
            reconsume = int(rt) if rt else 0
            max_reconsume = int(mrt) if mrt else None
        return body, sys_flag, encode_properties(props), reconsume, max_reconsume

    def _new_uniq(self, msg: Message) -> str:
        assert self._ids is not None
        uid = msg.properties[Prop.UNIQ_KEY] = self._ids.next_id(now_ms())
        return uid

    def _rekey(self, req: OutgoingSend) -> None:
        """A retry with dedup off: every message of the request gets a fresh UNIQ_KEY."""
        for m in req.msgs:
            self._new_uniq(m)
        if req.batch:
            req.body = encode_batch_body(req.msgs, [self._prepare(m)[2] for m in req.msgs])
        else:
            req.body, req.sys_flag, req.props, req.rt, req.mrt = self._prepare(req.msgs[0])

    # ---- sends ------------------------------------------------------------------------------------------------
    async def send(self, msg: Message, *, queue: MessageQueue | None = None) -> SendResult:
        """Send and wait for the broker: up to 1 + retry_times attempts within send_timeout_ms for codes
        {1,14,16,17,204,205} and network errors (where each retry goes: _invoke_send). An explicit queue is tried
        once.
        With auto_batch, a batchable message may travel in one SEND_BATCH_MESSAGE with concurrent sends."""
        inst = self._instance()
        acc = self._acc
        if (acc is not None and queue is None and msg.body and len(msg.body) <= self.compress_over_bytes
                and _SOLO_PROPS.isdisjoint(msg.properties) and not msg.topic.startswith("%RETRY%")):
            prepared = self._prepare(msg)  # not compressed (body <= compress_over_bytes), not a retry topic
            size = _RECORD_OVERHEAD + len(prepared[0]) + len(prepared[2].encode("utf-8"))
            if size <= acc.max_bytes:
                r = await acc.submit((msg.topic, msg.properties.get(Prop.WAIT)), msg, prepared[2], size)
                if r is not ALONE:
                    return r  # type: ignore[no-any-return]
            body, sys_flag, props, rt, mrt = prepared
        else:
            body, sys_flag, props, rt, mrt = self._prepare(msg)
        req = OutgoingSend(RequestCode.SEND_MESSAGE_V2, body, sys_flag, props, msg.flag, rt, mrt, [msg])
        if queue is None:
            resp, addr, mq = await self._invoke_send(inst, msg.topic, 1 + self.retry_times, None, req, True)
        else:
            resp, addr, mq = await self._invoke_send(inst, msg.topic, 1, lambda pi, last: queue, req, True)
        return parse_send_response(resp, addr, mq, msg.properties[Prop.UNIQ_KEY])

    async def send_orderly(self, msg: Message, sharding_key: str) -> SendResult:
        """Send to queue java_hash(sharding_key) % n: the same key always lands on the same queue."""
        inst = self._instance()
        body, sys_flag, props, rt, mrt = self._prepare(msg)
        req = OutgoingSend(RequestCode.SEND_MESSAGE_V2, body, sys_flag, props, msg.flag, rt, mrt, [msg])
        resp, addr, mq = await self._invoke_send(inst, msg.topic, 1 + self.retry_times,
                                                 lambda pi, last: pi.select_by_key(sharding_key), req, True)
        return parse_send_response(resp, addr, mq, msg.properties[Prop.UNIQ_KEY])

    async def _send_accumulated(self, key: Hashable, items: list[Pending]) -> list[SendResult]:
        """The accumulator's dispatcher: one SEND_BATCH_MESSAGE (same retry policy as send()) -> per-message
        results."""
        inst = self._instance()
        topic, wait = key  # type: ignore[misc]
        msgs = [p.msg for p in items]
        batch_props = encode_properties({Prop.WAIT: wait}) if wait is not None else ""
        req = OutgoingSend(RequestCode.SEND_BATCH_MESSAGE, encode_batch_body(msgs, [p.props for p in items]), 0,
                           batch_props, 0, 0, None, msgs, batch=True)
        resp, _addr, mq = await self._invoke_send(inst, topic, 1 + self.retry_times, None, req, True)
        return split_batch_response(resp, mq, [m.properties[Prop.UNIQ_KEY] for m in msgs])

    async def _invoke_send(self, inst: ClientInstance, topic: str, attempts: int,
                           pick: Callable[[PublishInfo, str | None], MessageQueue] | None, req: OutgoingSend,
                           rekey: bool) -> tuple[RemotingCommand, str, MessageQueue]:
        """The retry loop of every send: -> (a stored-status response, broker address, queue).

        dedup=True (keys kept across attempts): an attempt whose outcome is unknown (no response in time, or the
        connection lost after the request left) is retried on the SAME queue of the same broker, whose
        de-duplication answers it if the first copy was stored; every attempt but the last waits at most half of
        the time left, so that a retry fits in send_timeout_ms. A broker that cannot be reached (the connect fails:
        nothing was sent) or that answers a retriable code (nothing stored) is left for another one (`pick` None:
        round-robin avoiding it). dedup=False: every retry gets fresh UNIQ_KEYs (`rekey`) and moves on at once."""
        deadline = monotonic_ms() + self.send_timeout_ms
        sticky = self.dedup
        avoid: str | None = None  # broker that failed without storing
        again: MessageQueue | None = None  # queue whose last attempt has an unknown outcome
        last_err: Exception | None = None
        for attempt in range(attempts):
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                break
            if attempt > 0 and rekey and not self.dedup:
                self._rekey(req)
            timeout = remaining // 2 if sticky and attempt + 1 < attempts else remaining
            mq: MessageQueue | None = None
            sent = False
            try:
                pi = inst.routes.publish_info(topic)  # cached route: no coroutine on the hot path
                if pi is None or not pi.queues:
                    pi = await inst.publish_info(topic, self.default_topic_queue_nums)
                addr = pi.route.master_addr(again.broker_name) if again is not None else None
                if addr is not None:
                    mq = again
                else:
                    mq = pi.select(avoid) if pick is None else pick(pi, avoid)
                    addr = pi.route.master_addr(mq.broker_name)
                    if addr is None:
                        raise NoRouteError(f"broker {mq.broker_name} has no master")
                if sticky and not inst.remoting.is_connected(addr):
                    await inst.remoting.get_connection(addr, timeout)  # fails here: not sent, try another broker
                    timeout = max(1, min(timeout, deadline - monotonic_ms()))  # the connect took its share
                header = build_send_header(self._template(topic), mq.queue_id, req.sys_flag, now_ms(), req.flag,
                                           req.props, req.rt, req.mrt, req.batch, mq.broker_name)
                sent = True
                resp = await inst.invoke(addr, RemotingCommand.request(req.code, header, req.body), timeout)
                if resp.code not in _STATUS_BY_CODE:
                    raise error_for_response(resp.code, resp.remark, addr)
                return resp, addr, mq
            except ResponseError as e:
                if e.code not in SEND_RETRY_CODES:
                    raise
                last_err, sent = e, False  # the broker answered: nothing stored
                if e.code == ResponseCode.TOPIC_NOT_EXIST:
                    inst.routes.remove(topic)
            except (RemotingError, NoRouteError) as e:
                last_err = e
            marks.hit("producer send retry")
            if sent and sticky:
                again = mq
            else:
                again = None
                if mq is not None:
                    avoid = mq.broker_name
            log.debug("send of %s attempt %d failed: %s", topic, attempt + 1, last_err)
        if last_err is None:
            raise RemotingError(f"send to {topic} timed out after {self.send_timeout_ms} ms")
        raise last_err

    async def send_oneway(self, msg: Message) -> None:
        """Fire and forget (no retry, no result)."""
        inst = self._instance()
        body, sys_flag, props, rt, mrt = self._prepare(msg)
        pi = await inst.publish_info(msg.topic, self.default_topic_queue_nums)
        mq = pi.select()
        addr = pi.route.master_addr(mq.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {mq.broker_name} has no master")
        header = build_send_header(self._template(msg.topic), mq.queue_id, sys_flag, now_ms(), msg.flag, props,
                                   rt, mrt, False, mq.broker_name)
        await inst.invoke_oneway(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body,
                                                               oneway=True))

    async def send_batch(self, msgs: list[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """One SEND_BATCH_MESSAGE: same topic, no delay, no %RETRY% topic, same WAIT; bodies not compressed."""
        inst = self._instance()
        if not msgs:
            raise MessageValidationError("empty batch")
        topic = msgs[0].topic
        wait = msgs[0].properties.get(Prop.WAIT)
        props_list: list[str] = []
        uniqs: list[str] = []
        assert self._ids is not None
        for m in msgs:
            validate_message(m)
            if m.topic != topic:
                raise MessageValidationError("all messages of a batch must have the same topic")
            if m.topic.startswith("%RETRY%"):
                raise MessageValidationError("retry-group messages cannot be batched")
            if m.delay_level > 0:
                raise MessageValidationError("delayed messages cannot be batched")
            if m.properties.get(Prop.WAIT) != wait:
                raise MessageValidationError("all messages of a batch must have the same WAIT property")
            if Prop.UNIQ_KEY not in m.properties:
                m.properties[Prop.UNIQ_KEY] = self._ids.next_id(now_ms())
            uniqs.append(m.properties[Prop.UNIQ_KEY])
            props_list.append(encode_properties(m.properties))
        body = encode_batch_body(msgs, props_list)
        if len(body) > MAX_MESSAGE_SIZE:
            raise MessageValidationError(f"batch of {len(body)} bytes exceeds {MAX_MESSAGE_SIZE}")
        batch_props = encode_properties({Prop.WAIT: wait}) if wait is not None else ""
        req = OutgoingSend(RequestCode.SEND_BATCH_MESSAGE, body, 0, batch_props, 0, 0, None, msgs, batch=True)
        if queue is None:
            resp, addr, mq = await self._invoke_send(inst, topic, 1 + self.retry_times, None, req, False)
        else:
            resp, addr, mq = await self._invoke_send(inst, topic, 1, lambda pi, last: queue, req, False)
        return parse_send_response(resp, addr, mq, ",".join(uniqs))

    def send_async(self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], Any] | None
                   = None) -> asyncio.Future[SendResult]:
        """Start a send; returns a Future. `callback(result, error)` runs when it completes (errors are not raised
        out of the callback's caller)."""
        task = self._tasks.spawn(self.send(msg), name="send-async")
        if callback is not None:
            def done(t: asyncio.Task[SendResult]) -> None:
                if t.cancelled():
                    callback(None, asyncio.CancelledError())
                elif t.exception() is not None:
                    callback(None, t.exception())
                else:
                    callback(t.result(), None)
            task.add_done_callback(done)
        return task

    # ---- transactions (check-back only) -----------------------------------------------------------------------
    async def on_check_transaction(self, addr: str, header: dict[str, str], body: bytes | None) -> None:
        """Plain producers keep no local transaction state: they leave the decision to a later check."""
        log.info("producer %s got CHECK_TRANSACTION_STATE from %s; not a transactional producer", self.group, addr)
