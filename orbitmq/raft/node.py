"""RaftNode: the sans-IO Raft core (etcd/raft style). Inputs: tick(), step(message), propose(), read_index();
output: Ready batches (persist -> send -> apply), taken with ready() and acknowledged with advance().

Must not import asyncio, socket, threading, time or random: the driver (raft/driver.py) or the simulator
(testing/raft_sim.py) owns all I/O, clocks and randomness (an `rng` with randrange(a, b) is injected).
"""

from __future__ import annotations

from typing import Protocol

from orbitmq.base.invariant import check
from orbitmq.raft.log import RaftLog
from orbitmq.raft.messages import (
    Entry,
    HardState,
    Message,
    MsgType,
    RaftConfig,
    ReadState,
    Ready,
    Role,
    Snapshot,
)
from orbitmq.raft.progress import Progress, ProgressState, ReadTracker

CAMPAIGN_TRANSFER = 1   # VOTE/PRE_VOTE context: a leadership transfer, receivers skip the leader-lease check
_FROM_LEADER = (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT)


class Rng(Protocol):
    def randrange(self, start: int, stop: int) -> int: ...


class RaftNode:
    """Public API (the contract the driver, the simulator and the controller code against).

    Construction restores the persisted state: `hard_state`, the latest `snapshot` (or None) and the log
    `entries` that follow it (contiguous, entries[0].index == snapshot.index + 1, or 1 without snapshot).
    `applied` is the index the state machine already reflects (the snapshot index after a restart: the driver
    re-applies committed entries after it; committed entries come out of ready() once commit is known again).

    Read-only state: node_id, role, term, vote, leader_id ("" when unknown), commit_index, applied_index
    (highest index handed out in Ready.committed or covered by an installed snapshot), last_index,
    first_index (first index still in the in-memory log: snapshot.index + 1).
    """

    def __init__(self, config: RaftConfig, rng: Rng, *, hard_state: HardState | None = None,
                 snapshot: Snapshot | None = None, entries: list[Entry] | None = None) -> None:
        config.validate()
        hs = hard_state or HardState()
        self._cfg = config
        self._rng = rng
        self.node_id = config.node_id
        self._peers = config.peers
        self._others = tuple(p for p in config.peers if p != config.node_id)
        self._quorum = len(config.peers) // 2 + 1
        entries = list(entries or [])
        base = snapshot.index if snapshot is not None else 0
        check(not entries or entries[0].index == base + 1,
              f"{self.node_id}: restored entries start at {entries[0].index if entries else 0}, not {base + 1}")
        self._log = RaftLog(snapshot, entries)
        self._snapshot = snapshot                   # latest snapshot (with data), sent to lagging followers
        self.term = hs.term
        self._vote = hs.vote
        # A hard state persisted ahead of its entries (non-atomic storage) is clamped to what the log holds.
        self.commit_index = max(min(hs.commit, self._log.last_index), base)
        self.applied_index = base
        self.role = Role.FOLLOWER
        self.leader_id = ""
        self._prev_hs = HardState(self.term, self._vote, self.commit_index)
        self._unstable = self._log.last_index + 1   # first index not yet handed out in a Ready
        self._persisted = self._log.last_index      # entries <= this are durable (the leader's own match)
        self._msgs: list[Message] = []
        self._install: Snapshot | None = None       # a leader's snapshot to hand out in Ready.snapshot
        self._compacted: Snapshot | None = None     # compact() result to hand out in Ready.compact_snapshot
        self._read_states: list[ReadState] = []
        self._inflight: Ready | None = None
        self._progress: dict[str, Progress] = {}
        self._votes: dict[str, bool] = {}
        self._reads = ReadTracker(self._quorum)
        self._reads_unsent: list[int] = []          # read_index() calls waiting for the next heartbeat round
        self._reads_blocked: list[int] = []         # ... waiting for the first commit of the leader's term
        self._bcast_pending = False
        self._transferee = ""
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()

    # --- read-only state -------------------------------------------------------------------------------
    @property
    def config(self) -> RaftConfig:
        return self._cfg

    @property
    def vote(self) -> str:
        return self._vote

    @property
    def last_index(self) -> int:
        return self._log.last_index

    @property
    def first_index(self) -> int:
        return self._log.first_index

    @property
    def last_term(self) -> int:
        return self._log.last_term

    @property
    def log(self) -> RaftLog:
        """The in-memory log view (read it, never mutate it)."""
        return self._log

    def status(self) -> dict[str, object]:
        """id, role, term, leader, vote, commit, applied, last_index, first_index, per-peer match/next (leader)."""
        out: dict[str, object] = {
            "id": self.node_id, "role": self.role.name, "term": self.term, "leader": self.leader_id,
            "vote": self._vote, "commit": self.commit_index, "applied": self.applied_index,
            "last_index": self.last_index, "first_index": self.first_index,
        }
        if self.role == Role.LEADER:
            out["progress"] = {p: {"match": pr.match, "next": pr.next, "state": pr.state.name}
                               for p, pr in self._progress.items()}
        return out

    # --- inputs ----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """One logical clock tick: election timeout (randomized in [election_ticks, 2*election_ticks)),
        heartbeats on the leader, check-quorum step-down."""
        if self.role == Role.LEADER:
            self._tick_leader()
            return
        self._election_elapsed += 1
        if self._election_elapsed >= self._timeout:
            self._election_elapsed = 0
            self._campaign(pre=self._cfg.pre_vote)

    def step(self, msg: Message) -> None:
        """Handle one message from a peer (any type in MsgType). Messages for another node id are ignored."""
        if msg.dst != self.node_id or msg.src not in self._peers or msg.src == self.node_id:
            return
        if msg.term > self.term:
            if msg.type in (MsgType.PRE_VOTE, MsgType.VOTE) and self._in_lease() \
                    and msg.context != CAMPAIGN_TRANSFER:
                return      # a live leader is known: ignore disruptive (pre)votes (leader stickiness)
            if not (msg.type == MsgType.PRE_VOTE or (msg.type == MsgType.PRE_VOTE_RESP and not msg.reject)):
                self._become_follower(msg.term, msg.src if msg.type in _FROM_LEADER else "")
        elif msg.term < self.term:
            self._step_stale(msg)
            return
        if msg.type in (MsgType.PRE_VOTE, MsgType.VOTE):
            self._handle_vote_request(msg)
        elif self.role == Role.LEADER:
            self._step_leader(msg)
        elif self.role == Role.FOLLOWER:
            self._step_follower(msg)
        else:
            self._step_candidate(msg)

    def propose(self, data: bytes) -> Entry | None:
        """Leader only: append `data` as a new entry and return it (its index and term identify the proposal:
        it succeeded iff an entry with this index AND term is later applied). None when not the leader
        (the caller answers NOT_LEADER with `leader_id` as a hint) or while a leadership transfer runs."""
        if self.role != Role.LEADER or self._transferee:
            return None
        entry = Entry(self.term, self._log.last_index + 1, data)
        self._log.append(entry)
        self._bcast_pending = True
        return entry

    def read_index(self, request_id: int) -> bool:
        """Leader only: start a linearizable read. A ReadState(request_id, index) comes out of a later Ready
        once a quorum confirmed leadership (heartbeat round) and the leader has committed an entry of its
        term. False when not the leader. Reads pending when the node loses leadership are dropped: the
        caller times them out."""
        if self.role != Role.LEADER:
            return False
        if self._log.term_at(self.commit_index) != self.term:
            self._reads_blocked.append(request_id)
        elif len(self._peers) == 1:
            self._read_states.append(ReadState(request_id, self.commit_index))
        else:
            self._reads_unsent.append(request_id)
        return True

    def compact(self, index: int, data: bytes) -> None:
        """The application serialized its state as of applied index `index` (<= applied_index): keep it as the
        snapshot, drop in-memory entries <= index; the next Ready carries compact_snapshot for storage.
        Followers too far behind then get a SNAPSHOT message."""
        if index <= self._log.snap_index:
            return
        check(index <= self.applied_index, f"{self.node_id}: compact to {index} beyond applied "
                                           f"{self.applied_index}")
        term = self._log.compact(index)
        self._snapshot = Snapshot(index, term, data)
        self._compacted = self._snapshot

    def transfer_leadership(self, to: str) -> bool:
        """Leader only: once `to` has caught up, send it TIMEOUT_NOW. False if not leader or unknown peer.
        Proposals are refused while the transfer runs; it is abandoned after an election timeout."""
        if self.role != Role.LEADER or to not in self._others:
            return False
        self._transferee = to
        self._election_elapsed = 0
        pr = self._progress[to]
        if pr.match == self._log.last_index:
            self._send(MsgType.TIMEOUT_NOW, to)
        else:
            self._send_append(to, allow_empty=True)
        return True

    # --- outputs ---------------------------------------------------------------------------------------
    def has_ready(self) -> bool:
        if self._inflight is not None:
            return False
        self._flush()
        return bool(self._msgs or self._unstable <= self._log.last_index or self._install is not None
                    or self.commit_index > self.applied_index or self._read_states
                    or self._compacted is not None or self._hard_state() != self._prev_hs)

    def ready(self) -> Ready:
        """Take the pending work (see Ready's docstring for the order the driver must follow). One Ready at a
        time: the next one comes after advance()."""
        check(self._inflight is None, f"{self.node_id}: ready() called before advance() of the previous one")
        self._flush()
        rd = Ready()
        hs = self._hard_state()
        if hs != self._prev_hs:
            check(hs.term >= self._prev_hs.term, f"{self.node_id}: term went back {self._prev_hs} -> {hs}")
            check(hs.commit >= self._prev_hs.commit, f"{self.node_id}: commit went back {self._prev_hs} -> {hs}")
            rd.hard_state = hs
            self._prev_hs = hs
        if self._install is not None:
            rd.snapshot = self._install
            self.applied_index = self._install.index
            self._install = None
        rd.entries = self._log.slice(self._unstable, self._log.last_index + 1)
        self._unstable = self._log.last_index + 1
        rd.messages, self._msgs = self._msgs, []
        check(self.applied_index <= self.commit_index, f"{self.node_id}: applied beyond commit")
        rd.committed = self._log.slice(self.applied_index + 1, self.commit_index + 1)
        check(len(rd.committed) == self.commit_index - self.applied_index,
              f"{self.node_id}: committed entries ({self.applied_index}, {self.commit_index}] not in the log")
        self.applied_index = self.commit_index
        rd.read_states, self._read_states = self._read_states, []
        rd.compact_snapshot, self._compacted = self._compacted, None
        self._inflight = rd
        return rd

    def advance(self, ready: Ready) -> None:
        """The driver persisted, sent and applied `ready`: the node may now count its own persisted entries
        toward the commit quorum and hand out the next batch."""
        check(ready is self._inflight, f"{self.node_id}: advance() of a Ready that is not the one in flight")
        self._inflight = None
        if ready.snapshot is not None and self._log.snap_index >= ready.snapshot.index:
            self._persisted = max(self._persisted, ready.snapshot.index)
        for e in reversed(ready.entries):
            if self._log.matches(e.index, e.term):
                self._persisted = max(self._persisted, e.index)
                break
        if self.role == Role.LEADER and self._maybe_commit():
            self._bcast_pending = True

    # --- internals: state changes ----------------------------------------------------------------------
    def _hard_state(self) -> HardState:
        return HardState(self.term, self._vote, self.commit_index)

    def _random_timeout(self) -> int:
        n = self._cfg.election_ticks
        return self._rng.randrange(n, 2 * n)

    def _in_lease(self) -> bool:
        return (self._cfg.check_quorum and self.leader_id != ""
                and self._election_elapsed < self._cfg.election_ticks)

    def _set_term(self, term: int) -> None:
        check(term >= self.term, f"{self.node_id}: term would go back {self.term} -> {term}")
        if term != self.term:
            self.term = term
            self._vote = ""

    def _reset(self, term: int) -> None:
        self._set_term(term)
        self.leader_id = ""
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._votes = {}
        self._progress = {}
        self._transferee = ""
        self._reads.clear()
        self._reads_unsent = []
        self._reads_blocked = []
        self._bcast_pending = False

    def _become_follower(self, term: int, leader: str) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader

    def _campaign(self, *, pre: bool, transfer: bool = False) -> None:
        if pre:
            self._reset(self.term)
            self.role = Role.PRE_CANDIDATE
            kind, term = MsgType.PRE_VOTE, self.term + 1
        else:
            self._reset(self.term + 1)
            self.role = Role.CANDIDATE
            self._vote = self.node_id
            kind, term = MsgType.VOTE, self.term
        self._votes[self.node_id] = True
        if self._tally():
            return
        for p in self._others:
            self._msgs.append(Message(kind, self.node_id, p, term, log_index=self._log.last_index,
                                      log_term=self._log.last_term,
                                      context=CAMPAIGN_TRANSFER if transfer else 0))

    def _tally(self) -> bool:
        """Count (pre)votes; True when the campaign ended (won or lost)."""
        granted = sum(1 for v in self._votes.values() if v)
        rejected = len(self._votes) - granted
        if granted >= self._quorum:
            if self.role == Role.PRE_CANDIDATE:
                self._campaign(pre=False)
            else:
                self._become_leader()
            return True
        if rejected > len(self._peers) - self._quorum:
            self._become_follower(self.term, "")
            return True
        return False

    def _become_leader(self) -> None:
        check(self.role == Role.CANDIDATE and self._vote == self.node_id,
              f"{self.node_id}: becoming leader from {self.role.name} with vote {self._vote!r}")
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.node_id
        last = self._log.last_index
        for p in self._others:
            self._progress[p] = Progress(next=last + 1, max_inflight=self._cfg.max_inflight_appends)
        self._log.append(Entry(self.term, last + 1, b""))   # the no-op that lets this term commit
        self._bcast_pending = True

    # --- internals: message handling -------------------------------------------------------------------
    def _send(self, kind: MsgType, to: str, **fields: object) -> None:
        self._msgs.append(Message(kind, self.node_id, to, self.term, **fields))  # type: ignore[arg-type]

    def _step_stale(self, msg: Message) -> None:
        if msg.type in (MsgType.APPEND, MsgType.HEARTBEAT) and (self._cfg.check_quorum or self._cfg.pre_vote):
            # A leader cut off while we moved on: tell it the newer term so it steps down.
            self._send(MsgType.APPEND_RESP, msg.src)
        elif msg.type == MsgType.PRE_VOTE:
            self._send(MsgType.PRE_VOTE_RESP, msg.src, reject=True)

    def _can_grant_vote(self, msg: Message) -> bool:
        """May we give msg.src our (pre)vote in msg.term (ignoring the log check)?"""
        if msg.type == MsgType.PRE_VOTE and msg.term > self.term:
            return True
        return self._vote == msg.src or (self._vote == "" and self.leader_id == "")

    def _handle_vote_request(self, msg: Message) -> None:
        resp = MsgType.PRE_VOTE_RESP if msg.type == MsgType.PRE_VOTE else MsgType.VOTE_RESP
        if self._can_grant_vote(msg) and self._log.is_up_to_date(msg.log_index, msg.log_term):
            if msg.type == MsgType.VOTE:
                check(self._vote in ("", msg.src), f"{self.node_id}: second vote in term {self.term}")
                self._vote = msg.src
                self._election_elapsed = 0
            self._msgs.append(Message(resp, self.node_id, msg.src, msg.term))
        else:
            self._send(resp, msg.src, reject=True)

    def _step_candidate(self, msg: Message) -> None:
        if msg.type in _FROM_LEADER:
            self._become_follower(self.term, msg.src)
            self._step_follower(msg)
        elif (msg.type == MsgType.PRE_VOTE_RESP and self.role == Role.PRE_CANDIDATE) or \
                (msg.type == MsgType.VOTE_RESP and self.role == Role.CANDIDATE):
            self._votes[msg.src] = not msg.reject
            self._tally()

    def _step_follower(self, msg: Message) -> None:
        if msg.type in _FROM_LEADER:
            self._election_elapsed = 0
            self.leader_id = msg.src
            if msg.type == MsgType.APPEND:
                self._handle_append(msg)
            elif msg.type == MsgType.HEARTBEAT:
                self._commit_to(msg.commit)
                self._send(MsgType.HEARTBEAT_RESP, msg.src, context=msg.context)
            else:
                self._handle_snapshot(msg)
        elif msg.type == MsgType.TIMEOUT_NOW:
            self._campaign(pre=False, transfer=True)

    def _commit_to(self, index: int) -> None:
        if index > self.commit_index:
            check(index <= self._log.last_index, f"{self.node_id}: commit {index} beyond last index "
                                                 f"{self._log.last_index}")
            self.commit_index = index

    def _handle_append(self, msg: Message) -> None:
        if msg.log_index < self.commit_index:
            self._send(MsgType.APPEND_RESP, msg.src, index=self.commit_index)
            return
        if not self._log.matches(msg.log_index, msg.log_term):
            hint = self._log.find_conflict_by_term(min(msg.log_index, self._log.last_index), msg.log_term)
            self._send(MsgType.APPEND_RESP, msg.src, reject=True, log_index=msg.log_index, index=hint,
                       log_term=self._log.term_at(hint) or 0)
            return
        last_new = msg.log_index + len(msg.entries)
        conflict = self._log.find_conflict(msg.entries)
        if conflict:
            check(conflict > self.commit_index, f"{self.node_id}: conflict at {conflict} <= commit "
                                                f"{self.commit_index}")
            check(self.role != Role.LEADER, f"{self.node_id}: a leader truncating its own log")
            self._log.truncate_and_append(list(msg.entries[conflict - msg.entries[0].index:]))
            self._unstable = min(self._unstable, conflict)
            self._persisted = min(self._persisted, conflict - 1)
        self._commit_to(min(msg.commit, last_new))
        self._send(MsgType.APPEND_RESP, msg.src, index=last_new)

    def _handle_snapshot(self, msg: Message) -> None:
        snap = msg.snapshot
        check(snap is not None, f"{self.node_id}: SNAPSHOT message without a snapshot")
        assert snap is not None
        if snap.index <= self.commit_index:
            self._send(MsgType.SNAPSHOT_RESP, msg.src, index=self.commit_index)
            return
        if self._log.matches(snap.index, snap.term):
            self._commit_to(snap.index)     # we hold that entry already: just learn it is committed
        else:
            self._log.restore(snap)
            self._snapshot = snap
            self._install = snap
            self.commit_index = snap.index
            self._unstable = snap.index + 1
            self._persisted = snap.index
            self._compacted = None
        self._send(MsgType.SNAPSHOT_RESP, msg.src, index=snap.index)

    def _step_leader(self, msg: Message) -> None:
        check(msg.type not in _FROM_LEADER, f"{self.node_id}: two leaders in term {self.term} "
                                            f"({self.node_id} and {msg.src})")
        pr = self._progress.get(msg.src)
        if pr is None:
            return
        if msg.type in (MsgType.APPEND_RESP, MsgType.SNAPSHOT_RESP, MsgType.HEARTBEAT_RESP):
            pr.recent_active = True
        if msg.type == MsgType.HEARTBEAT_RESP:
            pr.probe_sent = False
            if pr.match < self._log.last_index:
                self._send_append(msg.src, allow_empty=False)
            if msg.context:
                self._read_states.extend(self._reads.ack(msg.context, msg.src))
        elif msg.type == MsgType.SNAPSHOT_RESP and msg.reject:
            pr.become_probe()
            pr.next = pr.match + 1
        elif msg.type == MsgType.APPEND_RESP and msg.reject:
            hint = msg.index
            if msg.log_term > 0:
                hint = self._log.find_conflict_by_term(msg.index, msg.log_term)
            if pr.maybe_decrease(msg.log_index, hint):
                if pr.state == ProgressState.REPLICATE:
                    pr.become_probe()
                self._send_append(msg.src, allow_empty=True)
        elif msg.type in (MsgType.APPEND_RESP, MsgType.SNAPSHOT_RESP):
            self._handle_append_ack(msg.src, pr, msg.index)

    def _handle_append_ack(self, peer: str, pr: Progress, index: int) -> None:
        check(index <= self._log.last_index, f"{self.node_id}: {peer} acked {index} beyond our last index "
                                             f"{self._log.last_index}")
        if pr.maybe_update(index):
            if pr.state == ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state == ProgressState.SNAPSHOT and pr.match + 1 >= self._log.first_index:
                pr.become_probe()
                pr.become_replicate()
            if self._maybe_commit():
                self._bcast_pending = True
            if self._transferee == peer and pr.match == self._log.last_index:
                self._send(MsgType.TIMEOUT_NOW, peer)
        while self._send_append(peer, allow_empty=False):
            pass

    def _commit_allowed(self, index: int) -> bool:
        """Figure 8: a leader commits by counting replicas only entries of its own term."""
        return self._log.term_at(index) == self.term

    def _maybe_commit(self) -> bool:
        matches = sorted((self._persisted if p == self.node_id else self._progress[p].match
                          for p in self._peers), reverse=True)
        index = matches[self._quorum - 1]
        if index <= self.commit_index or not self._commit_allowed(index):
            return False
        self._commit_to(index)
        if self._reads_blocked:
            self._reads_unsent.extend(self._reads_blocked)
            self._reads_blocked = []
            if len(self._peers) == 1:
                self._read_states.extend(ReadState(r, self.commit_index) for r in self._reads_unsent)
                self._reads_unsent = []
        return True

    # --- internals: leader output ----------------------------------------------------------------------
    def _flush(self) -> None:
        """Batching point: proposals and commit advances since the last Ready go out as one APPEND per
        follower, pending ReadIndex requests as one heartbeat round."""
        if self.role != Role.LEADER:
            return
        if self._bcast_pending:
            self._bcast_pending = False
            for p in self._others:
                if self._send_append(p, allow_empty=True):
                    while self._send_append(p, allow_empty=False):   # fill the pipeline window
                        pass
        if self._reads_unsent:
            ctx = self._reads.new_round(self._reads_unsent, self.commit_index, self.node_id)
            self._reads_unsent = []
            self._bcast_heartbeat(ctx)

    def _send_append(self, peer: str, *, allow_empty: bool) -> bool:
        """Send what `peer` needs next (entries, or the snapshot when they are compacted); True if sent."""
        pr = self._progress[peer]
        if pr.paused():
            return False
        prev = pr.next - 1
        prev_term = self._log.term_at(prev)
        if prev_term is None:
            check(prev < self._log.snap_index and self._snapshot is not None,
                  f"{self.node_id}: next {pr.next} for {peer} beyond last index {self._log.last_index}")
            assert self._snapshot is not None
            self._send(MsgType.SNAPSHOT, peer, snapshot=self._snapshot)
            pr.become_snapshot(self._snapshot.index)
            return True
        entries = self._log.slice(pr.next, pr.next + self._cfg.max_append_entries)
        if not entries and not allow_empty:
            return False
        self._send(MsgType.APPEND, peer, log_index=prev, log_term=prev_term, entries=tuple(entries),
                   commit=self.commit_index)
        if entries:
            pr.sent(entries[-1].index)
        elif pr.state == ProgressState.PROBE:
            pr.probe_sent = True
        return bool(entries)

    def _bcast_heartbeat(self, ctx: int) -> None:
        for p in self._others:
            pr = self._progress[p]
            self._send(MsgType.HEARTBEAT, p, commit=min(self.commit_index, pr.match), context=ctx)

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self._cfg.election_ticks:
            self._election_elapsed = 0
            if self._cfg.check_quorum:
                active = 1 + sum(1 for pr in self._progress.values() if pr.recent_active)
                if active < self._quorum:
                    self._become_follower(self.term, "")
                    return
                for pr in self._progress.values():
                    pr.recent_active = False
            self._transferee = ""
        for pr in self._progress.values():
            if pr.state == ProgressState.SNAPSHOT:
                limit = 2 * self._cfg.election_ticks
            elif pr.state == ProgressState.REPLICATE and pr.inflight:
                limit = max(2, self._cfg.election_ticks // 2)
            else:
                pr.stalled_ticks = 0
                continue
            pr.stalled_ticks += 1
            if pr.stalled_ticks > limit:   # the snapshot or the APPENDs are presumed lost: probe again
                pr.become_probe()
                pr.next = pr.match + 1
        if self._heartbeat_elapsed >= self._cfg.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._bcast_heartbeat(self._reads.latest_ctx())


__all__ = ["RaftNode", "Rng", "Message", "CAMPAIGN_TRANSFER"]
