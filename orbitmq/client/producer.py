"""Producer: sync-style async sends with Java-equivalent queue selection and retries, oneway, batch, orderly
(sharding key) and callback sends.

The hot path is lean: per-topic header templates and cached publish queue lists; one dict copy per send.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from orbitmq.base import marks
from orbitmq.base.clock import monotonic_ms, now_ms
from orbitmq.base.errors import RemotingError
from orbitmq.client.errors import (
    SEND_RETRY_CODES,
    ClientError,
    ClientStateError,
    MessageValidationError,
    NoRouteError,
    ResponseError,
    error_for_response,
)
from orbitmq.client.instance import AUTO_CREATE_TOPIC_KEY, ClientInstance
from orbitmq.client.route_cache import PublishInfo
from orbitmq.client.tasks import TaskSet
from orbitmq.model import Message, MessageQueue, Prop, UniqIdGenerator, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
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
                 instance_name: str | None = None, compress_level: int = 5, _internal: bool = False) -> None:
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
        inst = await ClientInstance.acquire(self.namesrv, self.instance_name)
        if not self._internal:
            try:
                inst.register_producer(self.group, self)
            except ClientError:
                await inst.release()
                raise
        self._inst = inst
        self._ids = UniqIdGenerator(inst.client_ip)

    async def shutdown(self) -> None:
        inst = self._inst
        if inst is None:
            return
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

    # ---- sends ------------------------------------------------------------------------------------------------
    async def send(self, msg: Message, *, queue: MessageQueue | None = None) -> SendResult:
        """Send and wait for the broker. Retries (on another broker when possible) for codes {1,14,16,17,204,205}
        and network errors, up to 1 + retry_times attempts within send_timeout_ms. An explicit queue is tried once."""
        inst = self._instance()
        body, sys_flag, props, rt, mrt = self._prepare(msg)
        attempts = 1 if queue is not None else 1 + self.retry_times
        return await self._send_with_retry(inst, msg, body, sys_flag, props, rt, mrt, attempts,
                                           lambda pi, last: queue if queue is not None else pi.select(last))

    async def send_orderly(self, msg: Message, sharding_key: str) -> SendResult:
        """Send to queue java_hash(sharding_key) % n: the same key always lands on the same queue."""
        inst = self._instance()
        body, sys_flag, props, rt, mrt = self._prepare(msg)
        return await self._send_with_retry(inst, msg, body, sys_flag, props, rt, mrt, 1 + self.retry_times,
                                           lambda pi, last: pi.select_by_key(sharding_key))

    async def _send_with_retry(self, inst: ClientInstance, msg: Message, body: bytes, sys_flag: int, props: str,
                               rt: int, mrt: int | None, attempts: int,
                               pick: Callable[[PublishInfo, str | None], MessageQueue]) -> SendResult:
        deadline = monotonic_ms() + self.send_timeout_ms
        last_broker: str | None = None
        last_err: Exception | None = None
        for attempt in range(attempts):
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                break
            if attempt > 0 and not self.dedup:
                self._new_uniq(msg)
                body, sys_flag, props, rt, mrt = self._prepare(msg)
            mq: MessageQueue | None = None
            try:
                pi = inst.routes.publish_info(msg.topic)  # cached route: no coroutine on the hot path
                if pi is None or not pi.queues:
                    pi = await inst.publish_info(msg.topic, self.default_topic_queue_nums)
                mq = pick(pi, last_broker)
                addr = pi.route.master_addr(mq.broker_name)
                if addr is None:
                    raise NoRouteError(f"broker {mq.broker_name} has no master")
                header = build_send_header(self._template(msg.topic), mq.queue_id, sys_flag, now_ms(), msg.flag,
                                           props, rt, mrt, False, mq.broker_name)
                cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)
                resp = await inst.invoke(addr, cmd, remaining)
                return parse_send_response(resp, addr, mq, msg.properties[Prop.UNIQ_KEY])
            except ResponseError as e:
                if e.code not in SEND_RETRY_CODES:
                    raise
                last_err = e
                if e.code == ResponseCode.TOPIC_NOT_EXIST:
                    inst.routes.remove(msg.topic)
            except (RemotingError, NoRouteError) as e:
                last_err = e
            marks.hit("producer send retry")
            if mq is not None:
                last_broker = mq.broker_name
            log.debug("send of %s attempt %d failed: %s", msg.topic, attempt + 1, last_err)
        if last_err is None:
            raise RemotingError(f"send to {msg.topic} timed out after {self.send_timeout_ms} ms")
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
        uniq = ",".join(uniqs)
        batch_msg = Message(topic, body, {Prop.UNIQ_KEY: uniq})
        deadline = monotonic_ms() + self.send_timeout_ms
        last_broker: str | None = None
        last_err: Exception | None = None
        for _attempt in range(1 if queue is not None else 1 + self.retry_times):
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                break
            try:
                pi = await inst.publish_info(topic, self.default_topic_queue_nums)
                mq = queue if queue is not None else pi.select(last_broker)
                last_broker = mq.broker_name
                addr = pi.route.master_addr(mq.broker_name)
                if addr is None:
                    raise NoRouteError(f"broker {mq.broker_name} has no master")
                header = build_send_header(self._template(topic), mq.queue_id, 0, now_ms(), 0, batch_props,
                                           batch=True, broker_name=mq.broker_name)
                resp = await inst.invoke(addr, RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header,
                                                                       body), remaining)
                return parse_send_response(resp, addr, mq, batch_msg.properties[Prop.UNIQ_KEY])
            except ResponseError as e:
                if e.code not in SEND_RETRY_CODES:
                    raise
                last_err = e
            except (RemotingError, NoRouteError) as e:
                last_err = e
        if last_err is None:
            raise RemotingError(f"batch send to {topic} timed out after {self.send_timeout_ms} ms")
        raise last_err

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
