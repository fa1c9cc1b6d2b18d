"""Hypothesis: the native encode_json_frame (orbitmq.base._speedups) gives exactly what its pure-Python twin
encode_json_frame_py gives (the same bytes, or None), the twin's frames are encode_frame_general's, and
encode_frame (which takes the native path first) answers as the general encoder for any command. Skipped when the
extension was not built."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from orbitmq.protocol import RemotingCommand
from orbitmq.protocol.codes import CURRENT_VERSION, FLAG_RESPONSE
from orbitmq.protocol.frame import FrameDecoder, encode_frame, encode_frame_general, encode_json_frame_py

native = pytest.importorskip("orbitmq.base._speedups")
if not hasattr(native, "encode_json_frame"):
    pytest.skip("stale extension build (no encode_json_frame)", allow_module_level=True)


class _Code(enum.IntEnum):
    X = 3


_SPECIAL = ["", "JAVA", "DefaultRegion", "true", 'q"uote', "back\\slash", "tab\t", "nl\n", "\x00", "\x1f", "\x7f",
            "é", "日本", "😀", "\ud800", "a\udfffb", "\u2028"]
_text = st.one_of(st.text(max_size=10), st.sampled_from(_SPECIAL),
                  st.builds(lambda a, b: a + b, st.text(max_size=4), st.sampled_from(_SPECIAL)))
_ints = st.one_of(st.integers(-(2**31), 2**31), st.sampled_from([-(2**63), 2**63 - 1, 2**63, -(2**63) - 1, 2**64]),
                  st.integers())
_odd = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.just(_Code.X), st.binary(max_size=3))
_ext = st.one_of(
    st.dictionaries(_text, _text, max_size=8),  # the common shape
    st.dictionaries(_text, _text, min_size=15, max_size=20),  # around the native small-dict limit (16)
    st.dictionaries(_text, st.one_of(_text, _odd, st.integers()), max_size=4),
    st.dictionaries(st.integers(0, 3), _text, max_size=2),
)


@st.composite
def commands(draw: Any) -> RemotingCommand:
    """Commands of the common shape, or with one field of another type or value."""
    cmd = RemotingCommand(draw(st.integers(-(2**31), 2**31)), language=draw(st.sampled_from(["JAVA", "GO", "CPP"])),
                          version=draw(st.integers(0, 500)), opaque=draw(st.integers(0, 2**31)),
                          flag=draw(st.integers(0, 3)), remark=draw(st.one_of(st.none(), st.text(max_size=8))),
                          ext_fields=draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=6),
                                                                               st.text(max_size=8), max_size=6))),
                          body=draw(st.one_of(st.none(), st.binary(max_size=16))))
    mode = draw(st.integers(0, 9))
    if mode >= 3:
        field = draw(st.sampled_from(RemotingCommand.__slots__))
        if field in ("code", "version", "opaque", "flag"):
            value = draw(st.one_of(_ints, _odd))
        elif field in ("language", "remark"):
            value = draw(st.one_of(_text, _odd))
        elif field == "ext_fields":
            value = draw(st.one_of(_ext, _odd))
        elif field == "body":
            value = draw(st.one_of(st.binary(max_size=8), st.just(b""), st.builds(bytearray, st.binary(max_size=4)),
                                   st.none()))
        else:
            value = draw(st.one_of(st.sampled_from([0, 1, 2]), _odd))
        setattr(cmd, field, value)
    return cmd


def _general(cmd: RemotingCommand) -> Any:
    try:
        return encode_frame_general(cmd)
    except Exception as e:  # noqa: BLE001 - the error type is what is compared
        return type(e)


@settings(max_examples=400, deadline=None)
@given(commands())
def test_encode_json_frame_native_equals_python(cmd):
    want = encode_json_frame_py(cmd)
    event("fast path" if want is not None else "general encoder")
    assert native.encode_json_frame(cmd) == want


@settings(max_examples=400, deadline=None)
@given(commands())
def test_fast_frames_are_the_general_encoders_and_encode_frame_answers_as_it(cmd):
    fast = encode_json_frame_py(cmd)
    general = _general(cmd)
    if fast is not None:
        assert fast == general
        (back,) = FrameDecoder().feed(fast)
        assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields, back.body or None) == (
            cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.body or None)
    try:
        got: Any = encode_frame(cmd)
    except Exception as e:  # noqa: BLE001
        got = type(e)
    assert got == general


def test_put_ok_response_takes_the_native_path():
    resp = RemotingCommand(0, opaque=12, flag=FLAG_RESPONSE, ext_fields={
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": "7F00000100002A9F0000000000000000",
        "queueId": "3", "queueOffset": "42"})
    frame = native.encode_json_frame(resp)
    assert frame is not None and frame == encode_frame_general(resp)
    assert frame[8:].startswith(b'{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","TRACE_ON":"true","msgId":')
    assert frame.endswith(b'"serializeTypeCurrentRPC":"JSON","version":%d}' % CURRENT_VERSION)


def test_unset_slot_and_other_classes_go_to_the_python_encoder():
    cmd = object.__new__(RemotingCommand)
    assert native.encode_json_frame(cmd) is None and encode_json_frame_py(cmd) is None

    class Sub(RemotingCommand):
        __slots__ = ("extra",)

    sub = Sub(5, ext_fields={"k": "v"}, body=b"b")
    assert native.encode_json_frame(sub) == encode_frame_general(sub)
    plain = RemotingCommand(5, ext_fields={"k": "v"}, body=b"b")
    assert native.encode_json_frame(plain) == encode_frame_general(plain)  # the slot cache follows the class
