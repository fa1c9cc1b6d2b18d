"""Typed request headers: a request's extFields decoded once, with Java's types and ranges.

RocketMQ decodes each request's custom header into a CommandCustomHeader class (SendMessageRequestHeader,
PullMessageRequestHeader, ...) before the processor runs. These classes do the same: `decode(ext_fields)` reads
every field once, converts it (decimal int/long, Java boolean) and checks it against its Java range, so the
handler reads attributes instead of re-reading the string dictionary, and nothing out of an int32/int64 reaches the
store or a reply.

Errors are HeaderError (the broker answers SYSTEM_ERROR with the text as remark, as a Java broker whose header
decoding throws): a required field missing or not a number, or any int field outside its Java type's range.
Optional fields that do not parse keep their default (the rule of ext.ext_int).
"""

from __future__ import annotations

import re
from typing import Any, Final

from orbitmq.base.native import speedups
from orbitmq.protocol.ext import REQUIRED, SEND_V1_TO_V2, SEND_V2_TO_V1, HeaderError, normalize_send_header

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1

_V2_KEYS: Final = frozenset(SEND_V2_TO_V1)


def _is_true(v: Any) -> bool:
    """Java Boolean.parseBoolean (bools built in-process pass through)."""
    if type(v) is bool:
        return v
    return v is not None and str(v).lower() == "true"


def read_int(ext: dict[str, Any] | None, key: str, lo: int, hi: int, default: Any = REQUIRED,
             name: str | None = None) -> Any:
    """One decimal int field in [lo, hi]. `name`: the field's name in error texts (the V1 name for a V2 key)."""
    v = ext.get(key) if ext else None
    label = name or key
    if v is None:
        if default is REQUIRED:
            raise HeaderError(f"the custom field <{label}> is null")
        return default
    try:
        n = int(v)
    except (TypeError, ValueError):
        if default is REQUIRED:
            raise HeaderError(f"the custom field <{label}> is not a number: {v!r}") from None
        return default
    if n < lo or n > hi:
        raise HeaderError(f"the custom field <{label}> is out of range [{lo}, {hi}]: {n}")
    return n


def read_str(ext: dict[str, Any] | None, key: str, default: Any = REQUIRED, name: str | None = None) -> Any:
    v = ext.get(key) if ext else None
    if v is None:
        if default is REQUIRED:
            raise HeaderError(f"the custom field <{name or key}> is null")
        return default
    return v


