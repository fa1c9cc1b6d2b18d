"""Model codecs against the reference's worked examples."""

from __future__ import annotations

import pytest

from orbitmq.base.errors import CorruptionError
from orbitmq.model import (
    UniqIdGenerator,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    encode_properties,
    encode_record,
    iter_records,
    java_hash,
    offset_msg_id,
    pack_host,
    patch_record,
    tag_code,
    tags_of_expression,
)
from orbitmq.model.tags import index_key_hash

WORKED = bytes.fromhex(
    "00000064daa320a758932aac000000000000000000000000000000050000000000000"
    "3e8000000000000018bcfe568007f0000010000c3500000018bcfe5687b7f00000100"
    "002a9f00000000000000000000000000000002686901540006544147530141"
)


def _worked(**kw: int) -> bytes:
    args = dict(queue_offset=5, phys_offset=1000, store_timestamp=1700000000123)
    args.update(kw)
    return encode_record(
        topic=b"T",
        body=b"hi",
        properties=b"TAGS\x01A",
        queue_id=0,
        flag=0,
        sys_flag=0,
        born_timestamp=1700000000000,
        born_host=pack_host("127.0.0.1", 50000),
        store_host=pack_host("127.0.0.1", 10911),
        **args,
    )


def test_encode_record_matches_reference_worked_example() -> None:
    assert _worked() == WORKED


def test_patch_record_fills_store_assigned_fields() -> None:
    buf = bytearray(_worked(queue_offset=0, phys_offset=0, store_timestamp=0))
    patch_record(buf, 0, 5, 1000, 1700000000123)
    assert bytes(buf) == WORKED


def test_decode_record_round_trip_and_ids() -> None:
    m = decode_record(WORKED, check_crc=True)
    assert (m.topic, m.body, m.queue_offset, m.phys_offset, m.store_size) == ("T", b"hi", 5, 1000, 100)
    assert m.properties == {"TAGS": "A"}
    assert m.born_host == "127.0.0.1:50000" and m.store_host == "127.0.0.1:10911"
    assert m.offset_msg_id == "7F00000100002A9F00000000000003E8"
    assert m.msg_id == m.offset_msg_id
    assert [x.queue_offset for x in iter_records(WORKED + WORKED)] == [5, 5]


def test_decode_record_rejects_corruption() -> None:
    bad = bytearray(WORKED)
    bad[90] ^= 0xFF  # body byte
    with pytest.raises(CorruptionError):
        decode_record(bytes(bad), check_crc=True)
    with pytest.raises(CorruptionError):
        decode_record(WORKED[:60])
    bad = bytearray(WORKED)
    bad[4] = 0
    with pytest.raises(CorruptionError):
        decode_record(bytes(bad))


def test_ipv6_hosts_set_sysflag_bits() -> None:
    raw = encode_record(
        topic=b"T", body=b"x", properties=b"", queue_id=1, flag=0, sys_flag=0, born_timestamp=1,
        born_host=pack_host("::1", 5), store_host=pack_host("127.0.0.1", 6),
    )
    m = decode_record(raw)
    assert m.sys_flag & 0x10 and not m.sys_flag & 0x20
    assert m.born_host == "[::1]:5" and m.store_size == len(raw) == 91 + 1 + 1 + 12


def test_java_hash_and_tag_codes() -> None:
    assert java_hash("TagA") == 2598919 and java_hash("TagB") == 2598920
    assert java_hash("") == 0 and tag_code(None) == 0 and tag_code("A") == 65
    assert java_hash("polygenelubricants") == -2147483648
    assert index_key_hash("polygenelubricants") == 0
    assert java_hash("\U0001F600") == java_hash("\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16"))


def test_properties_codec_is_lenient_like_java() -> None:
    assert encode_properties({"a": "1", "b": "2"}) == "a\x011\x02b\x012"
    assert decode_properties("a\x011\x02b\x012\x02") == {"a": "1", "b": "2"}
    assert decode_properties("\x01x\x02k\x01\x02ok\x01v") == {"ok": "v"}
    assert tags_of_expression("A || B ||") == frozenset({"A", "B"})
    assert tags_of_expression("*") is None and tags_of_expression(" ") is None


def test_msg_ids() -> None:
    mid = offset_msg_id("10.0.0.1", 10911, 1 << 40)
    assert decode_offset_msg_id(mid) == ("10.0.0.1", 10911, 1 << 40)
    gen = UniqIdGenerator("127.0.0.1", seed=1)
    a, b = gen.next_id(1_700_000_000_000), gen.next_id(1_700_000_000_000)
    assert a != b and len(a) == 32 and a.upper() == a
    with pytest.raises(ValueError):
        decode_offset_msg_id("ABCD")
