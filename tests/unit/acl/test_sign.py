"""protocol/acl_sign.py: the content a signature covers and the HMAC-SHA1 + Base64 value, RocketMQ's rules."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.acl_sign import (
    SessionCredentials,
    calc_signature,
    sign_request,
    signature_matches,
    signing_content,
)


def test_content_is_sorted_values_then_body() -> None:
    ext = {"b": "TopicA", "a": "PG", "AccessKey": "RocketMQ", "Signature": "ignored", "_UNIQUE_KEY_QUERY": "true"}
    # Java TreeMap order: upper case before lower case; Signature and _UNIQUE_KEY_QUERY are left out
    assert signing_content(ext, b"body") == b"RocketMQ" + b"PG" + b"TopicA" + b"body"
    assert signing_content(None, None) == b""
    assert signing_content({"k": "v"}, None) == b"v"


def test_content_uses_java_string_order_and_utf8() -> None:
    # U+FF21 comes before U+1F600 by code point, after it by UTF-16 code unit (0xD83D...), which Java compares
    ext = {"\U0001f600": "x", "\uff21": "y"}
    assert signing_content(ext, None) == b"xy"
    assert signing_content({"k": "héllo"}, b"\x00\xff") == "héllo".encode() + b"\x00\xff"


def test_non_string_values_are_signed_as_the_wire_spells_them() -> None:
    ext = {"order": True, "perm": 6, "absent": None}  # type: ignore[dict-item]
    assert signing_content(ext, None) == b"true6"  # sorted: order, perm


def test_signature_is_base64_hmac_sha1() -> None:
    content = b"RocketMQPGTopicAbody"
    expected = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert calc_signature(content, "12345678") == expected
    assert signature_matches(content, "12345678", expected)
    assert not signature_matches(content, "12345679", expected)
    assert not signature_matches(content, "12345678", None)
    assert not signature_matches(content, "12345678", "")


def test_sign_request_adds_fields_and_verifies() -> None:
    creds = SessionCredentials("RocketMQ", "12345678", "tok")
    header = {"a": "PG", "b": "TopicA"}
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, b"payload")
    sign_request(cmd, creds)
    assert header == {"a": "PG", "b": "TopicA"}  # the caller's dict is not changed (retries reuse it)
    ext = cmd.ext_fields
    assert ext is not None and ext["AccessKey"] == "RocketMQ" and ext["SecurityToken"] == "tok"
    assert signature_matches(signing_content(ext, cmd.body), "12345678", ext["Signature"])
    first = ext["Signature"]
    sign_request(cmd, creds)  # signing again gives the same signature (Signature itself is not signed)
    assert cmd.ext_fields is not None and cmd.ext_fields["Signature"] == first
    cmd.body = b"tampered"
    assert not signature_matches(signing_content(cmd.ext_fields, cmd.body), "12345678", first)


def test_credentials_need_both_keys_and_hide_the_secret() -> None:
    with pytest.raises(ValueError):
        SessionCredentials("ak", "")
    assert "secret" not in repr(SessionCredentials("ak12345", "secret99"))