class SendMessageRequestHeader:
    """SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE / SEND_REPLY_MESSAGE(_V2) header, V1 or V2 keys.

    Required (checked in this order, as before): topic, producerGroup, queueId, sysFlag, bornTimestamp, flag.
    Optional: defaultTopic (TBW102), defaultTopicQueueNums (4), properties, reconsumeTimes (0), unitMode,
    maxReconsumeTimes (None = not sent), batch ("true" in any case, or the C++ client's "1"), bname.
    """

    __slots__ = ("topic", "producer_group", "queue_id", "sys_flag", "born_timestamp", "flag", "properties",
                 "reconsume_times", "default_topic", "default_topic_queue_nums", "unit_mode",
                 "max_reconsume_times", "batch", "bname")

    def __init__(self, topic: str, producer_group: str, queue_id: int, sys_flag: int, born_timestamp: int,
                 flag: int, properties: str | None = None, reconsume_times: int = 0, default_topic: str = "TBW102",
                 default_topic_queue_nums: int = 4, unit_mode: bool = False, max_reconsume_times: int | None = None,
                 batch: bool = False, bname: str | None = None) -> None:
        self.topic = topic
        self.producer_group = producer_group
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.unit_mode = unit_mode
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch
        self.bname = bname

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> SendMessageRequestHeader:
        """extFields (V1 long names, V2 single letters, or a mix: renamed as normalize_send_header does) -> header.
        Raises HeaderError."""
        h = _decode_send_v2(cls, ext)  # the common SEND_MESSAGE_V2 header in one call (native when built)
        if h is not None:
            return h
        if ext and "b" in ext and ext.keys() <= _V2_KEYS:  # a pure V2 header: read the letters, no renamed copy
            k = _V2_NAMES
        else:
            ext = normalize_send_header(ext)
            k = _V1_NAMES
        get = ext.get
        try:  # the common header: every required field present and in range
            topic = ext[k[0]]
            group = ext[k[1]]
            queue_id = int(ext[k[2]])
            sys_flag = int(ext[k[3]])
            born_ts = int(ext[k[4]])
            flag = int(ext[k[5]])
            if not (INT_MIN <= queue_id <= INT_MAX and INT_MIN <= sys_flag <= INT_MAX
                    and LONG_MIN <= born_ts <= LONG_MAX and INT_MIN <= flag <= INT_MAX):
                raise ValueError
        except (KeyError, TypeError, ValueError):  # the checked reads raise the right error, in order
            topic = read_str(ext, k[0], name="topic")
            group = read_str(ext, k[1], name="producerGroup")
            queue_id = read_int(ext, k[2], INT_MIN, INT_MAX, name="queueId")
            sys_flag = read_int(ext, k[3], INT_MIN, INT_MAX, name="sysFlag")
            born_ts = read_int(ext, k[4], LONG_MIN, LONG_MAX, name="bornTimestamp")
            flag = read_int(ext, k[5], INT_MIN, INT_MAX, name="flag")
        rt = get(k[7])
        reconsume = 0 if rt is None or rt == "0" else read_int(ext, k[7], INT_MIN, INT_MAX, 0, "reconsumeTimes") or 0
        dq = get(k[9])
        dq_nums = 4 if dq is None or dq == "4" else read_int(ext, k[9], INT_MIN, INT_MAX, 4, "defaultTopicQueueNums")
        mr = get(k[11])
        max_rt = None if mr is None else read_int(ext, k[11], INT_MIN, INT_MAX, None, "maxReconsumeTimes")
        b = get(k[12])
        batch = b is not None and b != "false" and (b == "1" or _is_true(b))
        u = get(k[10])
        dt = get(k[8])
        return cls(topic, group, queue_id, sys_flag, born_ts, flag, get(k[6]), reconsume,
                   "TBW102" if dt is None else dt, dq_nums, u is not None and u != "false" and _is_true(u), max_rt,
                   batch, get(k[13]))


_PLAIN_DECIMAL = re.compile(r"-?[0-9]{1,19}\Z").match  # ASCII digits only, no sign "+", spaces or "_"


def _plain_int(v: str, lo: int, hi: int) -> int | None:
    if _PLAIN_DECIMAL(v) is None:
        return None
    n = int(v)
    return n if lo <= n <= hi else None


