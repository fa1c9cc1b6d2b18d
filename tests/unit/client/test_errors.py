"""Response code -> exception mapping and the retriable flags the producer relies on."""

from __future__ import annotations

from orbitmq.base.errors import ClientError
from orbitmq.client import errors
from orbitmq.protocol import ResponseCode


def test_each_mapped_code_has_its_own_class_with_that_code():
    seen = set()
    for code, cls in errors.ERROR_BY_CODE.items():
        e = errors.error_for_response(code, "why", "1.2.3.4:10911")
        assert type(e) is cls and e.code == code and e.remark == "why"
        assert isinstance(e, ClientError)
        assert "1.2.3.4:10911" in str(e)
        seen.add(cls)
    assert len(seen) == len(errors.ERROR_BY_CODE)


def test_send_retry_codes_are_retriable_and_busy_is_one():
    for code in errors.SEND_RETRY_CODES:
        assert errors.error_for_response(code).retriable
    assert ResponseCode.SYSTEM_BUSY in errors.SEND_RETRY_CODES  # admission control: nothing stored, go elsewhere
    assert not errors.error_for_response(ResponseCode.MESSAGE_ILLEGAL).retriable
    assert not errors.error_for_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST).retriable


def test_unknown_code_keeps_the_code():
    e = errors.error_for_response(4242, "odd")
    assert type(e) is errors.ResponseError and e.code == 4242 and not e.retriable


def test_every_non_internal_response_code_maps_to_a_dedicated_class():
    for rc in ResponseCode:
        if 0 < rc.value < 1000:
            assert rc.value in errors.ERROR_BY_CODE, rc
