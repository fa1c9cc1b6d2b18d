"""RaftStorage on SimDisk (and once on the real MmapDisk): round trips, conflict overwrites, segment rolling and
compaction, snapshot install, torn tails truncated, mid-log corruption refused, .bak fallback, load fix-ups."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orbitmq.base import marks
from orbitmq.base.errors import CorruptionError, InvariantError, StoreError
from orbitmq.raft.messages import Entry, HardState, Ready, Snapshot
from orbitmq.raft.storage import HEAD_SIZE, RaftStorage
from orbitmq.store import MmapDisk
from orbitmq.store.errors import StoreInUseError
from orbitmq.testing.sim_disk import SimDisk

D = "/raft"
SEG = 4096


def ents(first: int, last: int, term: int, size: int = 10) -> list[Entry]:
    return [Entry(term, i, (b"e%d-t%d-" % (i, term)).ljust(size, b".")) for i in range(first, last + 1)]


def reopen(disk: SimDisk, mode: str = "drop") -> tuple[SimDisk, RaftStorage, tuple]:
    disk.crash(mode)
    st = RaftStorage(D, disk=disk, segment_size=SEG)
    return disk, st, st.load()


def fresh() -> tuple[SimDisk, RaftStorage]:
    disk = SimDisk(1)
    st = RaftStorage(D, disk=disk, segment_size=SEG)
    assert st.load() == (HardState(), None, [])
    return disk, st


def log_files(disk: SimDisk) -> list[str]:
    return [n for n in disk.list_files(D + "/log") if n.isdigit()]


def test_round_trip_after_crash() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(1, "n0", 0), entries=ents(1, 3, 1)))
    st.save(Ready(hard_state=HardState(1, "n0", 3), entries=ents(4, 5, 1)))
    _, _, (hs, snap, entries) = reopen(disk)
    assert hs == HardState(1, "n0", 3) and snap is None and entries == ents(1, 5, 1)


def test_conflicting_entries_overwrite_the_tail() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(1, "", 0), entries=ents(1, 6, 1)))
    st.save(Ready(hard_state=HardState(2, "n1", 2), entries=ents(3, 4, 2)))
    st.save(Ready(entries=ents(5, 5, 2)))
    _, st2, (hs, _, entries) = reopen(disk)
    assert entries == ents(1, 2, 1) + ents(3, 5, 2) and hs.term == 2
    st2.save(Ready(entries=ents(4, 4, 3), hard_state=HardState(3, "", 2)))  # overwrite again after a restart
    assert reopen(disk)[2][2] == ents(1, 2, 1) + ents(3, 4, 2)[:1] + ents(4, 4, 3)


def test_segments_roll_and_compaction_deletes_whole_leading_segments() -> None:
    disk, st = fresh()
    for i in range(1, 61):
        st.save(Ready(hard_state=HardState(1, "", i - 1), entries=ents(i, i, 1, size=300)))
    assert len(log_files(disk)) >= 4
    before = len(log_files(disk))
    st.save(Ready(compact_snapshot=Snapshot(40, 1, b"state@40")))
    assert 0 < len(log_files(disk)) < before
    st.save(Ready(entries=ents(61, 62, 1, size=300)))
    _, _, (hs, snap, entries) = reopen(disk)
    assert snap == Snapshot(40, 1, b"state@40")
    assert entries == ents(41, 62, 1, size=300) and hs.commit == 59


def test_installed_snapshot_replaces_the_log() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(2, "", 0), entries=ents(1, 10, 2)))
    st.save(Ready(snapshot=Snapshot(6, 2, b"s6")))  # the leader's snapshot replaces the whole log
    assert reopen(disk)[2][1:] == (Snapshot(6, 2, b"s6"), [])
    disk, st = reopen(disk)[:2]
    st.save(Ready(snapshot=Snapshot(20, 3, b"s20"), hard_state=HardState(3, "", 20)))  # beyond the log
    st.save(Ready(entries=ents(21, 22, 3)))
    _, _, (hs, snap, entries) = reopen(disk)
    assert snap == Snapshot(20, 3, b"s20") and entries == ents(21, 22, 3) and hs.commit == 20


def test_stale_log_behind_a_snapshot_is_dropped_at_load() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(2, "", 0), entries=ents(1, 10, 2)))
    # an installed snapshot landed, the crash came before the log reset: even a matching entry 8 must go
    disk.write_small_atomic(D + "/snapshot", _snapshot_bytes(Snapshot(8, 2, b"other")))
    disk, st, (hs, snap, entries) = reopen(disk)
    assert snap == Snapshot(8, 2, b"other") and entries == [] and hs == HardState(2, "", 0)
    st.save(Ready(entries=ents(9, 9, 5), hard_state=HardState(5, "", 8)))
    assert reopen(disk)[2][2] == ents(9, 9, 5)


def _snapshot_bytes(s: Snapshot) -> bytes:
    from orbitmq.raft.storage import SNAP_INSTALLED, encode_snapshot
    return encode_snapshot(s, SNAP_INSTALLED)


def test_torn_tail_is_truncated_and_the_log_continues() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(1, "", 0), entries=ents(1, 3, 1)))
    seg = st._log.last  # type: ignore[union-attr]
    end = seg.wrote_position
    seg.append(bytes(ents(4, 4, 1)[0].data))  # junk after the last record, never fsynced
    seg.backing.flush(end, seg.wrote_position)  # even if it had reached the platter
    marks.reset()
    disk, st, (_, _, entries) = reopen(disk)
    assert entries == ents(1, 3, 1) and marks.count("raft: torn log tail truncated") == 1
    st.save(Ready(entries=ents(4, 5, 1)))
    assert reopen(disk)[2][2] == ents(1, 5, 1)


def test_torn_last_record_is_truncated() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(1, "", 0), entries=ents(1, 3, 1, size=100)))
    path = st._log.last.path  # type: ignore[union-attr]
    disk.corrupt(path, 2 * (HEAD_SIZE + 100) + HEAD_SIZE + 50)  # inside the last record's data
    assert reopen(disk)[2][2] == ents(1, 2, 1, size=100)


def test_corruption_in_the_middle_is_refused_in_one_line() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(1, "", 0), entries=ents(1, 5, 1, size=100)))
    path = st._log.last.path  # type: ignore[union-attr]
    disk.corrupt(path, (HEAD_SIZE + 100) + HEAD_SIZE + 7)  # record 2 of 5
    with pytest.raises(CorruptionError, match="followed by valid ones") as ei:
        reopen(disk)
    assert "\n" not in str(ei.value)


def test_corruption_in_an_earlier_segment_is_refused() -> None:
    disk, st = fresh()
    for i in range(1, 30):
        st.save(Ready(entries=ents(i, i, 1, size=300)))
    first = os.path.join(D, "log", log_files(disk)[0])
    disk.corrupt(first, HEAD_SIZE + 3)
    with pytest.raises(CorruptionError):
        reopen(disk)


def test_hard_state_falls_back_to_bak_when_the_primary_is_torn() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(4, "n2", 0)))
    st.save(Ready(hard_state=HardState(5, "", 0)))
    path = os.path.normpath(D + "/hardstate")
    disk._small[path] = disk._small[path][:-3]  # torn primary
    marks.reset()
    assert reopen(disk)[2][0] == HardState(4, "n2", 0)
    assert marks.count("raft: small file read from .bak") == 1
    disk._small[path + ".bak"] = b"junk"
    with pytest.raises(CorruptionError, match="both fail"):
        reopen(disk)


def test_load_fixups_term_from_log_and_commit_beyond_log_refused() -> None:
    disk, st = fresh()
    st.save(Ready(hard_state=HardState(2, "n1", 0), entries=ents(1, 2, 3)))  # hard state of term 3 lost
    assert reopen(disk)[2][0] == HardState(3, "", 0)
    disk, st = reopen(disk)[:2]
    st.save(Ready(hard_state=HardState(3, "", 9)))
    with pytest.raises(CorruptionError, match="commit index 9"):
        reopen(disk)


def test_bad_saves_are_refused() -> None:
    _, st = fresh()
    with pytest.raises(StoreError, match="over the log segment size"):
        st.save(Ready(entries=[Entry(1, 1, bytes(SEG))]))
    st.save(Ready(entries=ents(1, 2, 1)))
    with pytest.raises(InvariantError, match="entries start at 5"):
        st.save(Ready(entries=ents(5, 5, 1)))


def test_real_disk_round_trip_and_lock(tmp_path: Path) -> None:
    d = str(tmp_path / "ctl")
    st = RaftStorage(d, disk=MmapDisk(), segment_size=SEG)
    st.load()
    st.save(Ready(hard_state=HardState(1, "n0", 1), entries=ents(1, 20, 1, size=400)))
    st.save(Ready(compact_snapshot=Snapshot(15, 1, b"snap")))
    other = RaftStorage(d, disk=MmapDisk(), segment_size=SEG)
    with pytest.raises(StoreInUseError):
        other.load()
    st.close()
    st2 = RaftStorage(d, disk=MmapDisk(), segment_size=8192)  # the stored segment size wins
    hs, snap, entries = st2.load()
    assert (hs, snap, entries) == (HardState(1, "n0", 1), Snapshot(15, 1, b"snap"), ents(16, 20, 1, size=400))
    assert st2.segment_size == SEG
    st2.close()


def test_real_disk_torn_tail_and_mid_log_corruption(tmp_path: Path) -> None:
    d = str(tmp_path / "ctl")
    st = RaftStorage(d, disk=MmapDisk(), segment_size=SEG)
    st.load()
    st.save(Ready(hard_state=HardState(1, "", 0), entries=ents(1, 5, 1, size=100)))
    st.close()
    seg = os.path.join(d, "log", "0" * 20)

    def flip(pos: int) -> None:
        with open(seg, "r+b") as f:
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0x10]))

    flip(4 * (HEAD_SIZE + 100) + HEAD_SIZE + 1)  # last record: a torn tail
    st = RaftStorage(d, disk=MmapDisk(), segment_size=SEG)
    assert st.load()[2] == ents(1, 4, 1, size=100)
    st.close()
    flip(HEAD_SIZE + 100 + 5)  # record 2's header: valid records follow
    with pytest.raises(CorruptionError, match="followed by valid ones"):
        RaftStorage(d, disk=MmapDisk(), segment_size=SEG).load()
