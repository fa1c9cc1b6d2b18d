"""One copy of a Raft group's messages (CommitLogRaftStorage): a follower's CommitLog and Raft log on one SimDisk
that loses power at a chosen disk operation (drop / tear / subset of the unsynced writes) while it logs a leader's
RECORDS entries, with commits, applies and a new leader that replaces an uncommitted suffix. After the crash the
member reloads (store recovery, then the Raft log rebuilt from the CommitLog) and must have: every entry its last
completed persist acknowledged, byte for byte (from where the interrupted one writes: old, new, or cut there); a
CommitLog that
ends exactly where its last entry ends; nothing visible before it is applied; after applying the committed entries,
exactly their messages visible, in order."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.broker.raft_mode.commitlog_log import CommitLogRaftStorage, decode_records
from orbitmq.broker.raft_mode.state_machine import GroupStateMachine
from orbitmq.raft.messages import Entry, HardState, Ready
from orbitmq.store import MessageStore, StoreConfig
from orbitmq.store.results import MessageInner
from orbitmq.testing.sim_disk import CRASH_MODES, SimDisk
from tests.property.test_raft_storage_crash import Crash, CrashDisk

SEG = 4096


def _config(root: str) -> StoreConfig:
    return StoreConfig(root, mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 64,
                       max_message_size=1024, max_hash_slot_num=16, max_index_num=256)


async def _no_fetch(target: int) -> None:
    raise AssertionError(f"no fetch expected (up to {target})")


class Member:
    def __init__(self, disk: SimDisk, root: str) -> None:
        self.store = MessageStore(_config(root + "/store"), disk=disk)
        self.store.load()
        self.log = CommitLogRaftStorage(root + "/dledger", self.store, _no_fetch, disk=disk, segment_size=SEG)
        self.sm = GroupStateMachine(self.store, self.log)
        self.hs, self.snap, self.entries = self.log.load()
        self.log.loaded()

    async def persist(self, entries: list[Entry], hs: HardState) -> None:
        rd = Ready(hard_state=hs, entries=entries)
        await self.log.prepare(rd)
        self.log.save(rd)

    def visible(self) -> list[bytes]:
        raw = self.log._read(0, self.store.confirm_offset) if self.store.confirm_offset else b""
        return [m.body for m in decode_records(raw, 0)[0]]


def _msgs(rng: random.Random, n: int, tag: str) -> list[MessageInner]:
    return [MessageInner("T", rng.randrange(2), f"{tag}-{i}-".encode() + bytes([65 + i % 26]) * rng.randrange(10, 300),
                         {"KEYS": f"{tag}{i}"}, born_host="127.0.0.1:5000", store_host="127.0.0.1:10911")
            for i in range(n)]


def _bodies(data: bytes) -> list[bytes]:
    return [m.body for m in decode_records(memoryview(data)[9:], 0)[0]]


async def _workload(seed: int, steps: int, disk: CrashDisk) -> tuple[dict[int, bytes], dict[int, bytes], int]:
    """Returns (the follower's acknowledged log, what the interrupted persist aimed at, its commit)."""
    rng = random.Random(seed)
    leader = Member(SimDisk(seed + 1), "/lead")
    fol = Member(disk, "/fol")
    disk.armed = True
    acked: dict[int, bytes] = {}
    term, commit, last = 1, 0, 0
    try:
        for step in range(steps):
            if rng.random() < 0.15 and last > commit:  # a new leader: same committed prefix, new uncommitted suffix
                term += 1
                new = Member(SimDisk(seed + 100 + step), f"/lead{step}")
                await new.persist([Entry(1, i, acked[i]) for i in range(1, commit + 1)], HardState(term, "", 0))
                leader, last = new, commit
            batch = []
            for _ in range(rng.randrange(1, 4)):
                data, result = leader.log.put_local(_msgs(rng, rng.randrange(1, 4), f"{seed}.{step}"), term)
                assert data is not None and result.ok
                last += 1
                batch.append(Entry(term, last, data))
            if leader is not None and batch:
                await leader.persist(batch, HardState(term, "", commit))
            new_commit = rng.randint(commit, last) if rng.random() < 0.6 else commit
            aim = {i: d for i, d in acked.items() if i < batch[0].index} | {e.index: e.data for e in batch}
            try:
                await fol.persist(batch, HardState(term, "", new_commit))
            except Crash:
                return acked, aim, commit
            acked = aim
            for i in range(commit + 1, new_commit + 1):
                fol.sm.apply(i, acked[i])
            commit = new_commit
    except Crash:
        pass
    return acked, acked, commit


def _check(image: dict[str, object], seed: int, acked: dict[int, bytes], aim: dict[int, bytes], commit: int) -> None:
    async def main() -> None:
        m = Member(SimDisk.from_image(image, seed), "/fol")
        got = {e.index: e.data for e in m.entries}
        # the interrupted persist replaces the log from `cut` on: a power loss there may leave the old entries, the
        # new ones, or the log cut at that point (the old suffix is uncommitted: a leader of a later term has a
        # different entry there, so it was never acknowledged by a majority; no ack went out for the new ones)
        cut = min([i for i in aim if aim[i] != acked.get(i)] + [i for i in acked if i not in aim], default=None)
        for i, data in acked.items():
            if cut is not None and i >= cut:
                assert got.get(i) in (data, aim.get(i), None), f"entry {i} changed"
            else:
                assert got.get(i) in (data, aim.get(i)), f"acknowledged entry {i} lost or changed"
        for i, data in got.items():
            assert data in (acked.get(i), aim.get(i)), f"entry {i} was never logged"
        assert sorted(got) == list(range(1, len(got) + 1))
        assert m.store.max_phys_offset == m.log.last_end(), "CommitLog bytes past the last entry"
        assert m.visible() == [], "records visible before their entry is applied again"
        hs_commit = m.hs.commit
        assert hs_commit <= len(got)
        for i in range(1, hs_commit + 1):
            m.sm.apply(i, got[i])
        assert m.visible() == [b for i in range(1, hs_commit + 1) for b in _bodies(got[i])]
        assert hs_commit >= min(commit, hs_commit)

    asyncio.run(main())


def _run(seed: int, steps: int, crash_at: int | None, mode: str) -> tuple[CrashDisk, tuple]:
    disk = CrashDisk(seed, crash_at, mode)
    out = asyncio.run(_workload(seed, steps, disk))
    return disk, out


def crash_and_check(seed: int, steps: int, crash_at: int, mode: str) -> None:
    disk, (acked, aim, commit) = _run(seed, steps, crash_at, mode)
    if disk.image is None:
        disk.armed = False
        image = disk._crashed_image(mode)
    else:
        image = disk.image
    _check(image, seed, acked, aim, commit)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CRASH_MODES), st.floats(0.0, 1.0))
def test_random_power_loss_points(seed: int, mode: str, where: float) -> None:
    disk, _ = _run(seed, 12, None, mode)
    crash_and_check(seed, 12, 1 + int(where * disk.ops), mode)


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_every_crash_point_of_one_workload(mode: str) -> None:
    disk, _ = _run(11, 8, None, mode)
    assert disk.ops > 10
    for k in range(1, disk.ops + 2):
        crash_and_check(11, 8, k, mode)
