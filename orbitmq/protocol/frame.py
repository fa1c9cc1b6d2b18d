"""Frame codec: 4-byte length | 1-byte serialize type + 3-byte header length | header | body.

`encode_frame` builds one frame; `FrameDecoder` is an incremental, sans-IO decoder that raises
ProtocolError on any malformed input (the caller then closes the connection).
"""

from __future__ import annotations

import re
import struct

from orbitmq.base.errors import ProtocolError
from orbitmq.base.native import speedups
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.header_binary import decode_binary_header, encode_binary_header, fits_binary
from orbitmq.protocol.header_json import decode_json_header, encode_json_header

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
_PREFIX = struct.Struct(">iI")  # length (bytes after this field), serializeType<<24 | headerLength
_LEN = struct.Struct(">i")
PREFIX_SIZE = 8
MAX_HEADER_LENGTH = 0xFFFFFF


def encode_header(cmd: RemotingCommand) -> tuple[int, bytes]:
    """(serialize type actually used, header bytes). Binary falls back to JSON when codes do not fit."""
    if cmd.serialize_type == 1 and fits_binary(cmd):
        return 1, encode_binary_header(cmd)
    return 0, encode_json_header(cmd)


def encode_frame(cmd: RemotingCommand) -> bytes:
    if _encode_json_frame is not None:  # the common JSON command in one native call
        frame = _encode_json_frame(cmd)
        if frame is not None:
            return frame
    return encode_frame_general(cmd)


def encode_frame_general(cmd: RemotingCommand) -> bytes:
    """encode_frame in Python: any command, any serialize type; raises ProtocolError (or the JSON encoder's
    error) for what cannot be encoded."""
    if cmd.serialize_type == 0:
        stype, header = 0, encode_json_header(cmd)
    else:
        stype, header = encode_header(cmd)
    hlen = len(header)
    if hlen > MAX_HEADER_LENGTH:
        raise ProtocolError(f"header of {hlen} bytes does not fit 24 bits")
    body = cmd.body
    if body:
        return b"".join((_PREFIX.pack(4 + hlen + len(body), (stype << 24) | hlen), header, body))
    return _PREFIX.pack(4 + hlen, (stype << 24) | hlen) + header


_INT64 = range(-(2**63), 2**63)
_NOT_PLAIN = re.compile(r'["\\\x00-\x1f\ud800-\udfff]').search  # what JSON escapes, and what UTF-8 cannot hold


def _plain(s: object) -> bool:
    return type(s) is str and _NOT_PLAIN(s) is None


class EncodedResponse:
    """A response a handler returns already encoded (its whole frame): the connection writes `frame` as is, the
    metrics count `code`. For answers built from a template on a hot path (the send handler's PUT_OK)."""

    __slots__ = ("code", "frame")

    def __init__(self, code: int, frame: bytes) -> None:
        self.code = code
        self.frame = frame

    def decode(self) -> RemotingCommand:
        """The command the frame holds (tests and tools)."""
        (cmd,) = FrameDecoder().feed(self.frame)
        return cmd


def is_plain_json_text(s: object) -> bool:
    """True for a str that JSON writes between quotes unchanged (no escapes) and UTF-8 can hold."""
    return _plain(s)


def encode_json_frame_py(cmd: RemotingCommand) -> bytes | None:
    """The frame of a command of the common JSON shape, else None (encode_frame_general decides).
    Common: serialize_type 0; code, version, opaque and flag ints within int64 (not bool); language a str; remark
    None or a str; ext_fields None or a dict of str keys and str values; body None or bytes; no string holding a
    character JSON escapes ('"', '\\', U+0000-U+001F) or a lone surrogate; header < 16 MiB and the frame length
    within int32. Then the bytes equal encode_frame_general(cmd). Pure-Python twin of the native
    encode_json_frame (orbitmq/base/_speedups.c), which reads RemotingCommand's slots in place."""
    try:
        code, version, opaque, flag = cmd.code, cmd.version, cmd.opaque, cmd.flag
        language, remark, ext, body, stype = cmd.language, cmd.remark, cmd.ext_fields, cmd.body, cmd.serialize_type
    except AttributeError:
        return None
    if type(stype) is not int or stype != 0:
        return None
    for n in (code, version, opaque, flag):
        if type(n) is not int or n not in _INT64:
            return None
    if not _plain(language) or (remark is not None and not _plain(remark)):
        return None
    if ext is not None and (type(ext) is not dict or not all(_plain(k) and _plain(v) for k, v in ext.items())):
        return None
    if body is not None and type(body) is not bytes:
        return None
    header = encode_json_header(cmd)
    hlen = len(header)
    blen = len(body) if body else 0
    if hlen > MAX_HEADER_LENGTH or 4 + hlen + blen > 2**31 - 1:
        return None  # encode_frame_general raises
    return _PREFIX.pack(4 + hlen + blen, hlen) + header + (body or b"")


