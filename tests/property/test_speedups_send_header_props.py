"""Hypothesis: the native decode_send_v2 (orbitmq/base/_speedups.c) gives exactly what its pure-Python twin
protocol/headers.py decode_send_v2_py gives, and whenever that fast path answers, the general decoder of
SendMessageRequestHeader gives the same fields (the fast path only short-cuts it). The extension must be built
(pip install -e . / ./dev): its import fails the module otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from orbitmq.base import _speedups as native
from orbitmq.protocol import HeaderError, headers
from orbitmq.protocol.ext import SEND_V2_TO_V1
from orbitmq.protocol.headers import SendMessageRequestHeader, decode_send_v2_py

S = SendMessageRequestHeader
_LETTERS = "abcdefghijklmn"
_INTS = st.one_of(st.integers(-(2**31) - 2, 2**31 + 1), st.integers(-(2**63) - 2, 2**63 + 1),
                  st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 10**19, -(10**19)]))
_TEXT = st.one_of(
    _INTS.map(str),
    st.sampled_from(["", "-", "+1", " 1", "1 ", "1_0", "007", "-0", "\u0661", "１", "true", "TRUE", "tRuE", "1",
                     "false", "truee", "tru", "\u212a", "\u0130", "99999999999999999999", "-9223372036854775809"]),
    st.text(max_size=8),
)
_NUMERIC = st.one_of(_INTS.map(str), _INTS.map(str), _INTS.map(str), _INTS.map(str), _TEXT)  # int fields
_VALUE = st.one_of(_TEXT, _TEXT, _TEXT, st.none(), st.booleans(), st.integers(-5, 5))


_OTHER_KEYS = ["o", "A", "bb", "", "AccessKey", "Signature", "OnsChannel", "Topic"]


@st.composite
def send_ext(draw: Any) -> Any:
    """Mostly send headers with the required fields, by V2 letters or (as the C++ client sends) V1 names plus
    other keys; sometimes fields dropped, a field by both names, other keys, non-str values."""
    mode = draw(st.integers(0, 9))
    if mode == 0:
        return draw(st.one_of(st.none(), st.lists(st.text(max_size=2), max_size=2),
                              st.dictionaries(st.text(max_size=3), _VALUE, max_size=6)))
    v1 = draw(st.booleans())
    name = SEND_V2_TO_V1.get if v1 else str
    d = {name(k): draw(_NUMERIC if k in "defghjl" else _TEXT) for k in "abefgh"}
    for k in draw(st.sets(st.sampled_from("cdijklmn"))):
        d[name(k)] = draw(_NUMERIC if k in "defghjl" else _TEXT)
    if v1 and draw(st.booleans()):
        for k in ("AccessKey", "Signature", "OnsChannel"):
            d[k] = draw(_TEXT)
    if mode >= 6:  # another key: a letter, a V1 name (maybe a field twice), or anything
        letter = draw(st.sampled_from(_LETTERS))
        key = draw(st.sampled_from([letter, SEND_V2_TO_V1[letter], *_OTHER_KEYS]))
        d[key] = draw(_VALUE)
    if mode == 9 and d:
        del d[draw(st.sampled_from(sorted(d)))]
    return d


def _fields(h: Any) -> Any:
    return None if h is None else tuple((s, getattr(h, s), type(getattr(h, s))) for s in S.__slots__)


@settings(max_examples=1500, deadline=None)
@given(send_ext())
def test_native_decode_send_v2_equals_its_twin(ext):
    got, want = native.decode_send_v2(S, ext), decode_send_v2_py(S, ext)
    event("fast path" if want is not None else "general path")
    assert _fields(got) == _fields(want)


@settings(max_examples=800, deadline=None)
@given(send_ext())
def test_fast_path_agrees_with_the_general_decoder(ext):
    fast = decode_send_v2_py(S, ext)
    if fast is None:
        return
    try:
        with pytest.MonkeyPatch.context() as mp:  # the general decoder alone
            mp.setattr(headers, "_decode_send_v2", lambda cls, ext: None)
            general = S.decode(ext)
    except HeaderError as e:  # the fast path answers only what the general decoder accepts
        raise AssertionError(f"fast path accepted what the general decoder refuses: {e}") from None
    assert _fields(fast) == _fields(general)


def test_decode_send_v2_rejects_bad_arguments():
    with pytest.raises(TypeError):
        native.decode_send_v2(S)
    with pytest.raises(TypeError):
        native.decode_send_v2("not a type", {})
