"""JSON header serialization (serialize type 0), fastjson-compatible.

Encodes compact, fields sorted, extFields values always strings, null remark omitted.
Decodes tolerantly: numeric/bool extFields values, unknown keys, remark ""/null/absent, unknown languages.
"""

from __future__ import annotations

from typing import Any

import orjson

from orbitmq.base.errors import ProtocolError
from orbitmq.base.native import speedups
from orbitmq.protocol.codes import LanguageCode
from orbitmq.protocol.command import RemotingCommand

_SORT = orjson.OPT_SORT_KEYS
_dumps = orjson.dumps
_ONLY_STR = {str}
_LANG_BY_VALUE = {lc.value: lc.name for lc in LanguageCode}


def ext_value_to_str(v: Any) -> str:
    """Java toString() of a header value: booleans lower-case, numbers decimal."""
    if isinstance(v, str):
        return v
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int | float):
        return str(v)
    return orjson.dumps(v).decode()


def _ext_for_wire(ext: dict[str, Any]) -> dict[str, str]:
    if not ext or set(map(type, ext.values())) == _ONLY_STR:
        return ext
    return {k: ext_value_to_str(v) for k, v in ext.items() if v is not None}


def encode_json_header(cmd: RemotingCommand) -> bytes:
    ext = cmd.ext_fields
    if ext is not None and cmd.remark is None:  # the common response shape: one dict literal, same output
        if ext and set(map(type, ext.values())) != _ONLY_STR:
            ext = _ext_for_wire(ext)
        return _dumps({"code": cmd.code, "extFields": ext, "flag": cmd.flag, "language": cmd.language,
                       "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON", "version": cmd.version},
                      option=_SORT)
    d: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields is not None:
        d["extFields"] = _ext_for_wire(cmd.ext_fields)
    d["flag"] = cmd.flag
    d["language"] = cmd.language
    d["opaque"] = cmd.opaque
    if cmd.remark is not None:
        d["remark"] = cmd.remark
    d["serializeTypeCurrentRPC"] = "JSON"
    d["version"] = cmd.version
    return orjson.dumps(d, option=_SORT)


def _ext_from_wire(raw: Any) -> dict[str, str] | None:
    if raw is None:
        return None
    if type(raw) is not dict:
        raise ProtocolError(f"extFields is not an object: {type(raw).__name__}")
    if not raw or set(map(type, raw.values())) == _ONLY_STR:  # common case: nothing to convert
        return raw
    return {str(k): ext_value_to_str(v) for k, v in raw.items() if v is not None}


def _int_field(d: dict[str, Any], key: str, default: int) -> int:
    v = d.get(key)
    if v is None:
        return default
    if type(v) is int:
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ProtocolError(f"header field {key} is not an integer: {v!r}") from None


def _language(v: Any) -> str:
    if v is None:
        return "JAVA"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return _LANG_BY_VALUE.get(v, "OTHER")
    return "OTHER"


_CONVERTED = frozenset({str, int, bool, type(None)})


def _ext_converted(ext: Any) -> dict[str, str] | None:
    """extFields of str keys and str / int / bool / null values (the C++ client sends some numbers) converted as
    _ext_from_wire does; None for any other value or key type (the general decoder decides)."""
    if type(ext) is not dict or not _CONVERTED.issuperset(map(type, ext.values())) or \
            set(map(type, ext)) != _ONLY_STR:
        return None
    return _ext_from_wire(ext)


def command_from_header_py(cls: type[RemotingCommand], d: Any, body: bytes | None) -> RemotingCommand | None:
    """The common header shape (int code/version/opaque/flag with code present, str language, remark absent/null
    or str, extFields absent/null, an all-str dict (kept as is) or a dict of str keys and str/int/bool/null values
    (converted)) straight to a command; None for anything else, which the general decoder handles. Pure-Python
    twin of the native command_from_header."""
    if type(d) is not dict:
        return None
    get = d.get
    code = get("code")
    version = get("version", 0)
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    if type(code) is not int or type(version) is not int or type(opaque) is not int or type(flag) is not int:
        return None
    language = get("language")
    if type(language) is not str:
        return None
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        return None
    ext = get("extFields")
    if ext is not None and (type(ext) is not dict or (ext and set(map(type, ext.values())) != _ONLY_STR)):
        ext = _ext_converted(ext)
        if ext is None:
            return None
    cmd = _new(cls)
    cmd.code = code
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.language = language
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = body
    cmd.serialize_type = 0
    return cmd


def decode_json_header(data: bytes | memoryview, body: bytes | None = None) -> RemotingCommand:
    try:
        d = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProtocolError(f"undecodable JSON header: {e}") from None
    cmd = _command_from_header(RemotingCommand, d, body)
    if cmd is not None:
        return cmd
    return decode_header_dict(d, body)


def decode_header_dict(d: Any, body: bytes | None) -> RemotingCommand:
    """The general decoder of a parsed JSON header: conversions, defaults and ProtocolErrors for any shape."""
    if type(d) is not dict:
        raise ProtocolError("JSON header is not an object")
    get = d.get
    code = get("code")
    version = get("version", 0)
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    if type(code) is not int or type(version) is not int or type(opaque) is not int or type(flag) is not int:
        if code is None:
            raise ProtocolError("JSON header has no code")
        code = _int_field(d, "code", 0)
        version = _int_field(d, "version", 0)
        opaque = _int_field(d, "opaque", 0)
        flag = _int_field(d, "flag", 0)
    language = get("language")
    if type(language) is not str:
        language = _language(language)
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    cmd = _new(RemotingCommand)
    cmd.code = code
    cmd.language = language
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = _ext_from_wire(get("extFields"))
    cmd.body = body
    cmd.serialize_type = 0
    return cmd


_new = object.__new__
_native = speedups()
_command_from_header = command_from_header_py if _native is None else _native.command_from_header
