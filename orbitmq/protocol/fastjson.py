"""fastjson-compatible JSON for bodies: compact output with the non-standard map keys Java clients expect.

dumps: int dict keys are written unquoted (fastjson default, e.g. `{0:"addr"}`) unless standard=True;
MessageQueue keys are written as JSON objects (`{{"brokerName":"b","queueId":0,"topic":"T"}:100}`).
loads: standard JSON via orjson; on failure a tolerant parser accepts those non-standard forms.
"""

from __future__ import annotations

import dataclasses
import re
from enum import Enum
from typing import Any

import orjson

from orbitmq.base.errors import ProtocolError
from orbitmq.model.topic import MessageQueue

# dataclasses go through _default so that to_json_obj() (camelCase shapes) is used, not field names
_OPT = orjson.OPT_PASSTHROUGH_DATACLASS
_OPT_SORT = orjson.OPT_SORT_KEYS | _OPT


def _default(o: Any) -> Any:
    to_obj = getattr(o, "to_json_obj", None)
    if to_obj is not None:
        return to_obj()
    if isinstance(o, Enum):
        return o.value
    if isinstance(o, set | frozenset):
        return list(o)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    raise TypeError(f"cannot serialize {type(o).__name__}")


def dumps(obj: Any, *, standard: bool = False, sort_keys: bool = False) -> bytes:
    """Compact JSON bytes. Non-str keys: ints unquoted (quoted if standard), MessageQueue as an object."""
    try:
        return orjson.dumps(obj, default=_default, option=_OPT_SORT if sort_keys else _OPT)
    except TypeError:
        pass  # non-str dict keys somewhere: use the slow writer
    out: list[bytes] = []
    _write(obj, out, standard, sort_keys)
    return b"".join(out)


def _key_bytes(k: Any, standard: bool, sort_keys: bool) -> bytes:
    if type(k) is str:
        return orjson.dumps(k)
    if isinstance(k, bool):
        return b'"true"' if k else b'"false"'
    if isinstance(k, int):
        return b'"%d"' % k if standard else b"%d" % k
    if isinstance(k, Enum):
        return _key_bytes(k.value, standard, sort_keys)
    if hasattr(k, "to_json_obj"):
        out: list[bytes] = []
        _write(k.to_json_obj(), out, standard, True)
        return b"".join(out)
    return orjson.dumps(str(k))


def _write(o: Any, out: list[bytes], standard: bool, sort_keys: bool) -> None:
    if isinstance(o, dict):
        if not o:
            out.append(b"{}")
            return
        items = list(o.items())
        if sort_keys:
            items.sort(key=lambda kv: str(kv[0]) if not hasattr(kv[0], "to_json_obj") else repr(kv[0]))
        sep = b"{"
        for k, v in items:
            out.append(sep)
            out.append(_key_bytes(k, standard, sort_keys))
            out.append(b":")
            _write(v, out, standard, sort_keys)
            sep = b","
        out.append(b"}")
    elif isinstance(o, list | tuple | set | frozenset):
        if not o:
            out.append(b"[]")
            return
        sep = b"["
        for v in o:
            out.append(sep)
            _write(v, out, standard, sort_keys)
            sep = b","
        out.append(b"]")
    elif hasattr(o, "to_json_obj"):
        _write(o.to_json_obj(), out, standard, sort_keys)
    else:
        out.append(orjson.dumps(o, default=_default, option=_OPT_SORT if sort_keys else _OPT))


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse standard JSON or fastjson's non-standard forms.

    Unquoted numeric keys become ints; object keys become MessageQueue (when they have
    brokerName/queueId/topic) or a sorted tuple of (key, value) pairs.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"JSON body is not UTF-8: {e}") from None
    return _TolerantParser(text).parse()


_WS = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_LITERALS = {"true": True, "false": False, "null": None}


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


class _TolerantParser:
    __slots__ = ("s", "pos")

    def __init__(self, s: str) -> None:
        self.s = s
        self.pos = 0

    def fail(self, what: str) -> ProtocolError:
        return ProtocolError(f"bad JSON at {self.pos}: {what} (near {self.s[self.pos:self.pos + 20]!r})")

    def ws(self) -> None:
        self.pos = _WS.match(self.s, self.pos).end()  # type: ignore[union-attr]

    def parse(self) -> Any:
        v = self.value()
        self.ws()
        if self.pos != len(self.s):
            raise self.fail("trailing data")
        return v

    def value(self) -> Any:
        self.ws()
        if self.pos >= len(self.s):
            raise self.fail("unexpected end")
        c = self.s[self.pos]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            return self.string()
        m = _NUMBER.match(self.s, self.pos)
        if m:
            self.pos = m.end()
            t = m.group()
            return float(t) if ("." in t or "e" in t or "E" in t) else int(t)
        m = _IDENT.match(self.s, self.pos)
        if m and m.group() in _LITERALS:
            self.pos = m.end()
            return _LITERALS[m.group()]
        raise self.fail("unexpected character")

    def string(self) -> str:
        m = _STRING.match(self.s, self.pos)
        if not m:
            raise self.fail("unterminated string")
        self.pos = m.end()
        try:
            return orjson.loads(m.group())
        except orjson.JSONDecodeError:
            raise self.fail("bad string escape") from None

    def key(self) -> Any:
        c = self.s[self.pos] if self.pos < len(self.s) else ""
        if c == '"':
            return self.string()
        if c == "{":
            d = self.obj()
            if {"brokerName", "queueId", "topic"} <= d.keys():
                return MessageQueue.from_json_obj(d)
            return _freeze(d)
        m = _NUMBER.match(self.s, self.pos)
        if m:
            self.pos = m.end()
            t = m.group()
            return float(t) if ("." in t or "e" in t or "E" in t) else int(t)
        m = _IDENT.match(self.s, self.pos)
        if m:
            self.pos = m.end()
            return m.group()
        raise self.fail("bad object key")

    def obj(self) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        self.ws()
        if self.s.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            self.ws()
            k = self.key()
            self.ws()
            if not self.s.startswith(":", self.pos):
                raise self.fail("expected ':'")
            self.pos += 1
            out[k] = self.value()
            self.ws()
            if self.s.startswith(",", self.pos):
                self.pos += 1
            elif self.s.startswith("}", self.pos):
                self.pos += 1
                return out
            else:
                raise self.fail("expected ',' or '}'")

    def arr(self) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.ws()
        if self.s.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.s.startswith(",", self.pos):
                self.pos += 1
            elif self.s.startswith("]", self.pos):
                self.pos += 1
                return out
            else:
                raise self.fail("expected ',' or ']'")
