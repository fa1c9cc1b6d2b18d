"""The fast forms of java_hash, encode_properties and unpack_host give exactly what the plain forms give."""

import random

from orbitmq.model.properties import decode_properties, encode_properties
from orbitmq.model.record import pack_host_port, unpack_host
from orbitmq.model.tags import index_key_hash, java_hash


def reference_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def test_java_hash_matches_the_reference_loop_for_all_lengths_and_alphabets():
    rnd = random.Random(7)
    for n in [*range(0, 70), 200, 511, 512, 513, 1000]:
        for alphabet in ("abcXYZ019#%", "aé中\u0000\uffff", "x😀y"):  # ASCII, BMP, astral (surrogate pairs)
            s = "".join(rnd.choice(alphabet) for _ in range(n))
            assert java_hash(s) == reference_hash(s), (n, s[:20])
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -2147483648  # Java's Integer.MIN_VALUE hash
    assert index_key_hash("polygenelubricants") == 0


def test_encode_properties_fast_path_and_fallback_agree():
    props = {"UNIQ_KEY": "AB", "TAGS": "t", "KEYS": "k1 k2"}
    assert encode_properties(props) == "UNIQ_KEY\x01AB\x02TAGS\x01t\x02KEYS\x01k1 k2"
    assert decode_properties(encode_properties(props)) == props
    assert encode_properties({"A": "1", "B": None, "C": "3"}) == "A\x011\x02C\x013"  # None skipped
    assert encode_properties({"A": 1, "B": True}) == "A\x011\x02B\x01True"  # non-str formatted
    assert encode_properties({}) == "" and encode_properties(None) == ""


def test_unpack_host_is_stable_across_repeated_calls():
    for hp in ("127.0.0.1:10911", "10.1.2.3:1", "[::1]:9876", "[fe80::1]:65535"):
        raw = pack_host_port(hp.replace("[", "").replace("]", "") if hp.startswith("[") else hp)
        first = unpack_host(raw)
        assert unpack_host(memoryview(raw)) == first == unpack_host(bytes(raw))
    assert unpack_host(pack_host_port("127.0.0.1:10911")) == "127.0.0.1:10911"
    assert unpack_host(pack_host_port("::1:9876")) == "[::1]:9876"


def test_decode_record_fast_path_equals_the_general_decoder():
    from orbitmq.model.record import _decode_record_general, decode_record, encode_record

    rnd = random.Random(3)
    records = []
    for i in range(60):
        born = "127.0.0.1:5555" if i % 3 else "::1:7"
        store = "10.0.0.2:10911" if i % 4 else "fe80::2:10911"
        props = {"UNIQ_KEY": f"K{i}", "TAGS": "é" * (i % 3)} if i % 5 else {}
        records.append(encode_record(
            topic=f"Topic{i}".encode(), body=rnd.randbytes(rnd.randrange(0, 300)),
            properties=encode_properties(props).encode(), queue_id=i % 4, flag=i, sys_flag=i & 0x3,
            born_timestamp=1_700_000_000_000 + i, born_host=pack_host_port(born),
            store_host=pack_host_port(store), reconsume_times=i % 2, prepared_transaction_offset=i * 7,
            queue_offset=i, phys_offset=i * 1000, store_timestamp=1_700_000_000_500 + i))
    blob = b"".join(records)
    for buf in (blob, bytearray(blob), memoryview(blob)):
        pos = 0
        while pos < len(blob):
            fast = decode_record(buf, pos, check_crc=True)
            assert fast == _decode_record_general(buf, pos, True)
            pos += fast.store_size

