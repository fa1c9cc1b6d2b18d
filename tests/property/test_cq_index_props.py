"""Model-vs-implementation state machines (hypothesis) for the ConsumeQueue and the IndexFile on SimDisk.

CQ: append (with gaps and duplicates), read, truncate, flush, clean reload, crash (drop/tear/subset) + recover.
Index: dispatch records with colliding keys, query with windows and limits, truncate, reload, crash after flush.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from orbitmq.model.tags import index_key_hash
from orbitmq.store.consume_queue import FILLER_SIZE, ConsumeQueueTable
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.index_file import MAX_QUERY_NUM, IndexService
from orbitmq.testing.sim_disk import SimDisk

SEG_ENTRIES = 3
SEG = SEG_ENTRIES * 20
FILLER = (0, FILLER_SIZE, 0)
CQ_ROOT = "/p/consumequeue"
IDX_ROOT = "/p/index"
SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _req(topic, qid, phys, size, tags, qoff, ts=0, keys=None, uniq=None) -> DispatchRequest:
    return DispatchRequest(topic, qid, phys, size, tags, ts, qoff, keys, uniq, 0, 0, {})


class ConsumeQueueMachine(RuleBasedStateMachine):
    """Model: `entries` holds every entry from the first segment's start (fillers included)."""

    @initialize(start=st.integers(0, 8), seed=st.integers(0, 1000))
    def setup(self, start: int, seed: int) -> None:
        self.disk = SimDisk(seed=seed)
        self.table = ConsumeQueueTable(CQ_ROOT, SEG, self.disk)
        self.base = start - start % SEG_ENTRIES  # first segment's first offset
        self.entries: list[tuple[int, int, int]] = []
        self.min = start
        self.next_phys = 1000
        self.durable = 0  # entries known durable (flushed), counted from base
        self.started = False
        self.first_offset = start

    @property
    def end(self) -> int:
        return self.base + len(self.entries)

    def cq(self):
        return self.table.find("T", 0)

    def _real_min(self) -> int:
        for i, e in enumerate(self.entries):
            if e[1] != FILLER_SIZE:
                return self.base + i
        return self.end

    @rule(n=st.integers(1, 5), gap=st.integers(0, 4), size=st.integers(1, 90))
    def append(self, n: int, gap: int, size: int) -> None:
        if not self.started:  # the first segment is pre-filled up to the first offset
            qoff = self.first_offset
            self.entries = [FILLER] * (qoff - self.base)
            self.min = qoff
        elif self.end > self.min:
            qoff = self.end + gap
            self.entries.extend([FILLER] * gap)
        else:  # an emptied queue restarts at its end: the offsets between are fillers, unreadable
            qoff = self.end + gap
            tail_start = (self.end - 1) // SEG_ENTRIES * SEG_ENTRIES if self.end > self.base else self.base
            if qoff >= tail_start + SEG_ENTRIES:  # past the tail segment: the queue starts over there
                self.base = qoff - qoff % SEG_ENTRIES
                self.entries = [FILLER] * (qoff - self.base)
                self.durable = 0
            else:
                self.entries.extend([FILLER] * gap)
            self.min = qoff
        self.started = True
        for i in range(n):
            e = (self.next_phys, size, (self.next_phys * 7) % 1000 - 500)
            self.table.dispatch(_req("T", 0, e[0], e[1], e[2], qoff + i))
            self.entries.append(e)
            self.next_phys += size + 3

    @precondition(lambda self: self.started and self.end > self.min)
    @rule(data=st.data())
    def duplicate(self, data) -> None:
        i = data.draw(st.integers(self.min, self.end - 1))
        phys, size, tags = self.entries[i - self.base]
        if size != FILLER_SIZE:
            self.table.dispatch(_req("T", 0, phys, size, tags, i))

    @precondition(lambda self: self.started)
    @rule(data=st.data())
    def read(self, data) -> None:
        off = data.draw(st.integers(self.base - 2, self.end + 2))
        n = data.draw(st.integers(0, 8))
        got = self.cq().read(off, n)
        if off < self.min or off >= self.end:
            assert got == []
            return
        seg_end = off - off % SEG_ENTRIES + SEG_ENTRIES
        stop = min(off + n, seg_end, self.end)
        assert got == self.entries[off - self.base : stop - self.base]

    @precondition(lambda self: self.started)
    @rule(data=st.data())
    def truncate(self, data) -> None:
        bounds = [0, self.next_phys] + [e[0] for e in self.entries if e[1] != FILLER_SIZE]
        cut_phys = data.draw(st.sampled_from(bounds))  # the CommitLog is cut at record boundaries
        self.table.truncate_dirty(cut_phys)
        while self.entries and (self.entries[-1][1] == FILLER_SIZE or self.entries[-1][0] >= cut_phys):
            self.entries.pop()
        self.durable = min(self.durable, len(self.entries))
        self.min = min(self.min, self.end)
        self.next_phys = min(self.next_phys, cut_phys)

    @rule()
    def flush(self) -> None:
        self.table.flush()
        self.durable = len(self.entries)

    @precondition(lambda self: self.started)
    @rule()
    def clean_reload(self) -> None:
        self.table.flush()
        self.table.close()
        self.table = ConsumeQueueTable(CQ_ROOT, SEG, self.disk)
        self.table.load()
        real = [e for e in self.entries if e[1] != FILLER_SIZE]
        assert self.table.recover() == (real[-1][0] + real[-1][1] if real else 0)
        self.durable = len(self.entries)
        self.min = self._real_min()

    @precondition(lambda self: self.started)
    @rule(mode=st.sampled_from(["drop", "tear", "subset"]))
    def crash(self, mode: str) -> None:
        self.disk.crash(mode)
        self.table = ConsumeQueueTable(CQ_ROOT, SEG, self.disk)
        self.table.load()
        self.table.recover()
        cq = self.cq()
        got = [] if cq is None else [tuple(e) for e in self._all_entries(cq)]
        n = len(got)
        assert self.durable <= n <= len(self.entries), (self.durable, n, len(self.entries))
        assert got[: self.durable] == self.entries[: self.durable]
        # a torn write may have lost the low bytes of a tags code past the durable prefix: phys/size must match
        assert [e[:2] for e in got] == [e[:2] for e in self.entries[:n]]
        self.entries = got
        self.durable = n
        self.min = self._real_min()
        if not got:  # nothing survived: the store would continue at the queue's max offset
            self.started = False
            self.first_offset = cq.max_offset if cq is not None else self.base
            self.base = cq._segs[0].start // 20 if cq is not None and cq._segs else (
                self.first_offset - self.first_offset % SEG_ENTRIES)

    def _all_entries(self, cq):
        segs = cq._segs
        if not segs:
            return []
        assert segs[0].start == self.base * 20
        out = []
        for seg in segs:
            stop = min(cq.max_offset * 20 - seg.start, SEG)
            out.extend(tuple(x) for x in struct.iter_unpack(">qiq", seg.buf[:stop]))
        return out

    @invariant()
    def offsets_agree(self) -> None:
        if not getattr(self, "started", False):
            return
        cq = self.cq()
        assert (cq.min_offset, cq.max_offset) == (self.min, self.end)
        real = [e for e in self.entries if e[1] != FILLER_SIZE]
        assert cq.max_phys_end == (real[-1][0] + real[-1][1] if real else 0)
        if self.end > self.min:
            assert cq.last_entry() == self.entries[-1]

    def teardown(self) -> None:
        if hasattr(self, "table"):
            self.table.close()


