"""Raft wire codec: exact round trips of every field, batch framing, and hostile input only ever raising
ProtocolError (hypothesis: arbitrary messages, truncations, bit flips, random bytes)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.base.errors import ProtocolError
from orbitmq.raft.codec import decode_batch, decode_message, encode_batch, encode_message
from orbitmq.raft.messages import Entry, Message, MsgType, Snapshot

u64 = st.integers(0, 2**64 - 1)
ids = st.text(max_size=12)
entries = st.builds(Entry, u64, u64, st.binary(max_size=40))
snapshots = st.builds(Snapshot, u64, u64, st.binary(max_size=80))


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message(
        draw(st.sampled_from(list(MsgType))), draw(ids), draw(ids), draw(u64),
        log_index=draw(u64), log_term=draw(u64), commit=draw(u64),
        entries=tuple(draw(st.lists(entries, max_size=5))), index=draw(u64), reject=draw(st.booleans()),
        context=draw(u64), snapshot=draw(st.none() | snapshots),
    )


def sample() -> Message:
    return Message(MsgType.APPEND, "n0", "n1", 7, log_index=41, log_term=6, commit=40,
                   entries=(Entry(7, 42, b"put a=1"), Entry(7, 43, b"")), index=0, reject=False, context=9)


def test_every_field_survives() -> None:
    m = sample()
    assert decode_message(encode_message(m)) == m
    snap = Message(MsgType.SNAPSHOT, "n2", "n0", 3, snapshot=Snapshot(100, 2, b"\x00state\xff"), reject=True)
    assert decode_message(encode_message(snap)) == snap
    assert decode_batch(encode_batch([m, snap, m])) == [m, snap, m]
    assert decode_batch(encode_batch([])) == []
    raw = encode_batch([m, snap])
    assert decode_batch(bytearray(raw)) == decode_batch(memoryview(raw)) == [m, snap]


def test_unrepresentable_values_are_refused_at_encode() -> None:
    with pytest.raises(ValueError):
        encode_message(Message(MsgType.VOTE, "n0", "n1", -1))
    with pytest.raises(ValueError):
        encode_message(Message(MsgType.VOTE, "n0" * 40_000, "n1", 1))


def test_hostile_counts_do_not_allocate() -> None:
    raw = bytearray(encode_message(Message(MsgType.APPEND, "a", "b", 1)))
    struct.pack_into(">I", raw, len(raw) - 4, 0xFFFFFFFF)  # entry count: 4 billion
    with pytest.raises(ProtocolError, match="entry count"):
        decode_message(bytes(raw))
    with pytest.raises(ProtocolError, match="message count"):
        decode_batch(struct.pack(">BI", 1, 0xFFFFFFFF))


def test_bad_type_flags_version_utf8_and_trailing_bytes() -> None:
    good = encode_message(sample())
    for pos, value, what in ((1, 99, "type"), (2, 0x80, "flags"), (0, 2, "version")):
        bad = bytearray(good)
        bad[pos] = value
        with pytest.raises(ProtocolError, match=what):
            decode_message(bytes(bad))
    bad = bytearray(good)
    bad[51 + 2] = 0xFF  # first byte of src ("n0") -> invalid UTF-8
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_message(bytes(bad))
    with pytest.raises(ProtocolError, match="trailing"):
        decode_message(good + b"\x00")
    with pytest.raises(ProtocolError, match="trailing"):
        decode_batch(encode_batch([sample()]) + b"x")


@settings(max_examples=200, deadline=None)
@given(st.lists(messages(), max_size=4))
def test_round_trip(msgs: list[Message]) -> None:
    for m in msgs:
        assert decode_message(encode_message(m)) == m
    assert decode_batch(encode_batch(msgs)) == msgs


@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=3), st.data())
def test_truncated_or_flipped_input_only_raises_protocol_error(msgs: list[Message], data: st.DataObject) -> None:
    raw = encode_batch(msgs)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ProtocolError):
        decode_batch(raw[:cut])
    flipped = bytearray(raw)
    pos = data.draw(st.integers(0, len(raw) - 1))
    flipped[pos] ^= 1 << data.draw(st.integers(0, 7))
    try:
        decode_batch(bytes(flipped))
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_error(raw: bytes) -> None:
    for decode in (decode_batch, decode_message):
        try:
            decode(raw)
        except ProtocolError:
            pass
