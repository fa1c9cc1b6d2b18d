"""Message properties string: name 0x01 value 0x02 ... (no trailing 0x02), and well-known keys."""

from __future__ import annotations

from orbitmq.base.native import speedups

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_SIZE = 32767


class Prop:
    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    CLUSTER = "CLUSTER"
    SHARDING_KEY = "__SHARDINGKEY"
    START_DELIVER_TIME = "__STARTDELIVERTIME"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    POP_CK = "POP_CK"


def encode_properties(props: dict[str, str] | None) -> str:
    if not props:
        return ""
    try:  # fast path, all at C level: every key and value is a str
        return PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, props.items()))
    except TypeError:  # a None (skipped) or non-str value (formatted)
        return PROPERTY_SEPARATOR.join(
            f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
        )


def decode_properties_py(text: str | None) -> dict[str, str]:
    """Lenient decode (as Java): skip segments without a key, a value, or a separator (pure-Python twin)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for seg in text.split(PROPERTY_SEPARATOR):
        i = seg.find(NAME_VALUE_SEPARATOR)
        if i > 0 and i < len(seg) - 1:
            out[seg[:i]] = seg[i + 1 :]
    return out


_native = speedups()
decode_properties = decode_properties_py if _native is None else _native.decode_properties