ConsumeQueueMachine.TestCase.settings = SETTINGS
test_consume_queue_model = ConsumeQueueMachine.TestCase

KEYS = ["Aa", "BB", "k1", "k2", "k3", "zz"]  # "T#Aa" and "T#BB" collide in String.hashCode


class IndexMachine(RuleBasedStateMachine):
    """Model: every (key, phys, ts) put, in order; a query returns hash matches in the window, newest first."""

    @initialize(seed=st.integers(0, 1000), slots=st.integers(1, 4), per_file=st.integers(2, 5))
    def setup(self, seed: int, slots: int, per_file: int) -> None:
        self.disk = SimDisk(seed=seed)
        self.geom = (slots, per_file)
        self.svc = IndexService(IDX_ROOT, slots, per_file, self.disk)
        self.puts: list[tuple[int, int, int]] = []  # (key hash, phys, ts)
        self.records: list[tuple[int, str | None, str | None, int]] = []  # (phys, keys, uniq, ts): the "CommitLog"
        self.next_phys = 100
        self.ts = 1_000_000

    def _reopen(self, last_exit_ok: bool, checkpoint_ts: int = 0) -> None:
        self.svc.close()
        self.svc = IndexService(IDX_ROOT, *self.geom, self.disk)
        self.svc.load(last_exit_ok, checkpoint_ts)

    def _dispatch(self, keys: list[str], uniq: bool, dt: int) -> None:
        self.ts += dt * 1000
        phys = self.next_phys
        u = f"U{phys}" if uniq else None
        self.records.append((phys, " ".join(keys) or None, u, self.ts))
        self.svc.dispatch(_req("T", 0, phys, 10, 0, 0, self.ts, " ".join(keys) or None, u))
        for k in ([u] if u else []) + [k for k in keys if k]:
            self.puts.append((index_key_hash(f"T#{k}"), phys, self.ts))
        self.next_phys += 17

    @rule(keys=st.lists(st.sampled_from(KEYS + [""]), max_size=3), uniq=st.booleans(), dt=st.integers(0, 3))
    def dispatch(self, keys: list[str], uniq: bool, dt: int) -> None:
        self._dispatch(keys, uniq, dt)

    @rule(key=st.sampled_from(KEYS), n=st.integers(0, 80), lo=st.integers(-2, 40), span=st.integers(0, 40))
    def query(self, key: str, n: int, lo: int, span: int) -> None:
        begin = 1_000_000 + lo * 1000
        end = begin + span * 1000
        h = index_key_hash(f"T#{key}")
        want = [p for (kh, p, t) in reversed(self.puts) if kh == h and begin <= t <= end][: min(n, MAX_QUERY_NUM)]
        got, _last_ts, _last_phys = self.svc.query("T", key, n, begin, end)
        assert got == want

    @rule(data=st.data())
    def truncate(self, data) -> None:
        cut = data.draw(st.sampled_from([0, self.next_phys] + [r[0] for r in self.records]))  # record boundaries
        self.svc.truncate_dirty(cut)
        self.puts = [p for p in self.puts if p[1] < cut]
        self.records = [r for r in self.records if r[0] < cut]
        assert self.svc.max_phys_offset <= cut
        self.next_phys = min(self.next_phys, cut)

    @rule()
    def clean_reload(self) -> None:
        self.svc.flush()
        self._reopen(True)

    @rule(extra=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
    def crash_after_flush(self, extra: list[str]) -> None:
        self.svc.flush()
        saved, saved_records = list(self.puts), list(self.records)
        for k in extra:
            self._dispatch([k], False, 1)
        self.disk.crash("drop")
        self._reopen(True)
        self.puts, self.records = saved, saved_records  # unflushed puts are gone; new records come after them

    @rule(mode=st.sampled_from(["drop", "tear", "subset"]), same_second=st.booleans(),
          extra=st.lists(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3), min_size=1, max_size=6))
    def crash_then_redispatch(self, mode: str, same_second: bool, extra: list[list[str]]) -> None:
        """Power loss after some unflushed puts; recovery destroys what is newer than the checkpoint and
        re-dispatches the "CommitLog" from max_phys_offset: the index must answer as if nothing happened."""
        checkpoint_ts = self.svc.flush()
        for keys in extra:  # later than the checkpoint, or within its very millisecond
            self._dispatch(keys, False, 0 if same_second else 1)
        self.disk.crash(mode)
        self._reopen(False, checkpoint_ts)
        self._redispatch(checkpoint_ts)

    def _redispatch(self, checkpoint_ts: int) -> None:
        """What recovery does: re-dispatch from the first record stored at or after the checkpoint time (the
        store's own start is at or before it), or from redispatch_from when the index asks for more."""
        start = next((r[0] for r in self.records if r[3] >= checkpoint_ts), self.next_phys)
        if self.svc.redispatch_from is not None:
            start = min(start, self.svc.redispatch_from)
        for phys, keys, uniq, ts in self.records:
            if phys >= start:
                self.svc.dispatch(_req("T", 0, phys, 10, 0, 0, ts, keys, uniq))

    @rule()
    def abnormal_reload(self) -> None:
        checkpoint_ts = self.svc.flush()
        self._reopen(False, checkpoint_ts)  # everything was flushed: nothing is destroyed...
        self._redispatch(checkpoint_ts)  # ...but the newest record may be dropped and must come again

    @invariant()
    def dispatched_end_is_sane(self) -> None:
        if hasattr(self, "svc") and self.puts:
            assert self.svc.max_phys_offset >= self.puts[-1][1]

    def teardown(self) -> None:
        if hasattr(self, "svc"):
            self.svc.close()


IndexMachine.TestCase.settings = settings(SETTINGS, max_examples=80)
test_index_model = IndexMachine.TestCase
