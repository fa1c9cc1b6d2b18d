"""epochFileCheckpoint: RocketMQ's counted + CRC layout, atomic replace with .bak, fallback to the .bak when the
primary is torn, start-up refused when both are unreadable, the legacy OrbitMQ layout still loads."""

import os
import zlib

import pytest

from orbitmq.base.errors import CorruptionError
from orbitmq.store import MessageStore, StoreConfig
from orbitmq.store.checkpoint import EpochFile, decode_epoch_file, encode_epoch_file
from orbitmq.testing.sim_disk import SimDisk

PATH = "/s/epochFileCheckpoint"


def test_layout_matches_rocketmq_example():
    # RocketMQ's CheckpointFile documents "2 / 773307083 / 7-7000 / 8-8000"
    assert encode_epoch_file([(7, 7000), (8, 8000)]) == b"2\n773307083\n7-7000\n8-8000\n"
    assert decode_epoch_file(b"2\n773307083\n7-7000\n8-8000\n") == [(7, 7000), (8, 8000)]


def test_crc_zero_is_not_checked_and_unmasked_crc_accepted():
    assert decode_epoch_file(b"2\n0\n1-0\n3-99\n") == [(1, 0), (3, 99)]
    body = b"1-0\n5-100\n"
    full = zlib.crc32(body)
    assert decode_epoch_file(b"2\n%d\n" % full + body) == [(1, 0), (5, 100)]


@pytest.mark.parametrize("bad", [
    b"3\n773307083\n7-7000\n8-8000\n",  # count mismatch
    b"2\n12345\n7-7000\n8-8000\n",  # CRC mismatch
    b"2\n773307083\n7-7000\n",  # torn: an entry line missing
    b"2\n",  # torn after the count
    b"2\n0\n7-7000\n8x8000\n",  # garbage line
    b"\xff\xfe",
])
def test_torn_content_is_rejected(bad):
    with pytest.raises((ValueError, UnicodeDecodeError)):
        decode_epoch_file(bad)


def test_save_writes_bak_and_reload():
    disk = SimDisk()
    e = EpochFile("/s", disk)
    e.load()
    e.set(1, 0)
    e.replace([(1, 0), (4, 700)])
    assert disk.read_small(PATH) == encode_epoch_file([(1, 0), (4, 700)])
    assert disk.read_small(PATH + ".bak") == encode_epoch_file([(1, 0)])
    e2 = EpochFile("/s", disk)
    e2.load()
    assert e2.entries == [(1, 0), (4, 700)] and e2.loaded_from == "primary"


def test_torn_primary_falls_back_to_bak():
    disk = SimDisk()
    e = EpochFile("/s", disk)
    e.set(1, 0)
    e.set(2, 500)
    data = disk.read_small(PATH)
    disk._small[os.path.normpath(PATH)] = data[: len(data) - 4]  # a torn write of the primary
    e2 = EpochFile("/s", disk)
    e2.load()
    assert e2.entries == [(1, 0)] and e2.loaded_from == "backup"


def test_both_corrupt_refuses_start():
    disk = SimDisk()
    disk._small[os.path.normpath(PATH)] = b"2\n1\n1-0\n2-5\n"
    disk._small[os.path.normpath(PATH + ".bak")] = b"1\n1\n1-0\n"
    with pytest.raises(CorruptionError, match="both unreadable"):
        EpochFile("/s", disk).load()


def test_corrupt_primary_without_bak_refuses_start():
    disk = SimDisk()
    disk._small[os.path.normpath(PATH)] = b"5\n0\n1-0\n"
    with pytest.raises(CorruptionError):
        EpochFile("/s", disk).load()


def test_store_load_refuses_when_both_corrupt():
    disk = SimDisk()
    disk._small[os.path.normpath(PATH)] = b"2\n1\n1-0\n2-5\n"
    disk._small[os.path.normpath(PATH + ".bak")] = b"junk"
    s = MessageStore(StoreConfig("/s"), disk=disk)
    with pytest.raises(CorruptionError, match="epochFileCheckpoint"):
        s.load()


def test_legacy_format_loads_and_is_rewritten_in_the_new_one():
    disk = SimDisk()
    disk._small[os.path.normpath(PATH)] = b"1-0\n2-500\n"
    e = EpochFile("/s", disk)
    e.load()
    assert e.entries == [(1, 0), (2, 500)]
    e.set(3, 900)
    assert disk.read_small(PATH) == encode_epoch_file([(1, 0), (2, 500), (3, 900)])


def test_missing_and_empty_files_are_an_empty_history():
    disk = SimDisk()
    e = EpochFile("/s", disk)
    e.load()
    assert e.entries == [] and e.loaded_from == ""
    disk._small[os.path.normpath(PATH)] = b""  # a legacy file written with no entries
    e.load()
    assert e.entries == []


def test_real_disk_round_trip(tmp_path):
    from orbitmq.store.disk import MmapDisk

    e = EpochFile(str(tmp_path), MmapDisk())
    e.replace([(2, 0), (3, 4096)])
    e.replace([(2, 0), (3, 4096), (9, 8192)])
    assert (tmp_path / "epochFileCheckpoint.bak").read_bytes() == encode_epoch_file([(2, 0), (3, 4096)])
    (tmp_path / "epochFileCheckpoint").write_bytes(b"3\n1\n")  # torn
    e2 = EpochFile(str(tmp_path), MmapDisk())
    e2.load()
    assert e2.entries == [(2, 0), (3, 4096)]
