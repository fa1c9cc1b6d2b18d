"""ROCKETMQ binary header serialization (serialize type 1).

Layout (big-endian): code h | language b | version h | opaque i | flag i | remarkLength i | remark |
extLength i | ext entries (keyLength h, key, valueLength i, value)*.  Fixed part = 21 bytes.
A zero-length string decodes as null (empty remark -> None, entry with empty value -> dropped).
"""

from __future__ import annotations

import struct

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol.codes import LanguageCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.header_json import ext_value_to_str

_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remarkLength
_I32 = struct.Struct(">i")
_H16 = struct.Struct(">h")
FIXED_SIZE = 21  # _FIXED (17) + extLength (4)

_LANG_TO_BYTE = {lc.name: lc.value for lc in LanguageCode}
_BYTE_TO_LANG = {lc.value: lc.name for lc in LanguageCode}
_OTHER = LanguageCode.OTHER.value


def fits_binary(cmd: RemotingCommand) -> bool:
    """Whether code and version fit the signed shorts of the binary header (5.x POP codes do not)."""
    return -32768 <= cmd.code <= 32767 and -32768 <= cmd.version <= 32767


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    if not fits_binary(cmd):
        raise ProtocolError(f"code {cmd.code} / version {cmd.version} cannot be carried in a ROCKETMQ header")
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [
        _FIXED.pack(cmd.code, _LANG_TO_BYTE.get(cmd.language, _OTHER), cmd.version, cmd.opaque, cmd.flag,
                    len(remark)),
        remark,
        b"",  # extLength placeholder
    ]
    ext_len = 0
    if cmd.ext_fields:
        pack_h = _H16.pack
        pack_i = _I32.pack
        for k, v in cmd.ext_fields.items():
            if k is None or v is None:
                continue
            kb = k.encode()
            vb = (v if type(v) is str else ext_value_to_str(v)).encode()
            parts.append(pack_h(len(kb)))
            parts.append(kb)
            parts.append(pack_i(len(vb)))
            parts.append(vb)
            ext_len += 6 + len(kb) + len(vb)
    parts[2] = _I32.pack(ext_len)
    return b"".join(parts)


def decode_binary_header(data: bytes | memoryview, body: bytes | None = None) -> RemotingCommand:
    mv = memoryview(data)
    total = len(mv)
    if total < FIXED_SIZE:
        raise ProtocolError(f"ROCKETMQ header too short: {total} bytes")
    code, lang, version, opaque, flag, remark_len = _FIXED.unpack_from(mv, 0)
    pos = 17
    if remark_len < 0 or remark_len > total - FIXED_SIZE:
        raise ProtocolError(f"ROCKETMQ header remark length {remark_len} exceeds header ({total} bytes)")
    try:
        remark = str(mv[pos:pos + remark_len], "utf-8") if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(mv, pos)
        pos += 4
        if ext_len < 0 or ext_len > total - pos:
            raise ProtocolError(f"ROCKETMQ header ext length {ext_len} exceeds header ({total} bytes)")
        ext = _decode_ext(mv, pos, pos + ext_len) if ext_len else None
    except UnicodeDecodeError as e:
        raise ProtocolError(f"ROCKETMQ header is not UTF-8: {e}") from None
    return RemotingCommand(
        code,
        language=_BYTE_TO_LANG.get(lang, "OTHER"),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=1,
    )


def _decode_ext(mv: memoryview, pos: int, end: int) -> dict[str, str]:
    raw = bytes(mv[pos:end])
    # ASCII fast path: byte offsets equal str offsets, so slice one decoded string instead of decoding each
    text = raw.decode("ascii") if raw.isascii() else None
    ext: dict[str, str] = {}
    unpack_i = _I32.unpack_from
    n = len(raw)
    p = 0
    while p < n:
        if n - p < 6:
            raise ProtocolError("truncated ext entry")
        klen = (raw[p] << 8) | raw[p + 1]
        p += 2
        if klen & 0x8000 or klen > n - p - 4:
            raise ProtocolError(f"ext key length {klen} out of range")
        kend = p + klen
        (vlen,) = unpack_i(raw, kend)
        vstart = kend + 4
        if vlen < 0 or vlen > n - vstart:
            raise ProtocolError(f"ext value length {vlen} out of range")
        vend = vstart + vlen
        if klen and vlen:
            if text is not None:
                ext[text[p:kend]] = text[vstart:vend]
            else:
                ext[raw[p:kend].decode()] = raw[vstart:vend].decode()
        p = vend
    return ext
