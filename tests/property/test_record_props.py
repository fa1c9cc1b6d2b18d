"""Hypothesis: any message survives encode → decode; properties survive encode → decode."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.model import decode_properties, decode_record, encode_properties, encode_record, pack_host

_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=20)
_topic = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC%|_-0123456789", min_size=1, max_size=127)
_hosts = st.sampled_from([("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 10911), ("fe80::1", 7)])


@settings(max_examples=200, deadline=None)
@given(
    topic=_topic,
    body=st.binary(max_size=2000),
    props=st.dictionaries(_text, _text, max_size=6),
    queue_id=st.integers(0, 1023),
    flag=st.integers(-(2**31), 2**31 - 1),
    born=_hosts,
    store=_hosts,
    ts=st.integers(0, 2**62),
    qoff=st.integers(0, 2**62),
    poff=st.integers(0, 2**62),
)
def test_record_round_trip(topic, body, props, queue_id, flag, born, store, ts, qoff, poff) -> None:
    raw = encode_record(
        topic=topic.encode(), body=body, properties=encode_properties(props).encode(), queue_id=queue_id,
        flag=flag, sys_flag=0, born_timestamp=ts, born_host=pack_host(*born), store_host=pack_host(*store),
        queue_offset=qoff, phys_offset=poff, store_timestamp=ts,
    )
    m = decode_record(raw, check_crc=True)
    assert (m.topic, m.body, m.properties, m.queue_id, m.flag) == (topic, body, props, queue_id, flag)
    assert (m.queue_offset, m.phys_offset, m.store_timestamp, m.store_size) == (qoff, poff, ts, len(raw))


@given(st.dictionaries(_text, _text, max_size=8))
def test_properties_round_trip(props) -> None:
    assert decode_properties(encode_properties(props)) == props
