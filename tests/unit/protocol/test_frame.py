"""FrameDecoder edge cases: partial frames, many frames per chunk, and every rejection rule."""

import struct

import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.protocol import FrameDecoder, RemotingCommand, encode_frame


def _cmds(n, stype=0, body=b"payload"):
    return [RemotingCommand(10, opaque=i, ext_fields={"i": str(i)}, body=body, serialize_type=stype)
            for i in range(n)]


def test_body_and_header_lengths_are_consistent():
    cmd = RemotingCommand(10, opaque=1, body=b"xyz")
    frame = encode_frame(cmd)
    length, word = struct.unpack(">iI", frame[:8])
    assert length == len(frame) - 4
    hlen = word & 0xFFFFFF
    assert frame[8 + hlen:] == b"xyz"


@pytest.mark.parametrize("stype", [0, 1])
def test_many_frames_in_one_chunk(stype):
    cmds = _cmds(50, stype)
    out = FrameDecoder().feed(b"".join(encode_frame(c) for c in cmds))
    assert out == cmds


@pytest.mark.parametrize("stype", [0, 1])
def test_byte_by_byte_feed(stype):
    cmds = _cmds(3, stype)
    data = b"".join(encode_frame(c) for c in cmds)
    dec = FrameDecoder()
    out = []
    for i in range(len(data)):
        out += dec.feed(data[i:i + 1])
    assert out == cmds
    assert dec.buffered == 0


def test_partial_then_rest_with_next_frame_start():
    a, b = _cmds(2)
    fa, fb = encode_frame(a), encode_frame(b)
    dec = FrameDecoder()
    assert dec.feed(fa[:10]) == []
    assert dec.feed(fa[10:] + fb[:3]) == [a]
    assert dec.buffered == 3
    assert dec.feed(memoryview(fb[3:])) == [b]


def test_empty_body_decodes_as_none():
    (cmd,) = FrameDecoder().feed(encode_frame(RemotingCommand(1, body=b"")))
    assert cmd.body is None


def test_rejects_length_below_4():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", 3) + b"\x00\x00\x00")
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", -1))


def test_rejects_header_length_beyond_frame():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">iI", 10, 7) + b"{}" + b"\x00" * 4)


def test_rejects_oversized_frame_before_buffering_it():
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(ProtocolError):
        dec.feed(struct.pack(">i", 1021))  # 1021 + 4 > 1024
    ok = encode_frame(RemotingCommand(1, body=b"x" * 100))
    assert len(FrameDecoder(max_frame_size=1024).feed(ok)) == 1


def test_default_limit_is_16_mib():
    dec = FrameDecoder()
    assert dec.max_frame_size == 16 * 1024 * 1024
    with pytest.raises(ProtocolError):
        dec.feed(struct.pack(">i", 16 * 1024 * 1024 - 3))


def test_rejects_undecodable_header_and_unknown_serialize_type():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">iI", 4 + 5, 5) + b"nope!")
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">iI", 4 + 2, (7 << 24) | 2) + b"{}")
    with pytest.raises(ProtocolError):  # binary type with a 3-byte header
        FrameDecoder().feed(struct.pack(">iI", 4 + 3, (1 << 24) | 3) + b"abc")


def test_cpp_style_frame_type_byte_zero_is_plain_json():
    # rocketmq-client-cpp reads the whole 4-byte word as header length: our JSON frames have type 0.
    frame = encode_frame(RemotingCommand(34, body=b"{}"))
    word = struct.unpack(">I", frame[4:8])[0]
    assert word >> 24 == 0
    assert word == len(frame) - 8 - 2


def test_error_keeps_the_good_frames_that_preceded_it():
    good = RemotingCommand(10, opaque=4)
    dec = FrameDecoder()
    with pytest.raises(ProtocolError) as ei:
        dec.feed(encode_frame(good) + struct.pack(">i", 2))
    assert ei.value.frames == [good]
