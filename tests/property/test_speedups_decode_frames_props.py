"""Hypothesis: the native JSON header parse (parse_json_header) gives exactly what orjson.loads gives whenever it
answers, and the native frame loop (decode_frames) followed by the Python loop from where it stopped decodes a read
exactly as the Python loop alone (the same commands, the same rest kept, the same errors). Skipped when the
extension was not built."""

from __future__ import annotations

import json
import struct
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol import RemotingCommand, encode_frame
from orbitmq.protocol import frame as frame_mod
from orbitmq.protocol.frame import FrameDecoder

native = pytest.importorskip("orbitmq.base._speedups")

_SPECIAL = ["", "a", "UNIQ_KEY\x017F00\x02WAIT\x01true", 'q"uote', "back\\slash", "tab\t", "nl\n", "\x00", "\x1f",
            "\x7f", "é", "日本", "😀", "/", "\u2028", "\x01\x02"]
_text = st.one_of(st.text(max_size=12), st.sampled_from(_SPECIAL))
_scalar = st.one_of(_text, st.integers(-(10**18) + 1, 10**18 - 1), st.integers(), st.booleans(), st.none(),
                    st.floats(allow_nan=False, allow_infinity=False))
_keys = st.one_of(st.sampled_from(["code", "extFields", "flag", "language", "opaque", "remark", "version", "a", "b",
                                   "serializeTypeCurrentRPC", "topic", "z"]), _text)
_value = st.one_of(_scalar, st.dictionaries(_keys, _scalar, max_size=6),
                   st.lists(_scalar, max_size=2), st.dictionaries(_keys, st.dictionaries(_keys, _scalar, max_size=1),
                                                                   max_size=1))


def _render(d: Any, style: int) -> bytes:
    """JSON text as different writers produce it: orjson, json (ASCII escapes), json with spaces."""
    if style == 0:
        try:
            return orjson.dumps(d)
        except TypeError:  # an int beyond 64 bits
            return json.dumps(d).encode()
    if style == 1:
        return json.dumps(d).encode()
    return json.dumps(d, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass")


_raw = st.sampled_from([b"", b"{", b"{}", b" {} ", b"[]", b'{"a":01}', b'{"a":1.5}', b'{"a":1e3}', b'{"a":-0}',
                        b'{"a":"\\ud800"}', b'{"a":"\\udc00\\ud800"}', b'{"a":"\\ud83d\\ude00"}', b'{"a":"x\x01"}',
                        b'{"a":"\xff"}', b'{"a":tru}', b'{"a":1,}', b'{"a" 1}', b'{"a":{"b":{"c":1}}}',
                        b'{"a":"\\u00e9\\u0001"}', b'{"a":"\\x"}', b'{"a":12345678901234567890}', b'{}x',
                        b'{"a":1}{"b":2}', b'{"\\u0061":1}', b'{"a":"\\/\\b\\f\\n\\r\\t"}', b'{"a":nul}'])


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.builds(_render, st.dictionaries(_keys, _value, max_size=8), st.integers(0, 2)), _raw))
def test_parse_json_header_answers_as_orjson(data: bytes) -> None:
    try:
        want: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        want = "error"
    got = native.parse_json_header(data)
    event("taken" if got is not None else "left to orjson")
    if got is not None:
        assert got == want
        assert type(got) is dict
        assert all(type(a) is type(b) for a, b in zip(got.values(), want.values(), strict=True))


@pytest.mark.parametrize("where", ['{"a":"x%sy"}', '{"k%s":1}', '{"e":{"a":"%s"}}', '{"a":"\\u0001%s\\n"}'])
def test_every_raw_byte_in_a_string_answers_as_orjson(where: str) -> None:
    """Each of the 256 byte values written raw inside a string (value, key, nested, after escapes): the scanner's
    byte classes (plain, quote, escape, control, non-ASCII) against orjson."""
    for b in range(256):
        data = where.encode().replace(b"%s", bytes([b]))
        try:
            want: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            want = "error"
        got = native.parse_json_header(data)
        if got is not None:
            assert got == want, (b, data)


