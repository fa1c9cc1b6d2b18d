"""On-disk format sizes and codecs of store/layout.py and store/checkpoint.py."""

import struct
import zlib

from orbitmq.model.record import BLANK_MAGIC
from orbitmq.store import layout
from orbitmq.store.checkpoint import Checkpoint, CheckpointFile, EpochFile
from orbitmq.testing.sim_disk import SimDisk


def test_format_sizes():
    assert struct.calcsize(layout.CQ_ENTRY.format) == 20 == layout.CQ_ENTRY_SIZE
    assert layout.INDEX_HEADER.size == 40
    assert layout.INDEX_ENTRY.size == 20
    assert layout.INDEX_SLOT.size == 4
    assert layout.CHECKPOINT.size == 40
    assert layout.BLANK.size == 8
    assert layout.CHECKPOINT_FILE_SIZE == 4096


def test_blank_filler_bytes():
    assert layout.BLANK.pack(100, BLANK_MAGIC) == bytes.fromhex("00000064CBD43194")


def test_cq_entry_matches_reference_example():
    # reference §4.1 worked example: CQ entry (1000, 100, 65)
    assert layout.CQ_ENTRY.pack(1000, 100, 65).hex() == "00000000000003e8" "00000064" "0000000000000041"


def test_segment_names():
    assert layout.segment_name(0) == "00000000000000000000"
    assert layout.segment_name(1073741824) == "00000000001073741824"
    assert layout.parse_segment_name("00000000001073741824") == 1073741824
    assert layout.parse_segment_name("00000000001073741824.tmp") is None
    assert layout.parse_segment_name("abc") is None


def test_checkpoint_round_trip_and_torn_detection():
    cp = Checkpoint(1, 2, 3, 4, 5)
    data = cp.encode()
    assert len(data) == 4096 and data[:8] == struct.pack(">q", 1)
    assert Checkpoint.decode(data) == cp
    torn = bytearray(data)
    torn[9] ^= 0x01
    assert Checkpoint.decode(bytes(torn)) is None
    assert Checkpoint.decode(data[:20]) is None
    # a Java-written page has no CRC: accepted when not all zero
    java = struct.pack(">qqq", 10, 20, 30) + bytes(4096 - 24)
    assert Checkpoint.decode(java) == Checkpoint(10, 20, 30, 0, 0)


def test_checkpoint_min_timestamp():
    cp = Checkpoint(physic_msg_timestamp=10_000, logics_msg_timestamp=8_000, index_msg_timestamp=4_000)
    assert cp.min_timestamp(False) == 5_000
    assert cp.min_timestamp(True) == 4_000
    assert Checkpoint(1000, 1000, 0).min_timestamp(False) == 0


def test_checkpoint_file_states():
    disk = SimDisk()
    f = CheckpointFile("/s", disk)
    assert f.load() == "missing"
    f.state.physic_msg_timestamp = 7
    f.save()
    g = CheckpointFile("/s", disk)
    assert g.load() == "valid" and g.state.physic_msg_timestamp == 7
    disk.write_small_atomic("/s/checkpoint", b"\x01" * 10)
    assert CheckpointFile("/s", disk).load() == "corrupt"


def test_epoch_file_set_truncate_reload():
    disk = SimDisk()
    e = EpochFile("/s", disk)
    e.load()
    assert e.current == 0
    e.set(1, 0)
    e.set(2, 500)
    e.set(2, 700)  # same epoch: no new entry
    assert disk.read_small("/s/epochFileCheckpoint") == b"2\n%d\n1-0\n2-500\n" % (zlib.crc32(b"1-0\n2-500\n") & 0x7FFFFFFF)
    e.truncate(400)
    assert e.entries == [(1, 0)]
    e2 = EpochFile("/s", disk)
    e2.load()
    assert e2.current == 1