def decode_frame_content(stype: int, header: bytes | memoryview, body: bytes | None) -> RemotingCommand:
    if stype == 0:
        return decode_json_header(header, body)
    if stype == 1:
        return decode_binary_header(header, body)
    raise ProtocolError(f"unknown serialize type {stype}")


class FrameDecoder:
    """Incremental decoder: feed() any chunk, get back every complete command it completes.

    On malformed input feed() raises ProtocolError whose `frames` attribute holds the good commands that
    preceded the bad frame in the same chunk; the decoder is then unusable (the caller closes).
    """

    __slots__ = ("_buf", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:
            src = data if isinstance(data, bytes) else bytes(data)
        out: list[RemotingCommand] = []
        try:  # a bytes chunk (nothing buffered, the usual read) is parsed without a view: its slices are bytes
            pos = self._parse_view(src, src, out) if src is not buf else self._parse(src, out)
        except ProtocolError as e:
            e.frames = out  # type: ignore[attr-defined]  # complete frames that preceded the bad one
            buf.clear()
            raise
        if src is buf:
            if pos:
                del buf[:pos]
        elif pos < len(src):
            buf += src[pos:] if pos else src
        return out

    def _parse(self, src: bytes | bytearray, out: list[RemotingCommand]) -> int:
        if type(src) is bytes:  # slices of bytes are bytes: no view needed
            return self._parse_view(src, src, out)
        with memoryview(src) as mv:  # a bytearray: views, released before the buffer is resized
            return self._parse_view(src, mv, out)

    def _parse_view(self, src: bytes | bytearray, mv: bytes | memoryview, out: list[RemotingCommand]) -> int:
        end = len(src)
        pos = 0
        max_size = self.max_frame_size
        if _decode_frames is not None:  # the common JSON frames in one native call; the loop below takes the rest
            cmds, pos = _decode_frames(mv, max_size, RemotingCommand)
            if cmds:
                out.extend(cmds)
        unpack_prefix = _PREFIX.unpack_from
        while end - pos >= 4:
            if end - pos >= 8:
                length, word = unpack_prefix(mv, pos)
            else:
                (length,) = _LEN.unpack_from(mv, pos)
                word = 0
            if length < 4:
                raise ProtocolError(f"frame length {length} < 4")
            if length + 4 > max_size:
                raise ProtocolError(f"frame of {length + 4} bytes exceeds the {max_size}-byte limit")
            frame_end = pos + 4 + length
            if frame_end > end:
                break
            stype = word >> 24
            hlen = word & 0xFFFFFF
            if hlen > length - 4:
                raise ProtocolError(f"header length {hlen} > frame length {length} - 4")
            hstart = pos + 8
            bstart = hstart + hlen
            body = mv[bstart:frame_end] if bstart < frame_end else None
            if body is not None and type(body) is not bytes:
                body = bytes(body)
            header = mv[hstart:bstart]
            if type(header) is not bytes:  # no view of the buffer may outlive this call: an error's traceback
                header = bytes(header)  # would hold it, and the buffer could not be cleared (BufferError)
            try:
                if stype == 0:
                    out.append(decode_json_header(header, body))
                else:
                    out.append(decode_frame_content(stype, header, body))
            except ProtocolError:
                raise
            except Exception as e:  # any decoder surprise is a malformed frame
                raise ProtocolError(f"undecodable header: {type(e).__name__}: {e}") from None
            pos = frame_end
        return pos


_native = speedups()
_encode_json_frame = _native.encode_json_frame if _native is not None else None
# the Python twin is the loop of FrameDecoder._parse_view itself (orjson + command_from_header per frame)
_decode_frames = _native.decode_frames if _native is not None else None
encode_json_frame = _encode_json_frame  # (cmd) -> frame bytes | None; None without the extension
