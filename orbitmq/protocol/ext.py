"""Typed access to extFields (the "custom header"), with Java's parsing rules.

Missing required fields raise HeaderError (the server answers SYSTEM_ERROR with its text as remark).
Booleans follow Java Boolean.parseBoolean: only case-insensitive "true" is true.
"""

from __future__ import annotations

from typing import Any, Final

from orbitmq.base.errors import OrbitMQError


class HeaderError(OrbitMQError):
    """A required custom-header field is missing or unparseable (answered with SYSTEM_ERROR)."""


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final[Any] = _Required()


def _missing(key: str) -> HeaderError:
    return HeaderError(f"the custom field <{key}> is null")


def ext_str(ext: dict[str, str] | None, key: str, default: Any = REQUIRED) -> Any:
    v = ext.get(key) if ext else None
    if v is None:
        if default is REQUIRED:
            raise _missing(key)
        return default
    return v


def ext_int(ext: dict[str, str] | None, key: str, default: Any = REQUIRED) -> Any:
    """Decimal int/long; a parse failure leaves the field unset (default), or fails if it is required."""
    v = ext.get(key) if ext else None
    if v is None:
        if default is REQUIRED:
            raise _missing(key)
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        if default is REQUIRED:
            raise HeaderError(f"the custom field <{key}> is not a number: {v!r}") from None
        return default


def ext_bool(ext: dict[str, str] | None, key: str, default: Any = REQUIRED) -> Any:
    v = ext.get(key) if ext else None
    if v is None:
        if default is REQUIRED:
            raise _missing(key)
        return default
    if type(v) is bool:
        return v
    return str(v).lower() == "true"


SEND_V2_TO_V1: Final[dict[str, str]] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}
SEND_V1_TO_V2: Final[dict[str, str]] = {v: k for k, v in SEND_V2_TO_V1.items()}


def normalize_send_header(ext: dict[str, str] | None) -> dict[str, str]:
    """Send-request header with V1 (long) names, whether the client sent V1 or V2 (single letters)."""
    if not ext:
        return {}
    if "a" not in ext and "b" not in ext:
        return ext
    get = SEND_V2_TO_V1.get
    return {get(k, k): v for k, v in ext.items()}


def to_send_v2(ext: dict[str, str]) -> dict[str, str]:
    """V1 send header -> V2 single-letter keys (what a Java client sends with SEND_MESSAGE_V2)."""
    get = SEND_V1_TO_V2.get
    return {get(k, k): v for k, v in ext.items()}