def decode_send_v2_py(cls: type[SendMessageRequestHeader], ext: Any) -> SendMessageRequestHeader | None:
    """The common send header straight to a SendMessageRequestHeader; None for anything else, which
    SendMessageRequestHeader.decode's general path decides (defaults, lenient parses, errors).
    Common = a dict of str keys and str values where each field appears once, by its V1 name or (when the dict has
    "a" or "b", i.e. is a V2 header) by its V2 letter; other keys are ignored, as the general path ignores them;
    the six required fields present; every int field present written as plain ASCII decimal (-?[0-9]{1,19})
    within its Java range. Covers SEND_MESSAGE_V2 (letters) and the C++ client's SEND_MESSAGE (long names plus
    AccessKey/Signature/OnsChannel). Pure-Python twin of the native decode_send_v2 (orbitmq/base/_speedups.c)."""
    if type(ext) is not dict:
        return None
    letters = "a" in ext or "b" in ext
    f: dict[str, str] = {}
    for k, v in ext.items():
        if type(k) is not str or type(v) is not str:
            return None
        letter = SEND_V1_TO_V2.get(k)
        if letter is None:
            if not letters or k not in _V2_KEYS:
                continue
            letter = k
        if letter in f:  # a field by both names: the general path applies its renaming order
            return None
        f[letter] = v
    get = f.get
    topic, group = get("b"), get("a")
    q, sf, bt, fl = get("e"), get("f"), get("g"), get("h")
    if topic is None or group is None or q is None or sf is None or bt is None or fl is None:
        return None
    queue_id = _plain_int(q, INT_MIN, INT_MAX)
    sys_flag = _plain_int(sf, INT_MIN, INT_MAX)
    born_ts = _plain_int(bt, LONG_MIN, LONG_MAX)
    flag = _plain_int(fl, INT_MIN, INT_MAX)
    if queue_id is None or sys_flag is None or born_ts is None or flag is None:
        return None
    rt, dq, mr = get("j"), get("d"), get("l")
    reconsume = 0 if rt is None else _plain_int(rt, INT_MIN, INT_MAX)
    dq_nums = 4 if dq is None else _plain_int(dq, INT_MIN, INT_MAX)
    max_rt = None if mr is None else _plain_int(mr, INT_MIN, INT_MAX)
    if reconsume is None or dq_nums is None or (mr is not None and max_rt is None):
        return None
    u, b = get("k"), get("m")
    h = _new(cls)
    h.topic = topic
    h.producer_group = group
    h.queue_id = queue_id
    h.sys_flag = sys_flag
    h.born_timestamp = born_ts
    h.flag = flag
    h.properties = get("i")
    h.reconsume_times = reconsume
    h.default_topic = get("c", "TBW102")
    h.default_topic_queue_nums = dq_nums
    h.unit_mode = u is not None and u.lower() == "true"
    h.max_reconsume_times = max_rt
    h.batch = b is not None and (b == "1" or b.lower() == "true")
    h.bname = get("n")
    return h


_new = object.__new__
_native = speedups()
if _native is not None:
    _decode_send_v2 = _native.decode_send_v2
else:  # without the extension the twin (a Python loop over the keys) costs more than it saves: general path only
    def _decode_send_v2(cls: type[SendMessageRequestHeader], ext: Any) -> SendMessageRequestHeader | None:
        return None
decode_send_v2 = _decode_send_v2  # (cls, ext) -> header | None: the handler's first try, one call, no frame

_V1_NAMES: Final = ("topic", "producerGroup", "queueId", "sysFlag", "bornTimestamp", "flag", "properties",
                    "reconsumeTimes", "defaultTopic", "defaultTopicQueueNums", "unitMode", "maxReconsumeTimes",
                    "batch", "bname")
_V2_NAMES: Final = tuple({v: k for k, v in SEND_V2_TO_V1.items()}[n] for n in _V1_NAMES)


class PullMessageRequestHeader:
    """PULL_MESSAGE (11) header."""

    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "sys_flag",
                 "commit_offset", "suspend_timeout_millis", "subscription", "sub_version", "expression_type")

    def __init__(self, consumer_group: str, topic: str, queue_id: int, queue_offset: int, max_msg_nums: int,
                 sys_flag: int, commit_offset: int, suspend_timeout_millis: int, subscription: str | None = None,
                 sub_version: int = 0, expression_type: str | None = None) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.max_msg_nums = max_msg_nums
        self.sys_flag = sys_flag
        self.commit_offset = commit_offset
        self.suspend_timeout_millis = suspend_timeout_millis
        self.subscription = subscription
        self.sub_version = sub_version
        self.expression_type = expression_type

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> PullMessageRequestHeader:
        return cls(read_str(ext, "consumerGroup"), read_str(ext, "topic"),
                   read_int(ext, "queueId", INT_MIN, INT_MAX), read_int(ext, "queueOffset", LONG_MIN, LONG_MAX),
                   read_int(ext, "maxMsgNums", INT_MIN, INT_MAX), read_int(ext, "sysFlag", INT_MIN, INT_MAX),
                   read_int(ext, "commitOffset", LONG_MIN, LONG_MAX),
                   read_int(ext, "suspendTimeoutMillis", LONG_MIN, LONG_MAX), read_str(ext, "subscription", None),
                   read_int(ext, "subVersion", LONG_MIN, LONG_MAX, 0), read_str(ext, "expressionType", None))


