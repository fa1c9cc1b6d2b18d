"""Header codecs: the worked examples of the reference (§1.4, §1.5) and tolerant decoding."""

import orjson
import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol import FrameDecoder, LanguageCode, RemotingCommand, RequestCode, encode_frame
from orbitmq.protocol.header_binary import FIXED_SIZE, decode_binary_header, encode_binary_header
from orbitmq.protocol.header_json import decode_json_header, encode_json_header

WORKED_BINARY = bytes.fromhex(
    "00000033" "0100002F" "001E" "00" "0199" "00000001" "00000000" "00000000" "0000001A"
) + b"\x00\x05topic\x00\x00\x00\x01T" + b"\x00\x07queueId\x00\x00\x00\x010"

WORKED_JSON_TEXT = (
    b'{"code":30,"extFields":{"queueId":"0","topic":"T"},"flag":0,"language":"JAVA","opaque":1,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}'
)


def _get_max_offset(serialize_type: int) -> RemotingCommand:
    # insertion order topic, queueId like the worked example's entry order
    return RemotingCommand(RequestCode.GET_MAX_OFFSET, opaque=1, ext_fields={"topic": "T", "queueId": "0"},
                           serialize_type=serialize_type)


def test_binary_worked_example_is_55_bytes_exactly():
    frame = encode_frame(_get_max_offset(1))
    assert len(frame) == 55
    assert frame == WORKED_BINARY


def test_binary_worked_example_decodes():
    (cmd,) = FrameDecoder().feed(WORKED_BINARY)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (30, "JAVA", 409, 1, 0)
    assert cmd.remark is None and cmd.body is None and cmd.serialize_type == 1
    assert cmd.ext_fields == {"topic": "T", "queueId": "0"}


def test_json_worked_example():
    frame = encode_frame(_get_max_offset(0))
    assert len(WORKED_JSON_TEXT) == 136
    assert frame[:8] == bytes.fromhex("0000008C00000088")
    assert frame[8:] == WORKED_JSON_TEXT
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd.ext_fields == {"queueId": "0", "topic": "T"} and cmd.serialize_type == 0


def test_binary_fixed_part_is_21_bytes():
    hdr = encode_binary_header(RemotingCommand(1))
    assert len(hdr) == FIXED_SIZE == 21


def test_java_send_v2_header_example_decodes():
    text = (
        '{"code":310,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"2","f":"0",'
        '"g":"1700000000000","h":"0","i":"KEYS\\u0001k1\\u0002UNIQ_KEY\\u0001AC11\\u0002WAIT\\u0001true",'
        '"j":"0","k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":7,'
        '"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    cmd = decode_json_header(text.encode())
    assert cmd.code == 310 and cmd.opaque == 7
    assert cmd.ext_fields["i"] == "KEYS\x01k1\x02UNIQ_KEY\x01AC11\x02WAIT\x01true"


def test_json_decode_accepts_numbers_bools_unknown_keys_and_languages():
    text = (b'{"code":10,"extFields":{"queueId":3,"sysFlag":0,"flag":1.5,"unitMode":true,"gone":null},'
            b'"flag":0,"language":"KLINGON","opaque":5,"remark":"","version":333,"newKey":[1,2]}')
    cmd = decode_json_header(text)
    assert cmd.ext_fields == {"queueId": "3", "sysFlag": "0", "flag": "1.5", "unitMode": "true"}
    assert cmd.language == "KLINGON"
    assert cmd.remark == ""
    assert cmd.version == 333


def test_json_decode_remark_null_or_absent():
    assert decode_json_header(b'{"code":0,"remark":null}').remark is None
    assert decode_json_header(b'{"code":0}').remark is None
    cmd = decode_json_header(b'{"code":0}')
    assert cmd.ext_fields is None and cmd.language == "JAVA" and cmd.version == 0


def test_json_encode_is_compact_with_string_ext_values_and_no_null_remark():
    cmd = RemotingCommand(0, opaque=3, flag=1, ext_fields={"queueId": 2, "ok": True, "s": "x"})
    raw = encode_json_header(cmd)
    assert b" " not in raw
    d = orjson.loads(raw)
    assert d["extFields"] == {"queueId": "2", "ok": "true", "s": "x"}
    assert "remark" not in d
    assert list(d) == sorted(d)


@pytest.mark.parametrize("bad", [b"not json", b"[1,2]", b'{"flag":0}', b'{"code":"abc"}',
                                 b'{"code":1,"extFields":[1]}'])
def test_json_decode_rejects_garbage(bad):
    with pytest.raises(ProtocolError):
        decode_json_header(bad)


def test_binary_round_trip_with_remark_unicode_and_languages():
    cmd = RemotingCommand(17, language="GO", version=317, opaque=-5, flag=3, remark="héllo ✓",
                          ext_fields={"k": "v", "ü": "ß"}, serialize_type=1)
    back = decode_binary_header(encode_binary_header(cmd))
    assert back.code == 17 and back.language == "GO" and back.version == 317
    assert back.opaque == -5 and back.flag == 3 and back.remark == "héllo ✓"
    assert back.ext_fields == {"k": "v", "ü": "ß"}


def test_binary_empty_strings_decode_as_null():
    cmd = RemotingCommand(1, remark="", ext_fields={"a": "", "b": "1"}, serialize_type=1)
    back = decode_binary_header(encode_binary_header(cmd))
    assert back.remark is None
    assert back.ext_fields == {"b": "1"}


def test_binary_language_bytes_follow_language_code_table():
    for lc in LanguageCode:
        hdr = encode_binary_header(RemotingCommand(1, language=lc.name))
        assert hdr[2] == lc.value
    assert decode_binary_header(encode_binary_header(RemotingCommand(1, language="NOPE"))).language == "OTHER"


def test_binary_rejects_lengths_beyond_header():
    hdr = bytearray(encode_binary_header(RemotingCommand(1, remark="abc", ext_fields={"k": "v"})))
    bad_remark = bytearray(hdr)
    bad_remark[13:17] = (1000).to_bytes(4, "big")
    with pytest.raises(ProtocolError):
        decode_binary_header(bytes(bad_remark))
    bad_ext = bytearray(hdr)
    bad_ext[20:24] = (999).to_bytes(4, "big")
    with pytest.raises(ProtocolError):
        decode_binary_header(bytes(bad_ext))
    with pytest.raises(ProtocolError):
        decode_binary_header(bytes(hdr[:-1]))  # truncated entry value
    with pytest.raises(ProtocolError):
        decode_binary_header(b"\x00" * 20)


def test_binary_requested_for_pop_code_falls_back_to_json():
    cmd = RemotingCommand(RequestCode.POP_MESSAGE, serialize_type=1)
    frame = encode_frame(cmd)
    assert frame[4] == 0  # serialize type byte: JSON
    (back,) = FrameDecoder().feed(frame)
    assert back.code == 200050


def test_response_copies_opaque_and_serialize_type():
    req = RemotingCommand.request(RequestCode.HEART_BEAT, serialize_type=1)
    resp = req.response(remark="x")
    assert resp.opaque == req.opaque and resp.serialize_type == 1
    assert resp.is_response and not req.is_response
    assert resp.version == 409


def test_request_opaques_are_unique_and_oneway_flag():
    a = RemotingCommand.request(10)
    b = RemotingCommand.request(10, oneway=True)
    assert a.opaque != b.opaque and 0 <= a.opaque <= 0x7FFFFFFF
    assert b.is_oneway and not a.is_oneway and b.flag == 2
