"""Hypothesis: every native twin in orbitmq.base._speedups gives exactly what its pure-Python twin gives (same
value, same bytes written, same exception type) on the same generated inputs. Skipped when the extension was not
built (the Python twins are then the only code path)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from orbitmq.base.errors import CorruptionError
from orbitmq.model import record as record_mod
from orbitmq.model.properties import decode_properties_py, encode_properties
from orbitmq.model.record import decode_record_py, encode_record_into_py, pack_host
from orbitmq.model.tags import java_hash_py

native = pytest.importorskip("orbitmq.base._speedups")


@pytest.fixture(autouse=True, scope="module")
def _native_bound():
    """decode_record_native / iter_records_native call the extension through module globals that record.py binds
    only when it uses the extension: bind them here too, so the twins are compared under ORBITMQ_PURE_PYTHON=1."""
    names = {"_decode_v4": native.decode_record_v4, "_decode_many": native.decode_records_v4}
    saved = {k: getattr(record_mod, k) for k in names if hasattr(record_mod, k)}
    for k, v in names.items():
        setattr(record_mod, k, v)
    yield
    for k in names:
        if k in saved:
            setattr(record_mod, k, saved[k])
        else:
            delattr(record_mod, k)

_HOSTS = [("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 10911), ("fe80::1", 7), ("192.168.7.9", 0)]
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_any_int = st.one_of(_i32, _i64, st.integers(-(2**70), 2**70))


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as e:  # compared by type: the twins must fail alike
        return "raised", type(e)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=5000), skip=st.integers(0, 9))
def test_crc32_is_zlib_crc32(data, skip) -> None:
    view = memoryview(data)[skip:]  # unaligned starts exercise the byte-wise head loop
    assert native.crc32(view) == zlib.crc32(view)


@settings(max_examples=500, deadline=None)
@given(s=st.one_of(st.text(max_size=40), st.text(max_size=700), st.text(alphabet="ab\u00e9\u4e2d\U0001f600")))
def test_java_hash_twins(s) -> None:
    assert _outcome(native.java_hash, s) == _outcome(java_hash_py, s)


def test_java_hash_known_values_and_lone_surrogate() -> None:
    assert native.java_hash("") == 0
    assert native.java_hash("abc") == 96354  # Java "abc".hashCode()
    assert native.java_hash("\U0001f600") == java_hash_py("\U0001f600") == 0xD83D * 31 + 0xDE00
    with pytest.raises(UnicodeEncodeError):
        native.java_hash("a\ud800b")
    with pytest.raises(UnicodeEncodeError):
        java_hash_py("a\ud800b")


_prop_text = st.text(alphabet=st.sampled_from(["\x01", "\x02", "a", "b", "=", "é", "中", "\U0001f600", " "]),
                     max_size=60)


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.none(), _prop_text, st.text(max_size=80)))
def test_decode_properties_twins(text) -> None:
    a, b = native.decode_properties(text), decode_properties_py(text)
    assert list(a.items()) == list(b.items())  # same pairs, same order


@settings(max_examples=300, deadline=None)
@given(
    topic=st.binary(max_size=130),
    body=st.binary(max_size=1500),
    props=st.binary(max_size=200) | st.just(b"p" * 32768),
    ints=st.tuples(_i32, _i32, _i32, _i64, _i32, _i64, _i64, _i64, _i64),
    wild=st.tuples(_any_int, st.integers(0, 8)),
    hosts=st.tuples(st.sampled_from(_HOSTS), st.sampled_from(_HOSTS)),
    crc=st.none() | _i32,
    pos=st.integers(0, 64),
    slack=st.integers(-8, 16),
    bytearray_buf=st.booleans(),
)
def test_encode_record_into_twins(topic, body, props, ints, wild, hosts, crc, pos, slack, bytearray_buf) -> None:
    ints = list(ints)
    value, slot = wild
    ints[slot] = value  # sometimes a field out of its Java range: both must raise struct.error
    born, store = pack_host(*hosts[0]), pack_host(*hosts[1])
    size = 48 + len(born) + 8 + len(store) + 16 + len(body) + 1 + len(topic) + 2 + len(props)
    n = max(0, pos + size + slack)
    bufs = [bytearray(b"\xee" * n) for _ in range(2)]
    targets = bufs if bytearray_buf else [memoryview(b) for b in bufs]
    q, f, sf, bts, rt, pto, qo, po, sts = ints
    results = [
        _outcome(fn, t, pos, topic, body, props, q, f, sf, bts, born, store, rt, pto, qo, po, sts, crc)
        for fn, t in ((native.encode_record_into, targets[0]), (encode_record_into_py, targets[1]))
    ]
    assert results[0] == results[1]
    assert bufs[0] == bufs[1]  # same bytes written, or nothing at all on an error
    if results[0][0] == "ok":
        assert results[0][1] == size


def _records(draw) -> tuple[bytes, int]:
    props = draw(st.dictionaries(st.text("abcKEYS_", min_size=1, max_size=8), st.text("xyz é", min_size=1,
                                                                                        max_size=8), max_size=4))
    born, store = draw(st.sampled_from(_HOSTS)), draw(st.sampled_from(_HOSTS))
    buf = bytearray(4096)
    n = encode_record_into_py(
        buf, 0, draw(st.text("abcT%-", min_size=1, max_size=20)).encode(), draw(st.binary(max_size=300)),
        encode_properties(props).encode(), draw(_i32), draw(_i32), draw(st.integers(0, 255)), draw(_i64),
        pack_host(*born), pack_host(*store), draw(_i32), draw(_i64), draw(_i64), draw(_i64), draw(_i64), None,
    )
    return bytes(buf[:n]), n


@st.composite
def _damaged_buffer(draw) -> tuple[bytes, int]:
    rec, _n = _records(draw)
    lead = draw(st.binary(max_size=12))
    raw = bytearray(lead + rec + draw(st.binary(max_size=12)))
    for _ in range(draw(st.integers(0, 3))):  # flip some bytes (header fields, lengths, body, text)
        i = draw(st.integers(0, len(raw) - 1))
        raw[i] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(raw)))
    if draw(st.booleans()):
        raw = raw[:cut]
    return bytes(raw), len(lead)


def _decode_outcome(fn, buf, pos, check_crc):
    try:
        return "ok", fn(buf, pos, check_crc=check_crc)
    except CorruptionError as e:
        return "corrupt", str(e)


@settings(max_examples=400, deadline=None)
@given(case=_damaged_buffer(), check_crc=st.booleans(), cold_memo=st.booleans(), as_view=st.booleans())
def test_decode_record_twins(case, check_crc, cold_memo, as_view) -> None:
    buf, pos = case
    assume(pos <= len(buf))
    if cold_memo:
        record_mod._HOST_TEXT.clear()
    src = memoryview(buf) if as_view else buf
    orig = record_mod.decode_properties
    record_mod.decode_properties = decode_properties_py  # the reference is pure Python all the way down
    try:
        want = _decode_outcome(decode_record_py, src, pos, check_crc)
        got = _decode_outcome(record_mod.decode_record_native, src, pos, check_crc)
        got_warm = _decode_outcome(record_mod.decode_record_native, src, pos, check_crc)  # memo filled now
    finally:
        record_mod.decode_properties = orig
    event(want[0])
    assert got == want
    assert got_warm == want


def test_encode_record_into_rejects_what_struct_rejects() -> None:
    buf = bytearray(2048)
    h = pack_host("127.0.0.1", 1)
    args = [buf, 0, b"T", b"b", b"", 2**31, 0, 0, 0, h, h, 0, 0, 0, 0, 0, None]
    with pytest.raises(struct.error):
        native.encode_record_into(*args)
    with pytest.raises(struct.error):
        encode_record_into_py(*args)
    with pytest.raises(TypeError):
        native.encode_record_into(*args[:5])


@settings(max_examples=400, deadline=None)
@given(
    slot_num=st.integers(1, 64),
    index_num=st.integers(1, 64),
    n=st.integers(0, 70),
    key_hash=_i32,
    phys=_i64,
    times=st.tuples(_i64, _i64),
    begin_phys=_i64,
    slot_count=st.integers(0, 2**31 - 2),
    prefill=st.binary(min_size=0, max_size=4),
    as_view=st.booleans(),
)
def test_index_put_twins(slot_num, index_num, n, key_hash, phys, times, begin_phys, slot_count, prefill,
                         as_view) -> None:
    from orbitmq.store.index_file import index_file_size, index_put_py

    size = index_file_size(slot_num, index_num)
    entries_at = 40 + slot_num * 4
    base = bytearray(size)
    if prefill:  # a slot that already points somewhere (a chain head, or junk)
        slot_pos = 40 + (key_hash % slot_num) * 4
        base[slot_pos : slot_pos + len(prefill)] = prefill[: size - slot_pos]
    bufs = [bytearray(base), bytearray(base)]
    targets = [memoryview(b) for b in bufs] if as_view else bufs
    store_ts, begin_ts = times
    args = (entries_at, slot_num, n, key_hash, phys, store_ts, begin_ts, begin_phys, slot_count)
    assert _outcome(native.index_put, targets[0], *args) == _outcome(index_put_py, targets[1], *args)
    assert bufs[0] == bufs[1]


@st.composite
def _record_stream(draw) -> bytes:
    """Several records back to back (IPv4 and IPv6 hosts), sometimes damaged or cut, as a pull body."""
    raw = bytearray()
    for _ in range(draw(st.integers(0, 5))):
        rec, _n = _records(draw)
        raw += rec
    if raw and draw(st.booleans()):
        i = draw(st.integers(0, len(raw) - 1))
        raw[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        raw = raw[: draw(st.integers(0, len(raw)))]
    return bytes(raw)


def _drain(it):
    out = []
    try:
        for m in it:
            out.append(m)
    except CorruptionError as e:
        out.append(("corrupt", str(e)))
    return out


@settings(max_examples=300, deadline=None)
@given(body=_record_stream(), cold_memo=st.booleans())
def test_iter_records_twins(body, cold_memo) -> None:
    if cold_memo:
        record_mod._HOST_TEXT.clear()
    saved = record_mod.decode_properties, record_mod.decode_record
    record_mod.decode_properties, record_mod.decode_record = decode_properties_py, decode_record_py
    try:
        want = _drain(record_mod.iter_records_py(body))
        got = _drain(record_mod.iter_records_native(body))
    finally:
        record_mod.decode_properties, record_mod.decode_record = saved
    event(f"{len(want)} items, error={bool(want) and isinstance(want[-1], tuple)}")
    assert got == want


@st.composite
def _batch_body(draw) -> bytes:
    """A SEND_BATCH_MESSAGE body (records of 5 ints, body, short-prefixed UTF-8 properties), sometimes with a
    wrong size field, invalid UTF-8, a flipped byte or cut short."""
    raw = bytearray()
    for _ in range(draw(st.integers(0, 5))):
        body = draw(st.binary(max_size=300))
        props = draw(st.one_of(_prop_text, st.text(max_size=40))).encode("utf-8", "surrogatepass")
        if draw(st.integers(0, 9)) == 0:
            props += b"\xff"  # not UTF-8
        total = 20 + len(body) + 2 + len(props) + (draw(st.sampled_from([1, -1])) if draw(st.integers(0, 9)) == 0 else 0)
        raw += struct.pack(">iiiii", total, 0, zlib.crc32(body) & 0x7FFFFFFF, draw(_i32), len(body)) + body
        raw += struct.pack(">h", len(props)) + props
    if raw and draw(st.integers(0, 3)) == 0:
        i = draw(st.integers(0, len(raw) - 1))
        raw[i] = draw(st.integers(0, 255))
    if draw(st.integers(0, 3)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return bytes(raw)


@settings(max_examples=400, deadline=None)
@given(body=_batch_body(), as_view=st.booleans())
def test_split_batch_body_twins(body, as_view) -> None:
    from orbitmq.broker.handlers.send import decode_batch_body_py

    arg = memoryview(body) if as_view else body
    want = _outcome(decode_batch_body_py, arg)
    got = native.split_batch_body(arg)
    event(f"{want[0]}, {len(want[1]) if want[0] == 'ok' else 0} records")
    if want[0] == "ok":
        assert got == want[1]
        assert all(type(b) is bytes and type(p) is str for _f, b, p in got)
    else:
        assert want[1] is ValueError or issubclass(want[1], ValueError)
        assert got is None


@st.composite
def _run_msg(draw):
    from orbitmq.store.results import MessageInner

    ints = [draw(_i32), draw(st.integers(0, 0x3F) | _i32), draw(_i64), draw(_i32), draw(_i64)]
    if draw(st.integers(0, 7)) == 0:
        ints[draw(st.integers(0, 4))] = draw(_any_int)  # a field out of its Java range
    flag, sys_flag, born_ts, reconsume, prepared = ints
    return MessageInner("T", 0, draw(st.binary(max_size=200)), {}, flag, sys_flag, born_ts, "", "", reconsume,
                        prepared)


@settings(max_examples=300, deadline=None)
@given(
    msgs=st.lists(_run_msg(), max_size=5),
    props=st.lists(st.binary(max_size=60) | st.just(b"p" * 32768), min_size=5, max_size=5),
    topic=st.binary(max_size=130),
    hosts=st.tuples(st.sampled_from(_HOSTS), st.sampled_from(_HOSTS)),
    ints=st.tuples(_i32, _i64 | st.integers(2**63 - 3, 2**63 - 1), st.integers(0, 2**40) | _i64
                   | st.integers(2**63 - 300, 2**63 - 1), _i64),
    pos=st.integers(0, 64),
    slack=st.integers(-300, 64),
    prefix=st.sampled_from(["7F00000100002A9F", "", "é1"]),
    bytearray_buf=st.booleans(),
    short_props=st.booleans(),
)
def test_encode_run_into_twins(msgs, props, topic, hosts, ints, pos, slack, prefix, bytearray_buf,
                               short_props) -> None:
    born, store = pack_host(*hosts[0]), pack_host(*hosts[1])
    props = props[: len(msgs) - 1 if short_props and msgs else len(msgs)]
    queue_id, queue_offset, seg_base, store_ts = ints
    fixed = 48 + len(born) + 8 + len(store) + 16 + 1 + len(topic) + 2
    need = sum(fixed + len(m.body) + len(p) for m, p in zip(msgs, props, strict=False))
    n = max(0, pos + need + slack)
    bufs = [bytearray(b"\xee" * n) for _ in range(2)]
    targets = bufs if bytearray_buf else [memoryview(b) for b in bufs]
    results = [
        _outcome(fn, t, pos, topic, born, store, queue_id, queue_offset, seg_base, store_ts, msgs, props, prefix)
        for fn, t in ((native.encode_run_into, targets[0]), (record_mod.encode_run_into_py, targets[1]))
    ]
    event(f"{results[0][0]}")
    assert results[0] == results[1]
    assert bufs[0] == bufs[1]  # the same records written (up to a failing one)


@settings(max_examples=300, deadline=None)
@given(
    topic=st.text(max_size=30) | st.sampled_from(["T", "%RETRY%G", "Topic-\u00e9"]),
    key=st.text(max_size=40) | st.text("0123456789ABCDEF", min_size=32, max_size=32),
    n=st.integers(0, 20),
    phys=_i64,
    times=st.tuples(_i64, _i64),
    slot_count=st.integers(0, 2**31 - 2),  # as in test_index_put_twins (a refused header: partial writes differ)
    as_view=st.booleans(),
)
def test_index_put_key_twins(topic, key, n, phys, times, slot_count, as_view) -> None:
    from orbitmq.store.index_file import index_file_size, index_put_key_py

    slot_num, index_num = 16, 16
    bufs = [bytearray(index_file_size(slot_num, index_num)) for _ in range(2)]
    targets = [memoryview(b) for b in bufs] if as_view else bufs
    store_ts, begin_ts = times
    args = (40 + slot_num * 4, slot_num, n, topic, key, phys, store_ts, begin_ts, 7, slot_count)
    want = _outcome(index_put_key_py, targets[1], *args)
    event(want[0])
    assert _outcome(native.index_put_key, targets[0], *args) == want
    assert bufs[0] == bufs[1]


class _Plain:
    """Not slotted: new_slotted falls back to calling it."""

    def __init__(self, a: object, b: object) -> None:
        self.a, self.b = a, b


_values = st.one_of(st.integers(), st.text(max_size=5), st.binary(max_size=5), st.none(),
                    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.lists(_values, min_size=11, max_size=11), _values, _values)
def test_new_slotted_equals_calling_the_class(fields: list[object], code: object, frame: object) -> None:
    """new_slotted(cls, *values) builds what cls(*values) builds: a slotted dataclass with every field given, a
    slotted class whose __init__ assigns its slots, a dataclass given fewer values (its defaults: the call) and a
    class without slots (the call)."""
    from orbitmq.protocol.frame import EncodedResponse
    from orbitmq.store.results import MessageInner

    assert native.new_slotted(MessageInner, *fields) == MessageInner(*fields)
    got, want = native.new_slotted(EncodedResponse, code, frame), EncodedResponse(code, frame)  # type: ignore[arg-type]
    assert (type(got), got.code, got.frame) == (type(want), want.code, want.frame)
    assert native.new_slotted(MessageInner, *fields[:4]) == MessageInner(*fields[:4])  # type: ignore[arg-type]
    plain = native.new_slotted(_Plain, code, frame)
    assert (type(plain), plain.a, plain.b) == (_Plain, code, frame)
    with pytest.raises(TypeError):
        native.new_slotted(MessageInner, *fields, 1)  # one too many: what the call raises
