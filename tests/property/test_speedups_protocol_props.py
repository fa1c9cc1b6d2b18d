"""Hypothesis: the protocol-layer native twins in orbitmq.base._speedups give exactly what their pure-Python twins
give, and their fast paths agree with the general decoders they short-cut. Skipped when the extension was not
built."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol import RemotingCommand
from orbitmq.protocol.header_json import command_from_header_py, decode_header_dict, decode_json_header

native = pytest.importorskip("orbitmq.base._speedups")

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.floats(allow_nan=False),
                     st.text(max_size=12), st.sampled_from(["JAVA", "GO", "CPP", "", "0", "12"]))
_values = st.one_of(_scalars, st.lists(_scalars, max_size=2), st.dictionaries(st.text(max_size=3), _scalars,
                                                                                  max_size=2))
_ext = st.one_of(
    st.dictionaries(st.text(max_size=6), st.text(max_size=8), max_size=6),  # the common shape: all str
    st.dictionaries(st.text(max_size=6), _scalars, max_size=6),
    _values,
)
_WELL_TYPED = {"code": st.integers(-(2**31), 2**31), "version": st.integers(0, 500), "opaque": st.integers(),
               "flag": st.integers(0, 3), "language": st.sampled_from(["JAVA", "GO", "OTHER", ""]),
               "remark": st.one_of(st.none(), st.text(max_size=10)),
               "extFields": st.one_of(st.none(), st.dictionaries(st.text(max_size=6), st.text(max_size=8),
                                                                 max_size=6))}


@st.composite
def headers(draw: Any) -> Any:
    """Mostly header-like dicts: every field well typed, or one of them missing or of another type; sometimes
    anything at all."""
    mode = draw(st.integers(0, 9))
    if mode == 0:
        return draw(_values)
    d = {k: draw(strat) for k, strat in _WELL_TYPED.items()}
    if mode >= 4:  # one field changed: dropped, or any value
        k = draw(st.sampled_from(sorted(_WELL_TYPED)))
        if draw(st.booleans()):
            del d[k]
        else:
            d[k] = draw(_ext if k == "extFields" else _values)
    if draw(st.booleans()):
        d["serializeTypeCurrentRPC"] = "JSON"
    d.update(draw(st.dictionaries(st.text(max_size=4), _scalars, max_size=2)))
    return d


def _fields(cmd: RemotingCommand | None) -> Any:
    if cmd is None:
        return None
    return type(cmd), {s: getattr(cmd, s) for s in RemotingCommand.__slots__}


@settings(max_examples=600, deadline=None)
@given(headers(), st.one_of(st.none(), st.binary(max_size=8)))
def test_command_from_header_native_equals_python(d, body):
    got = native.command_from_header(RemotingCommand, d, body)
    want = command_from_header_py(RemotingCommand, d, body)
    event("fast path" if want is not None else "general decoder")
    assert _fields(got) == _fields(want)
    if want is not None:
        assert got.body is body  # kept as is, not copied
        ext = d.get("extFields")
        if ext is None or (type(ext) is dict and all(type(v) is str for v in ext.values())):
            assert got.ext_fields is want.ext_fields is ext  # all-str extFields: kept as is, not copied
        else:
            event("extFields converted")
            assert type(got.ext_fields) is dict and got.ext_fields is not ext


@settings(max_examples=600, deadline=None)
@given(headers(), st.one_of(st.none(), st.binary(max_size=8)))
def test_command_from_header_agrees_with_the_general_decoder(d, body):
    fast = command_from_header_py(RemotingCommand, d, body)
    if fast is None:
        return
    assert _fields(fast) == _fields(decode_header_dict(d, body))


@settings(max_examples=400, deadline=None)
@given(headers())
def test_decode_json_header_is_the_general_decoder_on_the_wire_form(d):
    try:
        data = orjson.dumps(d)
    except TypeError:
        return  # not representable in JSON (e.g. an int beyond 64 bits)
    parsed = orjson.loads(data)
    try:
        want: Any = _fields(decode_header_dict(parsed, b"B"))
    except ProtocolError as e:
        want = ProtocolError
        event(f"error: {str(e)[:30]}")
    try:
        got: Any = _fields(decode_json_header(data, b"B"))
    except ProtocolError:
        got = ProtocolError
    assert got == want


def test_command_from_header_rejects_a_non_type():
    with pytest.raises(TypeError):
        native.command_from_header("RemotingCommand", {"code": 1, "language": "JAVA"}, None)
    with pytest.raises(TypeError):
        native.command_from_header(RemotingCommand, {})


def test_common_send_header_takes_the_fast_path():
    d = {"code": 310, "extFields": {"a": "PG", "b": "T"}, "flag": 0, "language": "JAVA", "opaque": 7,
         "serializeTypeCurrentRPC": "JSON", "version": 409}
    cmd = native.command_from_header(RemotingCommand, d, b"x")
    assert cmd is not None and cmd == RemotingCommand(310, opaque=7, version=409, ext_fields={"a": "PG", "b": "T"},
                                                      body=b"x")
    assert native.command_from_header(RemotingCommand, {**d, "flag": True}, b"x") is None  # bool: general path
    assert native.command_from_header(RemotingCommand, {**d, "extFields": {"a": 1.5}}, b"x") is None  # a float
    assert native.command_from_header(RemotingCommand, {**d, "extFields": {"a": [1]}}, b"x") is None


def test_cpp_client_send_header_takes_the_fast_path():
    """The C++ client's SEND_MESSAGE header has numbers among its extFields: converted as the general decoder
    converts them (decimal, booleans lower-case, nulls dropped), by both twins."""
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "batch": "0", "bornTimestamp": "1795669181324",
           "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "flag": 0, "producerGroup": "pg0",
           "properties": "WAIT\x01true\x02", "queueId": 2, "reconsumeTimes": "0", "sysFlag": 0, "topic": "T",
           "unitMode": "0", "x": True, "y": False, "z": None, "big": -(2**63)}
    d = {"code": 10, "extFields": ext, "flag": 0, "language": "CPP", "opaque": 21, "remark": "", "version": 63}
    want = decode_header_dict(d, b"x")
    assert want.ext_fields is not None and want.ext_fields["queueId"] == "2" and "z" not in want.ext_fields
    for fn in (native.command_from_header, command_from_header_py):
        cmd = fn(RemotingCommand, d, b"x")
        assert _fields(cmd) == _fields(want)
        assert list(cmd.ext_fields) == list(want.ext_fields)  # same order
    assert ext["queueId"] == 2  # the parsed header is not changed


def test_command_from_header_follows_subclasses_and_class_changes():
    """Slots are written where the class keeps them; a class changed after use is looked at again; an attribute
    that is no plain slot fails as the Python twin's assignment fails."""

    class Sub(RemotingCommand):
        __slots__ = ("extra",)

    d = {"code": 2, "language": "GO", "opaque": 5, "extFields": {"k": "v"}}
    for cls in (RemotingCommand, Sub, RemotingCommand, Sub):
        got = native.command_from_header(cls, d, b"b")
        assert _fields(got) == _fields(command_from_header_py(cls, d, b"b"))
        assert type(got) is cls
    Sub.body = property(lambda self: b"fixed")  # type: ignore[assignment,method-assign]
    for fn in (native.command_from_header, command_from_header_py):
        with pytest.raises(AttributeError):
            fn(Sub, d, b"b")
    del Sub.body
    assert native.command_from_header(Sub, d, b"b").body == b"b"
