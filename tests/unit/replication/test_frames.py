"""HA frames: report and data frame round trips, partial feeds, bad headers."""

import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.replication.frames import (
    DATA_HEADER_SIZE,
    DataDecoder,
    ReportDecoder,
    encode_data,
    encode_report,
)


def test_report_is_an_eight_byte_big_endian_long():
    assert encode_report(0x0102030405060708) == bytes.fromhex("0102030405060708")


def test_report_decoder_keeps_last_complete_value_across_partial_feeds():
    d = ReportDecoder()
    stream = encode_report(10) + encode_report(20) + encode_report(30)
    assert d.feed(stream[:5]) is None
    assert d.feed(stream[5:19]) == 20  # 19 bytes: two complete longs, 3 bytes of the third
    assert d.feed(stream[19:]) == 30


def test_report_decoder_rejects_negative_offsets():
    with pytest.raises(ProtocolError):
        ReportDecoder().feed(encode_report(-1))


def test_data_frame_layout_is_offset_size_epoch_then_bytes():
    raw = encode_data(4096, 7, b"abc")
    assert DATA_HEADER_SIZE == 16
    assert raw == (4096).to_bytes(8, "big") + (3).to_bytes(4, "big") + (7).to_bytes(4, "big") + b"abc"


def test_data_decoder_splits_frames_fed_byte_by_byte():
    stream = encode_data(0, 1, b"hello") + encode_data(5, 1) + encode_data(5, 2, b"x" * 100)
    d = DataDecoder()
    frames = []
    for i in range(len(stream)):
        frames += d.feed(stream[i : i + 1])
    assert [(f.phys_offset, f.epoch, f.data) for f in frames] == [(0, 1, b"hello"), (5, 1, b""), (5, 2, b"x" * 100)]
    assert frames[1].is_heartbeat and not frames[0].is_heartbeat
    assert d.buffered == 0


def test_data_decoder_rejects_a_negative_size():
    bad = (0).to_bytes(8, "big") + (-5).to_bytes(4, "big", signed=True) + (1).to_bytes(4, "big")
    with pytest.raises(ProtocolError):
        DataDecoder().feed(bad)
