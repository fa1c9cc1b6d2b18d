"""RaftSim: a deterministic single-threaded simulator for orbitmq.raft.node.RaftNode clusters.

Owns virtual time (ms), the event queue, one simulated durable storage per node (a Ready becomes durable only
when its "fsync" completes; crash() loses the in-flight Ready), a tiny replicated state machine (a list of
applied commands) with client proposals, ReadIndex reads and periodic compaction, and the safety checkers
that run after every event. One seed -> one random.Random(seed); every component gets its own fork.
It never touches real sockets, threads or clocks; scenarios and the seed sweep live in testing/vopr.py.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from orbitmq.base.errors import InvariantError
from orbitmq.raft.messages import Entry, HardState, Message, MsgType, RaftConfig, Ready, Role, Snapshot
from orbitmq.raft.node import RaftNode
from orbitmq.testing.sim_net import CALM, SimNet


def replay_command(seed: int, scenario: str = "random") -> str:
    cmd = f"python -m orbitmq.testing.vopr --seed {seed}"
    return cmd if scenario == "random" else f"{cmd} --scenario {scenario}"


class SimFailure(AssertionError):
    """A safety or liveness checker fired; the message names the seed and the exact replay command."""

    def __init__(self, seed: int, scenario: str, now: int, what: str) -> None:
        super().__init__(f"seed {seed} ({scenario}) at {now} ms: {what}\n  replay: {replay_command(seed, scenario)}")
        self.seed = seed
        self.what = what


@dataclass(frozen=True, slots=True)
class SimOptions:
    nodes: int = 3
    tick_ms: int = 10
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    max_append_entries: int = 8       # small, so batching and pipelining limits are exercised
    max_inflight_appends: int = 4
    fsync_max_ms: int = 3             # each Ready's fsync takes 0..fsync_max_ms of virtual time
    propose_every_ms: int = 15        # mean gap between client proposals (per stream)
    propose_streams: int = 1          # independent client proposal streams (more in-flight proposals)
    read_every_ms: int = 40           # mean gap between client reads
    compact_every: int = 30           # a node compacts once this many entries were applied since its snapshot
    pre_vote: bool = True
    check_quorum: bool = True
    liveness_ms: int = 5000           # calm period bound: leader elected and a proposal applied everywhere


def encode_sm(cmds: list[bytes]) -> bytes:
    return b"\n".join(cmds)


def decode_sm(data: bytes) -> list[bytes]:
    return data.split(b"\n") if data else []


@dataclass
class Durable:
    """What survives a crash: the last fsynced hard state, snapshot and log entries (after the snapshot)."""
    hard_state: HardState = field(default_factory=HardState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)

    def persist(self, rd: Ready) -> None:
        if rd.hard_state is not None:
            self.hard_state = rd.hard_state
        if rd.snapshot is not None:
            self.snapshot = rd.snapshot
            self.entries = []
        if rd.entries:
            base = self.snapshot.index if self.snapshot is not None else 0
            cut = rd.entries[0].index - base - 1
            if cut < 0 or cut > len(self.entries):
                raise InvariantError(f"durable log (snapshot {base}, {len(self.entries)} entries) cannot take "
                                     f"entries from {rd.entries[0].index}")
            del self.entries[cut:]
            self.entries.extend(rd.entries)
        cs = rd.compact_snapshot
        if cs is not None and (self.snapshot is None or cs.index > self.snapshot.index):
            base = self.snapshot.index if self.snapshot is not None else 0
            del self.entries[:cs.index - base]
            self.snapshot = cs

    def holds(self, index: int, term: int | None) -> bool:
        """Entry `index` of term `term` is durable here (or compacted into the durable snapshot)."""
        base = self.snapshot.index if self.snapshot is not None else 0
        if index < base or (index == base and base > 0):
            return True
        k = index - base - 1
        return k < len(self.entries) and self.entries[k].term == term


class SimNode:
    def __init__(self, node_id: str, config: RaftConfig) -> None:
        self.id = node_id
        self.config = config
        self.durable = Durable()
        self.raft: RaftNode | None = None
        self.incarnation = 0
        self.inflight = False
        self.sm: list[bytes] = []
        self.sm_set: set[bytes] = set()
        self.sm_applied = 0
        self.proposals: dict[int, tuple[int, bytes]] = {}      # index -> (term, command)
        self.reads: dict[int, int] = {}                        # request id -> acked writes when it began
        self.reads_ready: list[tuple[int, int, int]] = []      # (request id, read index, acked writes)
        self.last_commit = 0
        self.last_applied = 0
        self.reg_commit = 0
        self.snapshots_installed = 0
        # acknowledgements (APPEND_RESP) the node created and has not sent yet: id -> (message, term of the
        # acknowledged entry, has that entry been durable here at some moment since the ack was created)
        self.acks_made: dict[int, tuple[Message, int | None, bool]] = {}

    @property
    def alive(self) -> bool:
        return self.raft is not None

    def load_sm(self, snap: Snapshot | None) -> None:
        self.sm = decode_sm(snap.data) if snap is not None else []
        self.sm_set = set(self.sm)
        self.sm_applied = snap.index if snap is not None else 0


class RaftSim:
    def __init__(self, seed: int, options: SimOptions | None = None, *, scenario: str = "random",
                 trace: Callable[[RaftSim, str, str], None] | None = None) -> None:
        self.seed = seed
        self.scenario = scenario
        self.opts = o = options or SimOptions()
        self.rng = random.Random(seed)
        self.now = 0
        self._q: list[tuple[int, int, str, object, object]] = []
        self._seq = 0
        self.trace = trace
        ids = tuple(f"n{i}" for i in range(o.nodes))
        self.net = SimNet(self.fork("net"), ids)
        self._fsync_rng = self.fork("fsync")
        self.client_rng = self.fork("client")
        self.nodes: dict[str, SimNode] = {}
        for i in ids:
            cfg = RaftConfig(i, ids, election_ticks=o.election_ticks, heartbeat_ticks=o.heartbeat_ticks,
                             pre_vote=o.pre_vote, check_quorum=o.check_quorum,
                             max_append_entries=o.max_append_entries,
                             max_inflight_appends=o.max_inflight_appends, tick_ms=o.tick_ms)
            self.nodes[i] = SimNode(i, cfg)
        # checker state
        self.leaders_by_term: dict[int, str] = {}
        self.committed: dict[int, tuple[int, int]] = {}       # index -> (entry term, term it was committed in)
        self.applied_ref: list[tuple[int, bytes]] = []         # the one applied sequence (index i at i-1)
        self.entry_reg: dict[tuple[int, int], tuple[bytes, int | None]] = {}  # (index, term) -> (data, prev term)
        self.acked: list[bytes] = []
        self.stats = {"events": 0, "proposed": 0, "acked": 0, "reads": 0, "crashes": 0, "snap_installs": 0}
        self._cmd_seq = 0
        phase = self.fork("phase")
        for n in self.nodes.values():
            self.restart(n.id)
            self.schedule(phase.randrange(o.tick_ms), "tick", n.id)
        self.schedule(1, "propose")
        self.schedule(1, "read")
        for _ in range(o.propose_streams - 1):
            self.schedule(1, "propose")

    # --- plumbing --------------------------------------------------------------------------------------
    def fork(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}/{name}")

    def fail(self, what: str) -> SimFailure:
        return SimFailure(self.seed, self.scenario, self.now, what)

    def schedule(self, delay: int, kind: str, a: object = None, b: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._q, (self.now + delay, self._seq, kind, a, b))

    def alive(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.raft is not None]

    def leader(self) -> SimNode | None:
        """The alive leader with the highest term, if any."""
        best = None
        for n in self.alive():
            assert n.raft is not None
            if n.raft.role == Role.LEADER and (best is None or n.raft.term > best.raft.term):  # type: ignore[union-attr]
                best = n
        return best

    def run_until(self, pred: Callable[[], bool], max_ms: int) -> bool:
        end = self.now + max_ms
        while self._q and self._q[0][0] <= end:
            self.step()
            if pred():
                return True
        self.now = max(self.now, end)
        return pred()

    def run_for(self, ms: int) -> None:
        self.run_until(lambda: False, ms)

    def step(self) -> None:
        t, _, kind, a, b = heapq.heappop(self._q)
        self.now = t
        self.stats["events"] += 1
        try:
            touched = self._handle(kind, a, b)
            for n in touched:
                self._check_node(n)
        except InvariantError as e:
            raise self.fail(f"node invariant: {e}") from e
        if self.trace is not None:
            for n in touched:
                self.trace(self, kind, n.id)

    def _handle(self, kind: str, a: object, b: object) -> list[SimNode]:
        if kind == "tick":
            n = self.nodes[str(a)]
            self.schedule(self.opts.tick_ms, "tick", n.id)
            if n.raft is None:
                return []
            n.raft.tick()
        elif kind == "deliver":
            assert isinstance(a, Message)
            n = self.nodes[a.dst]
            if n.raft is None or not self.net.deliverable(a):
                return []
            n.raft.step(a)
        elif kind == "fsync":
            n = self.nodes[str(a)]
            rd, inc = b  # type: ignore[misc]
            if n.incarnation != inc:
                return []
            self._complete(n, rd)
        elif kind in ("propose", "read"):
            gap = self.opts.propose_every_ms if kind == "propose" else self.opts.read_every_ms
            self.schedule(self.client_rng.randint(1, 2 * gap), kind)
            n = self.nodes[self.client_rng.choice(list(self.nodes))]
            if n.raft is None or n.raft.role != Role.LEADER:
                return []
            if kind == "propose":
                self._client_propose(n)
            else:
                self._client_read(n)
        else:
            fn = a
            assert callable(fn)
            fn()
            return self.alive()
        self._pump(n)
        return [n]

    # --- nodes: storage, crash, restart ----------------------------------------------------------------
    def crash(self, node_id: str) -> None:
        n = self.nodes[node_id]
        if n.raft is None:
            return
        n.raft = None
        n.incarnation += 1
        n.inflight = False
        n.proposals.clear()
        n.reads.clear()
        n.reads_ready.clear()
        n.acks_made.clear()
        n.load_sm(None)
        self.stats["crashes"] += 1

    def restart(self, node_id: str) -> None:
        n = self.nodes[node_id]
        if n.raft is not None:
            return
        d = n.durable
        n.incarnation += 1
        n.raft = RaftNode(n.config, self.fork(f"raft/{node_id}/{n.incarnation}"), hard_state=d.hard_state,
                          snapshot=d.snapshot, entries=list(d.entries))
        n.load_sm(d.snapshot)
        self._check_snapshot(n, d.snapshot)
        if n.raft.commit_index < d.hard_state.commit:
            raise self.fail(f"{node_id} restarted with commit {n.raft.commit_index} below its durable "
                            f"commit {d.hard_state.commit}")
        n.last_commit = n.raft.commit_index
        n.last_applied = n.raft.applied_index
        self._pump(n)

    def _pump(self, n: SimNode) -> None:
        if n.raft is not None:
            self._note_acks(n, n.raft._msgs)
        while n.raft is not None and not n.inflight and n.raft.has_ready():
            self._note_acks(n, n.raft._msgs)
            rd = n.raft.ready()
            self._note_acks(n, rd.messages)  # made by ready() itself
            self._check_entries(n, rd)
            delay = self._fsync_rng.randint(0, self.opts.fsync_max_ms)
            if delay:
                n.inflight = True
                self.schedule(delay, "fsync", n.id, (rd, n.incarnation))
                return
            self._complete(n, rd)

    def _complete(self, n: SimNode, rd: Ready) -> None:
        assert n.raft is not None
        n.inflight = False
        old = n.durable.hard_state
        old_snap = n.durable.snapshot.index if n.durable.snapshot is not None else 0
        n.durable.persist(rd)
        for key, (m, term, durable) in list(n.acks_made.items()):  # acks waiting to leave: durable by now?
            if not durable and n.durable.holds(m.index, term):
                n.acks_made[key] = (m, term, True)
        hs = n.durable.hard_state
        if n.durable.snapshot is not None and n.durable.snapshot.index < old_snap:
            raise self.fail(f"{n.id}: durable snapshot went back from {old_snap} to {n.durable.snapshot.index}")
        if hs.term < old.term or hs.commit < old.commit or (hs.term == old.term and old.vote not in ("", hs.vote)):
            raise self.fail(f"{n.id}: durable hard state went back {old} -> {hs}")
        for m in rd.messages:
            self._check_outgoing(n, m)
            for d in self.net.route(m):
                self.schedule(d, "deliver", m)
        self._apply(n, rd)
        n.raft.advance(rd)
        if n.sm_applied - n.raft.log.snap_index >= self.opts.compact_every:
            n.raft.compact(n.sm_applied, encode_sm(n.sm))

    def _note_acks(self, n: SimNode, msgs: list[Message]) -> None:
        """Record, when an acknowledgement is created, what it acknowledges and whether that was durable then.
        Called after every step of the node (before its messages can leave), so nothing durable changed since the
        message was made."""
        assert n.raft is not None
        for m in msgs:
            if m.type == MsgType.APPEND_RESP and not m.reject and m.index > 0 and id(m) not in n.acks_made:
                term = n.raft.log.term_at(m.index)
                n.acks_made[id(m)] = (m, term, n.durable.holds(m.index, term))

    def _check_outgoing(self, n: SimNode, m: Message) -> None:
        """A message leaves only after the state it depends on is durable (Ready order).

        An acknowledgement (APPEND_RESP) is judged from its creation on, not only by what is durable when it
        leaves. It may leave when the acknowledged entry (index and term) was durable here at some moment from its
        creation to its sending, or when, before it left, a leader of a higher term replaced that entry here and
        that higher term is durable: both are an older-term message delivered late, as Raft allows (the entry was
        accepted in the lower term before this node learned the higher one, and the node never acts in that term
        again; a crash in between drops the unsent acknowledgement). Anything else -- an entry neither durable
        nor superseded, as when a driver sends the Ready's messages before its fsync -- is a failure."""
        hs = n.durable.hard_state
        # (A durable term above the message's is fine: that term's vote can never be cast again.)
        if m.type == MsgType.VOTE_RESP and not m.reject and (
                hs.term < m.term or (hs.term == m.term and hs.vote != m.dst)):
            raise self.fail(f"{n.id} granted its vote to {m.dst} in term {m.term} before persisting it ({hs})")
        if m.type == MsgType.VOTE and (hs.term < m.term or (hs.term == m.term and hs.vote != n.id)):
            raise self.fail(f"{n.id} asked for votes in term {m.term} before persisting its own vote ({hs})")
        if m.type == MsgType.APPEND_RESP and not m.reject and m.index > 0:
            made = n.acks_made.pop(id(m), None)
            if made is None or made[0] is not m:
                raise self.fail(f"{n.id} sent an acknowledgement of index {m.index} the simulator never saw made")
            _, term, durable = made
            if durable or n.durable.holds(m.index, term):
                return
            assert n.raft is not None
            superseded = term is not None and hs.term > m.term and n.raft.log.term_at(m.index) != term
            if not superseded:
                d = n.durable
                last = (d.snapshot.index if d.snapshot else 0) + len(d.entries)
                raise self.fail(f"{n.id} acknowledged index {m.index} (term {term}) but that entry was not durable "
                                f"here at any moment from the acknowledgement's creation to its sending, nor "
                                f"replaced by a higher term's leader (durable log ends at {last}, {hs})")

    # --- state machine and client ----------------------------------------------------------------------
    def _apply(self, n: SimNode, rd: Ready) -> None:
        if rd.snapshot is not None:
            n.load_sm(rd.snapshot)
            self._check_snapshot(n, rd.snapshot)
            n.snapshots_installed += 1
            self.stats["snap_installs"] += 1
        ref = self.applied_ref
        for e in rd.committed:
            if e.index != n.sm_applied + 1:
                raise self.fail(f"{n.id} applies index {e.index} after {n.sm_applied}")
            if e.index <= len(ref):
                if ref[e.index - 1] != (e.term, e.data):
                    raise self.fail(f"state machine safety: {n.id} applies {(e.term, e.data)} at {e.index}, "
                                    f"another node applied {ref[e.index - 1]}")
            elif e.index == len(ref) + 1:
                ref.append((e.term, e.data))
            else:
                raise self.fail(f"{n.id} applies {e.index} but nobody applied {len(ref) + 1}")
            d = n.durable
            base = d.snapshot.index if d.snapshot is not None else 0
            if e.index > base and (e.index - base > len(d.entries) or d.entries[e.index - base - 1] != e):
                raise self.fail(f"{n.id} applies {e} before it is durable")
            if e.data:
                n.sm.append(e.data)
                n.sm_set.add(e.data)
            n.sm_applied = e.index
            p = n.proposals.pop(e.index, None)
            if p is not None and p == (e.term, e.data):
                self.acked.append(e.data)
                self.stats["acked"] += 1
        for rs in rd.read_states:
            began = n.reads.pop(rs.request_id, None)
            if began is not None:
                n.reads_ready.append((rs.request_id, rs.index, began))
        self._serve_reads(n)

    def _serve_reads(self, n: SimNode) -> None:
        keep = []
        for rid, index, began in n.reads_ready:
            if index > n.sm_applied:
                keep.append((rid, index, began))
                continue
            missing = [c for c in self.acked[:began] if c not in n.sm_set]
            if missing:
                raise self.fail(f"linearizability: read {rid} on {n.id} (read index {index}) misses acknowledged "
                                f"writes {missing[:3]}")
            self.stats["reads"] += 1
        n.reads_ready = keep

    def _client_propose(self, n: SimNode, cmd: bytes | None = None) -> bytes | None:
        assert n.raft is not None
        if cmd is None:
            self._cmd_seq += 1
            cmd = f"c{self._cmd_seq}".encode()
        e = n.raft.propose(cmd)
        if e is None:
            return None
        n.proposals[e.index] = (e.term, cmd)
        self.stats["proposed"] += 1
        return cmd

    def _client_read(self, n: SimNode) -> None:
        assert n.raft is not None
        self._cmd_seq += 1
        if n.raft.read_index(self._cmd_seq):
            n.reads[self._cmd_seq] = len(self.acked)

    # --- checkers --------------------------------------------------------------------------------------
    def _check_snapshot(self, n: SimNode, snap: Snapshot | None) -> None:
        if snap is None:
            return
        if snap.index > len(self.applied_ref):
            raise self.fail(f"{n.id} holds a snapshot at {snap.index} beyond anything applied")
        want = [d for _, d in self.applied_ref[:snap.index] if d]
        if decode_sm(snap.data) != want or self.applied_ref[snap.index - 1][0] != snap.term:
            raise self.fail(f"state machine safety: {n.id}'s snapshot at {snap.index} differs from the applied "
                            f"sequence")

    def _check_entries(self, n: SimNode, rd: Ready) -> None:
        """Log matching, checked where logs change: an (index, term) pair always names the same data and the
        same predecessor term, on every node (by induction: same index+term => identical prefix)."""
        assert n.raft is not None
        for e in rd.entries:
            prev = n.raft.log.term_at(e.index - 1)
            key = (e.index, e.term)
            seen = self.entry_reg.get(key)
            if seen is None:
                self.entry_reg[key] = (e.data, prev)
            elif seen[0] != e.data or (prev is not None and seen[1] is not None and seen[1] != prev):
                raise self.fail(f"log matching: {n.id} has {key} = ({e.data!r}, prev term {prev}), "
                                f"elsewhere ({seen[0]!r}, prev term {seen[1]})")

    def _check_node(self, n: SimNode) -> None:
        r = n.raft
        if r is None:
            return
        if r.commit_index < n.last_commit or r.applied_index < n.last_applied:
            raise self.fail(f"{n.id}: commit/applied went back ({n.last_commit}, {n.last_applied}) -> "
                            f"({r.commit_index}, {r.applied_index})")
        n.last_commit, n.last_applied = r.commit_index, r.applied_index
        if r.commit_index > r.last_index:
            raise self.fail(f"{n.id}: commit {r.commit_index} beyond last index {r.last_index}")
        if r.role == Role.LEADER:
            prev = self.leaders_by_term.get(r.term)
            if prev is None:
                self.leaders_by_term[r.term] = n.id
                self._check_leader_complete(n, None)
            elif prev != n.id:
                raise self.fail(f"two leaders in term {r.term}: {prev} and {n.id}")
        if r.commit_index > n.reg_commit:
            commit_term = r.term
            for i in range(max(n.reg_commit, r.log.snap_index) + 1, r.commit_index + 1):
                t = r.log.term_at(i)
                assert t is not None
                seen = self.committed.get(i)
                if seen is None:
                    self.committed[i] = (t, commit_term)
                    self._check_leader_complete(None, i)
                elif seen[0] != t:
                    raise self.fail(f"index {i} committed with term {seen[0]} and, on {n.id}, term {t}")
                elif commit_term < seen[1]:
                    self.committed[i] = (t, commit_term)
            n.reg_commit = r.commit_index

    def _check_leader_complete(self, leader: SimNode | None, index: int | None) -> None:
        """Every entry committed in a term < T is in the log of the leader of term T (unless compacted)."""
        leaders = [leader] if leader is not None else [x for x in self.alive() if x.raft.role == Role.LEADER]  # type: ignore[union-attr]
        for ld in leaders:
            r = ld.raft
            assert r is not None
            items = self.committed.items() if index is None else [(index, self.committed[index])]
            for i, (t, cterm) in items:
                if cterm < r.term and i > r.log.snap_index and r.log.term_at(i) != t:
                    raise self.fail(f"leader completeness: leader {ld.id} of term {r.term} lacks entry {i} "
                                    f"(term {t}, committed in term {cterm}); it has {r.log.term_at(i)}")

    # --- liveness --------------------------------------------------------------------------------------
    def calm(self) -> None:
        """End every fault: heal the network, restore calm links, restart crashed nodes."""
        self.net.heal()
        self.net.set_all(CALM)
        for n in list(self.nodes.values()):
            self.restart(n.id)

    def check_liveness(self, label: str = "") -> int:
        """After calm(): a leader is elected and a fresh proposal is applied on every node within
        opts.liveness_ms; then every acknowledged write is in every state machine. Returns the ms it took."""
        start = self.now
        marker = f"live{label}-{start}".encode()
        deadline = start + self.opts.liveness_ms
        proposed_terms: list[int] = []
        acked_before = len(self.acked)      # acknowledged before the marker was proposed: below it in the log
        while True:
            if all(marker in n.sm_set for n in self.alive()):
                break
            if self.now >= deadline:
                ld = self.leader()
                raise self.fail(f"liveness: no progress {self.opts.liveness_ms} ms after calm (leader "
                                f"{ld.id if ld else None}; " + ", ".join(
                                    str(n.raft.status()) for n in self.alive()) + ")")
            ld = self.leader()
            if ld is not None and ld.raft is not None and ld.raft.term not in proposed_terms \
                    and marker not in ld.sm_set and self._client_propose(ld, marker) is not None:
                if not proposed_terms:
                    acked_before = len(self.acked)
                proposed_terms.append(ld.raft.term)
                self._pump(ld)
            self.run_for(min(20, deadline - self.now))
        for n in self.alive():
            missing = [c for c in self.acked[:acked_before] if c not in n.sm_set]
            if missing:
                raise self.fail(f"acknowledged writes lost on {n.id}: {missing[:3]}")
        return self.now - start

    def at(self, delay: int, fn: Callable[[], None]) -> None:
        """Run `fn` (a fault or scenario action) `delay` ms from now, in event order."""
        self.schedule(delay, "call", fn)
