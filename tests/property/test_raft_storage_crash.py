"""RaftStorage crash property: random sequences of save() (appends, conflict overwrites, term changes, commits,
compactions, installed snapshots) on a SimDisk that crashes at a chosen disk operation (drop / tear / subset of
the unsynced writes). After the crash, load() must return a contiguous log made only of entries the last
completed save or the interrupted one wrote, with every entry the last completed save covered (and the
interrupted one keeps) still present or inside the snapshot."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.raft.messages import Entry, HardState, Ready, Snapshot
from orbitmq.raft.storage import RaftStorage
from orbitmq.testing.sim_disk import CRASH_MODES, SimDisk

D = "/ctl"
SEG = 4096


class Crash(Exception):
    pass


class CrashDisk(SimDisk):
    """SimDisk that dies right after its `crash_at`-th mutating operation once armed (segment write, small file
    write, create, delete), keeping the image a power failure at that instant would leave."""

    def __init__(self, seed: int, crash_at: int | None = None, mode: str = "drop") -> None:
        super().__init__(seed)
        self.crash_at = crash_at
        self.mode = mode
        self.ops = 0
        self.armed = False
        self.image: dict[str, object] | None = None

    def _op(self) -> None:
        if not self.armed:
            return
        self.ops += 1
        if self.ops == self.crash_at:
            self.image = self._crashed_image(self.mode)
            raise Crash

    def _log_write(self, path, f, start, end):  # type: ignore[no-untyped-def]
        super()._log_write(path, f, start, end)
        self._op()

    def write_small_atomic(self, path: str, data: bytes) -> None:
        super().write_small_atomic(path, data)
        self._op()

    def create(self, path: str, size: int):  # type: ignore[no-untyped-def]
        b = super().create(path, size)
        self._op()
        return b

    def delete(self, path: str) -> None:
        super().delete(path)
        self._op()


@dataclass
class Model:
    hs: HardState = field(default_factory=HardState)
    snap: Snapshot | None = None
    log: list[Entry] = field(default_factory=list)  # what load() returns: entries after the snapshot
    compacted: list[Entry] = field(default_factory=list)  # written by this save, then under its compact_snapshot

    @property
    def snap_index(self) -> int:
        return self.snap.index if self.snap else 0

    @property
    def last(self) -> int:
        return self.log[-1].index if self.log else self.snap_index

    def term_at(self, i: int) -> int | None:
        if self.snap and i == self.snap.index:
            return self.snap.term
        j = i - self.snap_index - 1
        return self.log[j].term if 0 <= j < len(self.log) else None


def entry(rng: random.Random, index: int, term: int) -> Entry:
    return Entry(term, index, b"%d/%d/%d/" % (index, term, rng.randrange(10**6)) + bytes(rng.randrange(0, 700)))


def next_ready(rng: random.Random, m: Model) -> tuple[Ready, Model]:
    """One plausible Ready for a node whose durable state is `m`, and the durable state after saving it."""
    term, vote, commit = m.hs.term, m.hs.vote, m.hs.commit
    log, snap = list(m.log), m.snap
    r = Ready()
    roll = rng.random()
    if roll < 0.08 and m.last >= 1:  # install a snapshot from the leader
        idx = rng.randint(max(commit, m.snap_index + 1), m.last + 4)
        t_at = m.term_at(idx)
        s_term = t_at if t_at is not None and rng.random() < 0.5 else term + 1
        term, vote = max(term, s_term), ""
        snap = r.snapshot = Snapshot(idx, s_term, b"installed@%d" % idx)
        log = []  # the leader's snapshot replaces the whole stored log
        commit = max(commit, idx)
    else:
        if rng.random() < 0.25:
            term, vote = term + 1, rng.choice(["", "n0", "n1"])
        first = m.last + 1
        if roll < 0.3 and m.last > max(commit, m.snap_index):  # conflict: overwrite an uncommitted tail
            first = rng.randint(max(commit, m.snap_index) + 1, m.last)
            term, vote = term + 1, ""
        new = [entry(rng, i, max(term, 1)) for i in range(first, first + rng.randrange(0, 6))]
        term = max(term, 1) if new else term
        if new:
            r.entries = new
            log = [e for e in log if e.index < first] + new
    model = Model(HardState(term, vote, commit), snap, log)
    commit = rng.randint(commit, model.last)
    model.hs = HardState(term, vote, commit)
    if model.hs != m.hs:
        r.hard_state = model.hs
    if r.snapshot is None and rng.random() < 0.15 and commit > model.snap_index:
        idx = rng.randint(model.snap_index + 1, commit)
        t = model.term_at(idx)
        assert t is not None
        r.compact_snapshot = model.snap = Snapshot(idx, t, b"compacted@%d" % idx)
        model.compacted = [e for e in model.log if e.index <= idx]
        model.log = [e for e in model.log if e.index > idx]
    return r, model


def run(seed: int, n_saves: int, crash_at: int | None, mode: str) -> tuple[CrashDisk, Model, Model, int]:
    """Returns (disk, model after the last completed save, model the interrupted save aimed at, ops done)."""
    rng = random.Random(seed)
    disk = CrashDisk(seed, crash_at, mode)
    storage = RaftStorage(D, disk=disk, segment_size=SEG)
    storage.load()
    disk.armed = True
    done = Model()
    for _ in range(n_saves):
        ready, after = next_ready(rng, done)
        try:
            storage.save(ready)
        except Crash:
            return disk, done, after, disk.ops
        done = after
    return disk, done, done, disk.ops


def check_recovered(loaded: tuple[HardState, Snapshot | None, list[Entry]], p: Model, q: Model) -> None:
    hs, snap, entries = loaded
    assert snap in (p.snap, q.snap)
    base = snap.index if snap else 0
    assert [e.index for e in entries] == list(range(base + 1, base + 1 + len(entries))), "log not contiguous"
    pe = {e.index: e for e in p.log}
    qe = {e.index: e for e in q.compacted + q.log}
    for e in entries:
        assert pe.get(e.index) == e or qe.get(e.index) == e, f"entry {e.index} was never saved"
    have = {e.index: e for e in entries}
    for e in p.log:
        kept = qe.get(e.index) == e or (q.snap is not None and e.index <= q.snap.index and e.index not in qe)
        if kept:
            assert (snap is not None and e.index <= snap.index) or have.get(e.index) == e, f"lost entry {e.index}"
    assert hs in (p.hs, q.hs) or (hs.vote == "" and hs.term >= p.hs.term and hs.commit in (p.hs.commit,
                                                                                           q.hs.commit)), hs


def crash_and_check(seed: int, n_saves: int, crash_at: int, mode: str) -> None:
    disk, p, q, _ = run(seed, n_saves, crash_at, mode)
    if disk.image is None:  # the workload ended before that operation: crash after the last save
        disk.armed = False
        disk.crash(mode)
        image = disk._crashed_image("drop")
    else:
        image = disk.image
    # recovery itself may write (tail truncation, log reset, meta): crash inside it too, at each of its
    # operations in turn, and recover again from there
    for k in range(1, 8):
        redo = CrashDisk.from_image(image, seed, crash_at=k, mode=mode)
        redo.armed = True
        try:
            check_recovered(RaftStorage(D, disk=redo, segment_size=SEG).load(), p, q)
            break  # recovery needed fewer than k operations
        except Crash:
            assert redo.image is not None
            check_recovered(RaftStorage(D, disk=SimDisk.from_image(redo.image, seed), segment_size=SEG).load(), p, q)
    disk = SimDisk.from_image(image, seed)  # type: ignore[assignment]
    storage = RaftStorage(D, disk=disk, segment_size=SEG)
    loaded = storage.load()
    check_recovered(loaded, p, q)
    # the recovered storage accepts the node's next saves and reloads them
    rng = random.Random(seed + 1)
    m = Model(loaded[0], loaded[1], loaded[2])
    for _ in range(5):
        ready, m = next_ready(rng, m)
        storage.save(ready)
    disk.crash("drop")
    assert RaftStorage(D, disk=disk, segment_size=SEG).load() == (m.hs, m.snap, m.log)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CRASH_MODES), st.floats(0.0, 1.0))
def test_random_crash_points(seed: int, mode: str, where: float) -> None:
    total = run(seed, 40, None, mode)[3]
    crash_and_check(seed, 40, 1 + int(where * total), mode)


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_every_crash_point_of_one_workload(mode: str) -> None:
    total = run(7, 30, None, mode)[3]
    assert total > 30
    for k in range(1, total + 2):
        crash_and_check(7, 30, k, mode)
