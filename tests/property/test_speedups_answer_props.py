"""Hypothesis: the native PUT_OK answer (`_speedups.put_ok_answer`) is byte for byte the frame its Python twin
(`put_ok_answer_py`) builds, and the frame decodes to the fields it was given; values the native code does not take
(a non-ASCII msgId, a bool or a number beyond 64 bits) are handed back (None), never written wrongly."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from orbitmq.broker.handlers.send import _OK_TAIL, put_ok_answer_py
from orbitmq.protocol.frame import EncodedResponse

native = pytest.importorskip("orbitmq.base._speedups")

_HEADS = [b'{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","TRACE_ON":"true","msgId":"',
          '{"code":0,"extFields":{"MSG_REGION":"区域","TRACE_ON":"false","msgId":"'.encode()]
_num = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**70), 2**70), st.booleans(),
                 st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**63]))


@settings(max_examples=400, deadline=None)
@given(head=st.sampled_from(_HEADS), msg_id=st.one_of(st.text("0123456789ABCDEF", min_size=32, max_size=32),
                                                      st.text(max_size=8)),
       queue_id=_num, queue_offset=_num, opaque=_num, code=st.sampled_from([0, 1]))
def test_native_put_ok_answer_is_the_python_frame(head: bytes, msg_id: str, queue_id: int, queue_offset: int,
                                                  opaque: int, code: int) -> None:
    want = put_ok_answer_py(EncodedResponse, code, head, msg_id, queue_id, queue_offset, opaque, _OK_TAIL)
    got = native.put_ok_answer(EncodedResponse, code, head, msg_id, queue_id, queue_offset, opaque, _OK_TAIL)
    if got is None:
        event("handed back")
        nums = (queue_id, queue_offset, opaque)
        assert not msg_id.isascii() or any(type(n) is not int or not -(2**63) <= n < 2**63 for n in nums)
        return
    event("built natively")
    assert type(got) is EncodedResponse and got.code == code
    assert got.frame == want.frame
    if msg_id.isascii() and '"' not in msg_id and "\\" not in msg_id and all(c >= " " for c in msg_id):
        cmd = got.decode()  # a well-formed frame with the values it was given
        assert cmd.opaque == opaque and cmd.ext_fields["msgId"] == msg_id
        assert (cmd.ext_fields["queueId"], cmd.ext_fields["queueOffset"]) == (str(queue_id), str(queue_offset))
