"""Hypothesis round trips: both header serializations, frames split at arbitrary chunk boundaries."""

from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.model import MessageQueue
from orbitmq.protocol import FrameDecoder, LanguageCode, RemotingCommand, encode_frame, fastjson
from orbitmq.protocol.header_binary import decode_binary_header, encode_binary_header
from orbitmq.protocol.header_json import decode_json_header, encode_json_header

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(max_size=40)
nonempty = st.text(min_size=1, max_size=20)
langs = st.sampled_from([lc.name for lc in LanguageCode])
ext = st.none() | st.dictionaries(nonempty, nonempty, max_size=6)


@st.composite
def commands(draw, serialize_type=None):
    stype = draw(st.sampled_from([0, 1])) if serialize_type is None else serialize_type
    return RemotingCommand(
        draw(i16),
        language=draw(langs),
        version=draw(i16),
        opaque=draw(i32),
        flag=draw(st.integers(0, 3)),
        remark=draw(st.none() | nonempty),
        ext_fields=draw(ext),
        body=draw(st.none() | st.binary(min_size=1, max_size=64)),
        serialize_type=stype,
    )


@settings(max_examples=200, deadline=None)
@given(commands(serialize_type=0), text)
def test_json_header_round_trip(cmd, remark):
    cmd.remark = remark if remark else cmd.remark  # "" must survive JSON too
    back = decode_json_header(encode_json_header(cmd), cmd.body)
    assert back == cmd


@settings(max_examples=200, deadline=None)
@given(commands(serialize_type=1))
def test_binary_header_round_trip(cmd):
    back = decode_binary_header(encode_binary_header(cmd), cmd.body)
    if cmd.ext_fields == {}:
        cmd.ext_fields = None  # zero ext length decodes as "no extFields"
    assert back == cmd


@settings(max_examples=100, deadline=None)
@given(st.lists(commands(), min_size=1, max_size=6), st.data())
def test_frames_survive_any_chunking(cmds, data):
    stream = b"".join(encode_frame(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    dec = FrameDecoder()
    out = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    for c in cmds:
        if c.serialize_type == 1 and c.ext_fields == {}:
            c.ext_fields = None
    assert out == cmds
    assert dec.buffered == 0


json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10)
json_values = st.recursive(
    json_leaf,
    lambda kids: st.lists(kids, max_size=4)
    | st.dictionaries(st.text(max_size=6) | st.integers(-1000, 1000), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_fastjson_round_trip_with_int_keys(value):
    assert fastjson.loads(fastjson.dumps(value)) == value


mqs = st.builds(MessageQueue, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8),
                st.integers(0, 64))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(mqs, st.integers(-(2**63), 2**63 - 1), max_size=6))
def test_fastjson_message_queue_keys_round_trip(table):
    raw = fastjson.dumps({"offsetTable": table})
    assert b" " not in raw or any(" " in (mq.topic + mq.broker_name) for mq in table)
    assert fastjson.loads(raw) == {"offsetTable": table}


_ext_any = st.none() | st.dictionaries(nonempty, st.none() | st.booleans() | i32 | nonempty, max_size=5)


@settings(max_examples=300, deadline=None)
@given(commands(serialize_type=0), _ext_any, st.none() | text)
def test_json_header_bytes_are_sorted_compact_json_of_the_fields(cmd, ext_fields, remark):
    """Every command shape (with or without extFields/remark, non-str ext values) encodes to the same bytes:
    keys sorted at both levels, ext values as Java strings, null ext values and a null remark left out."""
    import orjson

    from orbitmq.protocol.header_json import ext_value_to_str

    cmd.ext_fields, cmd.remark = ext_fields, remark
    want: dict = {"code": cmd.code, "flag": cmd.flag, "language": cmd.language, "opaque": cmd.opaque,
                  "serializeTypeCurrentRPC": "JSON", "version": cmd.version}
    if ext_fields is not None:
        want["extFields"] = {k: ext_value_to_str(v) for k, v in ext_fields.items() if v is not None}
    if remark is not None:
        want["remark"] = remark
    assert encode_json_header(cmd) == orjson.dumps(want, option=orjson.OPT_SORT_KEYS)