def _frame(cmd_ext: dict[str, Any], body: bytes | None, code: int, opaque: int) -> bytes:
    cmd = RemotingCommand.request(code, cmd_ext, body)
    cmd.opaque = opaque
    return encode_frame(cmd)


_ext_values = st.one_of(_text, st.integers(-5, 2**40), st.booleans(), st.none())
_frames = st.builds(_frame, st.dictionaries(_keys, _ext_values, max_size=5), st.one_of(st.none(), st.binary(max_size=40)),
                    st.integers(0, 400), st.integers(0, 2**31 - 1))
_odd_frames = st.sampled_from([
    struct.pack(">iI", 3, 0),  # length < 4
    struct.pack(">iI", 12, (1 << 24) | 4) + b"\x00" * 8,  # serialize type 1 (ROCKETMQ), not a valid binary header
    struct.pack(">iI", 8, 9) + b"{}\x00\x00",  # header longer than the frame
    struct.pack(">iI", 10, 6) + b'{"a":1',  # an unparsable JSON header
    struct.pack(">iI", 13, 9) + b'{"code":1}',  # a header without extFields
    struct.pack(">iI", 1 << 30, 2) + b"{}",  # larger than the frame limit
    struct.pack(">iI", 20, 3) + b"{}",  # incomplete
])


def _decode(chunks: list[bytes]) -> list[Any]:
    """What a decoder gives for each chunk in turn: its commands, or the error type and the commands before it."""
    dec = FrameDecoder(max_frame_size=1 << 20)
    out: list[Any] = []
    for c in chunks:
        try:
            out.append(("ok", dec.feed(c), dec.buffered))
        except ProtocolError as e:
            out.append(("error", e.frames))  # type: ignore[attr-defined]
            break
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_frames, _frames, _odd_frames), min_size=1, max_size=6), st.integers(0, 5), st.data())
def test_native_frame_loop_decodes_as_the_python_loop(frames: list[bytes], cuts: int, data: st.DataObject) -> None:
    """A read split anywhere (frames across reads: the decoder's bytearray) decodes to the same commands, rest
    and errors with the native loop as with the Python loop alone."""
    stream = b"".join(frames)
    points = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=cuts)))
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    with_native = _decode(chunks)
    saved = frame_mod._decode_frames
    frame_mod._decode_frames = None
    try:
        python_only = _decode(chunks)
    finally:
        frame_mod._decode_frames = saved
    assert with_native == python_only


def test_the_sdk_send_frames_take_the_native_loop() -> None:
    """The SDK's SEND_MESSAGE_V2 frames are taken whole by the native loop (else the tests above compare the
    Python loop with itself)."""
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
           "i": "UNIQ_KEY\x01K1\x02WAIT\x01true\x02TAGS\x01A", "j": "0", "k": "false", "m": "false"}
    chunk = b"".join(_frame(ext, b"body", 310, i) for i in range(8))
    cmds, pos = native.decode_frames(chunk, 1 << 20, RemotingCommand)
    assert pos == len(chunk)
    assert cmds == FrameDecoder().feed(chunk) and len(cmds) == 8
    assert cmds[0].ext_fields["i"] == ext["i"]


@pytest.mark.parametrize("native_loop", [True, False])
def test_a_bad_header_split_across_reads_is_a_protocol_error(native_loop: bool) -> None:
    """A malformed header whose frame arrived in two reads (decoded from the decoder's own buffer) raises
    ProtocolError with the good frames before it; it once raised BufferError (a view of the buffer outlived the
    parse in the error's traceback, and the buffer could not be cleared)."""
    good = _frame({"a": "1"}, b"x", 10, 1)
    bad = struct.pack(">iI", 10, 6) + b'{"a":1'
    stream = good + bad
    saved = frame_mod._decode_frames
    if not native_loop:
        frame_mod._decode_frames = None
    try:
        dec = FrameDecoder()
        assert dec.feed(stream[:5]) == []
        with pytest.raises(ProtocolError) as err:
            dec.feed(stream[5:])
    finally:
        frame_mod._decode_frames = saved
    assert [c.opaque for c in err.value.frames] == [1]  # type: ignore[attr-defined]
