"""JsonBody mixin and tolerant field readers shared by the body dataclasses.

Every body class offers to_json_obj()/from_json_obj() (plain Python shapes, camelCase keys) and
to_json() -> bytes / from_json(bytes) built on orbitmq.protocol.fastjson. Malformed bodies raise ProtocolError.
"""

from __future__ import annotations

from typing import Any, Self

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol import fastjson


class JsonBody:
    __slots__ = ()

    def to_json_obj(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    @classmethod
    def from_json_obj(cls, d: Any) -> Self:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_json(self) -> bytes:
        return fastjson.dumps(self.to_json_obj())

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str | None) -> Self:
        if data is None or len(data) == 0:
            raise ProtocolError(f"empty {cls.__name__} body")
        obj = fastjson.loads(data)
        try:
            return cls.from_json_obj(obj)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ProtocolError(f"bad {cls.__name__} body: {type(e).__name__}: {e}") from None


def as_int(v: Any, default: int = 0) -> int:
    """Number or numeric string (C++ sends some numbers as strings) -> int."""
    if v is None or v == "":
        return default
    if type(v) is int:
        return v
    if isinstance(v, float):
        return int(v)
    return int(str(v).strip())


def as_bool(v: Any, default: bool = False) -> bool:
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v != 0
    return str(v).strip().lower() == "true"


def as_str_list(v: Any) -> list[str]:
    if not v:
        return []
    return [str(x) for x in v]


def enum_name(v: Any, names: tuple[str, ...], default: str) -> str:
    """Accept an enum name or its ordinal (C++ clients send ordinals)."""
    if v is None:
        return default
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return names[v] if 0 <= v < len(names) else default
    s = str(v).strip()
    if s.lstrip("-").isdigit():
        i = int(s)
        return names[i] if 0 <= i < len(names) else default
    return s or default
