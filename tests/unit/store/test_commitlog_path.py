"""Issue 18 item 2: storePathCommitLog is honoured: the CommitLog segments live in their own directory (with a lock
file of their own), recovery reads them from there after a crash, and a directory that collides with the store's
own layout is refused."""

from __future__ import annotations

import asyncio

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.model.record import iter_records
from orbitmq.store import GetStatus, MessageInner, MessageStore, StoreConfig, StoreInUseError
from orbitmq.testing.sim_disk import SimDisk

SEG = 16 * 1024


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def now_ms(self) -> int:
        self.t += 1000
        return self.t

    def monotonic_ms(self) -> int:
        return 0


def _cfg(root: str, commitlog: str = "") -> StoreConfig:
    return StoreConfig(root, store_path_commitlog=commitlog, mapped_file_size_commitlog=SEG,
                       mapped_file_size_consume_queue=20 * 50, max_message_size=4096, max_hash_slot_num=64,
                       max_index_num=512)


def _open(disk: SimDisk, root: str = "/s", commitlog: str = "/disk2/cl") -> MessageStore:
    s = MessageStore(_cfg(root, commitlog), disk=disk, clock=Clock())
    s.load()
    return s


def _put(s: MessageStore, n: int) -> None:
    async def go() -> None:
        for i in range(n):
            assert (await s.put_message(MessageInner("T", 0, b"%06d" % i * 30, {"KEYS": f"k{i}"}))).ok

    asyncio.run(go())


def _bodies(s: MessageStore) -> list[bytes]:
    out: list[bytes] = []
    off = 0
    while (g := s.get_message("g", "T", 0, off, 32)).status is GetStatus.FOUND:
        out += [m.body[:6] for m in iter_records(b"".join(bytes(b) for b in g.buffers))]
        off = g.next_begin_offset
    return out


def test_commitlog_segments_live_in_the_configured_directory_and_survive_a_crash() -> None:
    disk = SimDisk()
    s = _open(disk)
    _put(s, 200)  # several segments
    assert len(s.commitlog.segments) > 3
    assert [n for n in disk.list_files("/disk2/cl") if n.isdigit()]
    assert disk.list_files("/s/commitlog") == []
    assert disk.exists("/disk2/cl/lock") and disk.exists("/s/lock")
    asyncio.run(s.flusher.flush())
    disk.crash("drop")
    s2 = _open(disk)
    assert _bodies(s2) == [b"%06d" % i for i in range(200)]
    end = s2.max_phys_offset
    asyncio.run(s2.shutdown())
    s3 = _open(disk)  # clean restart: the locks were released
    assert s3.max_phys_offset == end > 0
    asyncio.run(s3.shutdown())


def test_two_stores_cannot_share_one_commitlog_directory() -> None:
    disk = SimDisk()
    s = _open(disk, root="/a")
    with pytest.raises(StoreInUseError):
        _open(disk, root="/b")  # another root, the same CommitLog directory
    asyncio.run(s.shutdown())


def test_default_is_root_commitlog() -> None:
    disk = SimDisk()
    s = _open(disk, commitlog="")
    _put(s, 3)
    assert s.config.commitlog_dir == "/s/commitlog" and not s.config.commitlog_dir_is_separate
    assert [n for n in disk.list_files("/s/commitlog") if n.isdigit()]
    asyncio.run(s.shutdown())


@pytest.mark.parametrize("commitlog", ["/s", "/s/consumequeue", "/s/index", "/s/config"])
def test_a_directory_of_the_store_layout_is_refused(commitlog: str) -> None:
    with pytest.raises(ConfigError, match="storePathCommitLog"):
        _cfg("/s", commitlog).validate()
