"""AutoSwitch HA frames: exact 5.1.1+ byte layouts, round trips through the incremental decoders (any split of the
stream), bounds (1000 handshake entries, body size) and garbage -> ProtocolError."""

import random
import struct

import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.replication.autoswitch_frames import (
    MAX_TRANSFER_BODY,
    Ack,
    HAState,
    MasterHandshake,
    MasterStreamDecoder,
    SlaveHandshake,
    SlaveStreamDecoder,
    TransferFrame,
    encode_ack,
    encode_master_handshake,
    encode_slave_handshake,
    encode_transfer,
)


def test_exact_layouts():
    assert encode_slave_handshake(SlaveHandshake(True, False, 7)) == struct.pack(">ihhq", 1, 1, 0, 7)
    assert len(encode_slave_handshake(SlaveHandshake(False, True, 1))) == 16
    hs = encode_master_handshake(MasterHandshake(4096, 3, ((1, 0), (3, 2048))))
    assert hs == struct.pack(">iiqi", 1, 24, 4096, 3) + struct.pack(">iq", 1, 0) + struct.pack(">iq", 3, 2048)
    assert len(hs) == 20 + 12 * 2
    tr = encode_transfer(100, 3, 64, 90, b"abc")
    assert tr == struct.pack(">iiqiqq", 2, 3, 100, 3, 64, 90) + b"abc" and len(tr) == 36 + 3
    assert encode_ack(555) == struct.pack(">iq", 2, 555) and len(encode_ack(0)) == 12
    assert [s.value for s in HAState] == [0, 1, 2, 3, 4]


def test_slave_stream_round_trip_any_split():
    items = [SlaveHandshake(False, False, 2), Ack(0), Ack(123), Ack(1 << 40)]
    stream = encode_slave_handshake(items[0]) + b"".join(encode_ack(a.max_offset) for a in items[1:])
    rnd = random.Random(1)
    for _ in range(50):
        dec = SlaveStreamDecoder()
        out = []
        pos = 0
        while pos < len(stream):
            n = rnd.randint(1, 9)
            out += dec.feed(stream[pos : pos + n])
            pos += n
        assert out == items and dec.buffered == 0


def test_master_stream_round_trip_any_split():
    hs = MasterHandshake(9000, 5, tuple((e, e * 100) for e in range(1, 6)))
    frames = [TransferFrame(500, 5, 400, 450, b"x" * 77), TransferFrame(577, 5, 400, 577, b"")]
    stream = encode_master_handshake(hs) + b"".join(
        encode_transfer(f.offset, f.epoch, f.epoch_start, f.confirm_offset, f.data) for f in frames)
    rnd = random.Random(2)
    for _ in range(50):
        dec = MasterStreamDecoder()
        out = []
        pos = 0
        while pos < len(stream):
            n = rnd.randint(1, 40)
            out += dec.feed(stream[pos : pos + n])
            pos += n
        assert out == [hs, *frames]
    assert frames[1].is_heartbeat and not frames[0].is_heartbeat


def test_handshake_entry_bound():
    entries = tuple((e, e) for e in range(1, 1001))
    dec = MasterStreamDecoder()
    assert dec.feed(encode_master_handshake(MasterHandshake(2000, 1000, entries)))[0].entries == entries
    with pytest.raises(ValueError):
        encode_master_handshake(MasterHandshake(0, 1, tuple((e, e) for e in range(1, 1002))))
    with pytest.raises(ProtocolError):  # announced body of 1001 entries
        MasterStreamDecoder().feed(struct.pack(">iiqi", 1, 12 * 1001, 0, 1))
    with pytest.raises(ProtocolError):  # not a multiple of 12
        MasterStreamDecoder().feed(struct.pack(">iiqi", 1, 13, 0, 1))


@pytest.mark.parametrize("raw", [
    struct.pack(">iiqiqq", 2, MAX_TRANSFER_BODY + 1, 0, 1, 0, 0),  # body too large
    struct.pack(">iiqiqq", 2, -1, 0, 1, 0, 0),  # negative size
    struct.pack(">iiqiqq", 2, 0, -5, 1, 0, 0),  # negative offset
    struct.pack(">iiqiqq", 2, 0, 10, 1, 20, 0),  # epoch starts after the frame
    struct.pack(">iiqi", 1, 24, 0, 2) + struct.pack(">iq", 2, 0) + struct.pack(">iq", 1, 10),  # epochs go back
    struct.pack(">i", 9) + bytes(40),  # unknown state
    struct.pack(">i", 0) + bytes(40),  # READY is never sent
])
def test_master_stream_garbage(raw):
    with pytest.raises(ProtocolError):
        MasterStreamDecoder().feed(raw)


@pytest.mark.parametrize("raw", [
    struct.pack(">ihhq", 1, 2, 0, 1),  # flag not 0/1
    struct.pack(">ihhq", 1, 0, 0, -1),  # negative broker id
    struct.pack(">iq", 2, -1),  # negative ack
    struct.pack(">iq", 4, 0),  # SHUTDOWN
])
def test_slave_stream_garbage(raw):
    with pytest.raises(ProtocolError):
        SlaveStreamDecoder().feed(raw)


def test_fuzz_decoders_raise_only_protocol_errors():
    rnd = random.Random(3)
    valid_master = encode_master_handshake(MasterHandshake(100, 2, ((1, 0), (2, 50)))) + encode_transfer(
        50, 2, 50, 50, b"z" * 10)
    valid_slave = encode_slave_handshake(SlaveHandshake(True, True, 3)) + encode_ack(60)
    for _ in range(2000):
        for dec_cls, base in ((MasterStreamDecoder, valid_master), (SlaveStreamDecoder, valid_slave)):
            data = bytearray(base)
            for _ in range(rnd.randint(1, 4)):  # flip, cut or splice random bytes
                i = rnd.randrange(len(data))
                data[i] = rnd.randrange(256)
            if rnd.random() < 0.3:
                data = data[: rnd.randrange(len(data))] + bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 20)))
            try:
                dec_cls().feed(bytes(data))
            except ProtocolError:
                pass