class QueryConsumerOffsetRequestHeader:
    """QUERY_CONSUMER_OFFSET (14) header; setZeroIfNotFound is true unless it says "false"."""

    __slots__ = ("consumer_group", "topic", "queue_id", "set_zero_if_not_found")

    def __init__(self, consumer_group: str, topic: str, queue_id: int, set_zero_if_not_found: bool = True) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.set_zero_if_not_found = set_zero_if_not_found

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> QueryConsumerOffsetRequestHeader:
        zero = read_str(ext, "setZeroIfNotFound", None)
        return cls(read_str(ext, "consumerGroup"), read_str(ext, "topic"), read_int(ext, "queueId", INT_MIN, INT_MAX),
                   zero is None or str(zero).lower() != "false")


class UpdateConsumerOffsetRequestHeader:
    """UPDATE_CONSUMER_OFFSET (15) header."""

    __slots__ = ("consumer_group", "topic", "queue_id", "commit_offset")

    def __init__(self, consumer_group: str, topic: str, queue_id: int, commit_offset: int) -> None:
        self.consumer_group = consumer_group
        self.topic = topic
        self.queue_id = queue_id
        self.commit_offset = commit_offset

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> UpdateConsumerOffsetRequestHeader:
        return cls(read_str(ext, "consumerGroup"), read_str(ext, "topic"), read_int(ext, "queueId", INT_MIN, INT_MAX),
                   read_int(ext, "commitOffset", LONG_MIN, LONG_MAX))


class GetMaxOffsetRequestHeader:
    """GET_MAX_OFFSET (30) header: topic, queueId. Also the shape of GET_MIN_OFFSET (31) and
    GET_EARLIEST_MSG_STORETIME (32) (their own subclasses below, as RocketMQ has one class per request)."""

    __slots__ = ("topic", "queue_id")

    def __init__(self, topic: str, queue_id: int) -> None:
        self.topic = topic
        self.queue_id = queue_id

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> GetMaxOffsetRequestHeader:
        return cls(read_str(ext, "topic"), read_int(ext, "queueId", INT_MIN, INT_MAX))


class GetMinOffsetRequestHeader(GetMaxOffsetRequestHeader):
    """GET_MIN_OFFSET (31) header: topic, queueId."""

    __slots__ = ()


class GetEarliestMsgStoretimeRequestHeader(GetMaxOffsetRequestHeader):
    """GET_EARLIEST_MSG_STORETIME (32) header: topic, queueId."""

    __slots__ = ()


class SearchOffsetRequestHeader:
    """SEARCH_OFFSET_BY_TIMESTAMP (29) header: topic, queueId, timestamp."""

    __slots__ = ("topic", "queue_id", "timestamp")

    def __init__(self, topic: str, queue_id: int, timestamp: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.timestamp = timestamp

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> SearchOffsetRequestHeader:
        return cls(read_str(ext, "topic"), read_int(ext, "queueId", INT_MIN, INT_MAX),
                   read_int(ext, "timestamp", LONG_MIN, LONG_MAX))


class UnregisterClientRequestHeader:
    """UNREGISTER_CLIENT (35) header: clientID, and producerGroup / consumerGroup when the client had one."""

    __slots__ = ("client_id", "producer_group", "consumer_group")

    def __init__(self, client_id: str, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        self.client_id = client_id
        self.producer_group = producer_group
        self.consumer_group = consumer_group

    @classmethod
    def decode(cls, ext: dict[str, Any] | None) -> UnregisterClientRequestHeader:
        return cls(read_str(ext, "clientID"), read_str(ext, "producerGroup", None),
                   read_str(ext, "consumerGroup", None))
