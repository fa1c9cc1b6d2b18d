"""Typed client-side calls to a broker (pull, offsets, locks, send-back, query) and their result decoding.

Each function builds one request (header dicts with the Java field names), sends it through an `Invoker`, and maps
the response: expected outcomes become values (PullStatus, -1 for "no offset"), faults become client.errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from orbitmq.base.errors import CorruptionError
from orbitmq.base.inflate import InflateError, inflate
from orbitmq.client.errors import error_for_response
from orbitmq.model import MessageExt, MessageQueue, Prop, iter_records
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ConsumerListBody, LockBatchBody, LockBatchResponseBody

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

_COMPRESSION_TYPE_MASK = 0x700
_COMPRESSION_ZLIB = 0x300
# a compressed message body is inflated to at most this (RocketMQ's maxMessageSize is 4 MiB by default; a body
# beyond 16x that is a decompression bomb, reported as corrupt instead of exhausting the consumer's memory)
MAX_INFLATED_MESSAGE_BODY = 64 * 1024 * 1024


class Invoker(Protocol):
    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand: ...

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None: ...


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msgs: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def check(resp: RemotingCommand, addr: str | None = None, ok: Iterable[int] = (0,)) -> RemotingCommand:
    if resp.code not in ok:
        raise error_for_response(resp.code, resp.remark, addr)
    return resp


def _ext_int(resp: RemotingCommand, key: str, default: int = 0) -> int:
    ext = resp.ext_fields
    if not ext:
        return default
    v = ext.get(key)
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        return default


def decode_messages(body: bytes | None, tags: frozenset[str] | None = None) -> list[MessageExt]:
    """Records of a pull/query body; zlib bodies (sysflag bit 0) are inflated; optional tag-string re-filter."""
    if not body:
        return []
    out: list[MessageExt] = []
    for m in iter_records(body):
        sf = m.sys_flag
        if sf & 0x1:
            ctype = sf & _COMPRESSION_TYPE_MASK
            if ctype in (0, _COMPRESSION_ZLIB):
                try:
                    m.body = inflate(m.body, MAX_INFLATED_MESSAGE_BODY)
                except InflateError as e:
                    raise CorruptionError("pull body", m.phys_offset, f"bad compressed body: {e}") from None
        if tags is not None and m.properties.get(Prop.TAGS) not in tags:
            continue
        out.append(m)
    return out


def pull_header(group: str, mq: MessageQueue, offset: int, max_nums: int, sys_flag: int, commit_offset: int,
                suspend_ms: int, expression: str, sub_version: int, expression_type: str = "TAG") -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": str(mq.queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": str(commit_offset),
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": expression,
        "subVersion": str(sub_version),
        "expressionType": expression_type,
        "bname": mq.broker_name,
    }


def parse_pull_response(resp: RemotingCommand, addr: str, tags: frozenset[str] | None) -> PullResult:
    status = _PULL_STATUS.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise error_for_response(resp.code, resp.remark, addr)
    min_off = _ext_int(resp, "minOffset")
    max_off = _ext_int(resp, "maxOffset")
    msgs = decode_messages(resp.body, tags) if status is PullStatus.FOUND else []
    if msgs:
        smin, smax = str(min_off), str(max_off)
        for m in msgs:
            p = m.properties
            p[Prop.MIN_OFFSET] = smin
            p[Prop.MAX_OFFSET] = smax
    return PullResult(status, _ext_int(resp, "nextBeginOffset"), min_off, max_off, msgs,
                      _ext_int(resp, "suggestWhichBrokerId"))


async def pull(inv: Invoker, addr: str, header: dict[str, str], timeout_ms: int,
               tags: frozenset[str] | None) -> PullResult:
    resp = await inv.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header), timeout_ms)
    return parse_pull_response(resp, addr, tags)


def _q(mq: MessageQueue) -> dict[str, str]:
    return {"topic": mq.topic, "queueId": str(mq.queue_id), "bname": mq.broker_name}


async def query_consumer_offset(inv: Invoker, addr: str, group: str, mq: MessageQueue,
                                timeout_ms: int = 3000) -> int:
    """Stored offset, or -1 when the broker has none (QUERY_NOT_FOUND)."""
    h = {"consumerGroup": group, **_q(mq)}
    resp = await inv.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, h), timeout_ms)
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return -1
    check(resp, addr)
    return _ext_int(resp, "offset", -1)


async def update_consumer_offset(inv: Invoker, addr: str, group: str, mq: MessageQueue, offset: int, *,
                                 oneway: bool = True, timeout_ms: int = 3000) -> None:
    h = {"consumerGroup": group, **_q(mq), "commitOffset": str(offset)}
    cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, h, oneway=oneway)
    if oneway:
        await inv.invoke_oneway(addr, cmd)
    else:
        check(await inv.invoke(addr, cmd, timeout_ms), addr)


async def _offset_call(inv: Invoker, addr: str, code: int, h: dict[str, str], key: str, timeout_ms: int) -> int:
    resp = check(await inv.invoke(addr, RemotingCommand.request(code, h), timeout_ms), addr)
    return _ext_int(resp, key, -1)


async def max_offset(inv: Invoker, addr: str, mq: MessageQueue, timeout_ms: int = 3000) -> int:
    return await _offset_call(inv, addr, RequestCode.GET_MAX_OFFSET, _q(mq), "offset", timeout_ms)


async def min_offset(inv: Invoker, addr: str, mq: MessageQueue, timeout_ms: int = 3000) -> int:
    return await _offset_call(inv, addr, RequestCode.GET_MIN_OFFSET, _q(mq), "offset", timeout_ms)


async def search_offset(inv: Invoker, addr: str, mq: MessageQueue, timestamp_ms: int,
                        timeout_ms: int = 3000) -> int:
    h = {**_q(mq), "timestamp": str(timestamp_ms)}
    return await _offset_call(inv, addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, h, "offset", timeout_ms)


async def earliest_msg_store_time(inv: Invoker, addr: str, mq: MessageQueue, timeout_ms: int = 3000) -> int:
    return await _offset_call(inv, addr, RequestCode.GET_EARLIEST_MSG_STORETIME, _q(mq), "timestamp", timeout_ms)


def lock_body(client_id: str, group: str, mqs: Iterable[MessageQueue]) -> bytes:
    return LockBatchBody(group, client_id, sorted(set(mqs))).to_json()


async def lock_batch(inv: Invoker, addr: str, client_id: str, group: str, mqs: Iterable[MessageQueue],
                     timeout_ms: int = 1000) -> set[MessageQueue]:
    cmd = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, lock_body(client_id, group, mqs))
    resp = check(await inv.invoke(addr, cmd, timeout_ms), addr)
    if not resp.body:
        return set()
    return set(LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set)


async def unlock_batch(inv: Invoker, addr: str, client_id: str, group: str, mqs: Iterable[MessageQueue], *,
                       oneway: bool, timeout_ms: int = 1000) -> None:
    cmd = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None, lock_body(client_id, group, mqs),
                                  oneway=oneway)
    if oneway:
        await inv.invoke_oneway(addr, cmd)
    else:
        check(await inv.invoke(addr, cmd, timeout_ms), addr)


async def consumer_ids(inv: Invoker, addr: str, group: str, timeout_ms: int = 3000) -> list[str]:
    cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    resp = check(await inv.invoke(addr, cmd, timeout_ms), addr)
    if not resp.body:
        return []
    return ConsumerListBody.from_json(resp.body).consumer_id_list


async def send_msg_back(inv: Invoker, addr: str, group: str, msg: MessageExt, delay_level: int,
                        max_reconsume_times: int, timeout_ms: int = 3000) -> None:
    h = {
        "offset": str(msg.phys_offset),
        "group": group,
        "delayLevel": str(delay_level),
        "originMsgId": msg.msg_id,
        "originTopic": msg.topic,
        "unitMode": "false",
        "maxReconsumeTimes": str(max_reconsume_times),
    }
    check(await inv.invoke(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, h), timeout_ms),
          addr)


async def view_message(inv: Invoker, addr: str, phys_offset: int, timeout_ms: int = 3000) -> MessageExt:
    cmd = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys_offset)})
    resp = check(await inv.invoke(addr, cmd, timeout_ms), addr)
    msgs = decode_messages(resp.body)
    if not msgs:
        raise error_for_response(ResponseCode.QUERY_NOT_FOUND, "empty VIEW_MESSAGE_BY_ID body", addr)
    return msgs[0]


async def query_message(inv: Invoker, addr: str, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int,
                        *, unique_key: bool = False, timeout_ms: int = 5000) -> list[MessageExt]:
    h = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin_ms),
         "endTimestamp": str(end_ms), "_UNIQUE_KEY_QUERY": "true" if unique_key else "false"}
    resp = await inv.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, h), timeout_ms)
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return []
    check(resp, addr)
    return decode_messages(resp.body)
