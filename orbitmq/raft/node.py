"""RaftNode: the sans-IO Raft core (etcd/raft style). Inputs: tick(), step(message), propose(), read_index();
output: Ready batches (persist -> send -> apply), taken with ready() and acknowledged with advance().

Must not import asyncio, socket, threading, time or random: the driver (raft/driver.py) or the simulator
(testing/raft_sim.py) owns all I/O, clocks and randomness (an `rng` with randrange(a, b) is injected).
"""

from __future__ import annotations

from typing import Protocol

from orbitmq.raft.messages import Entry, HardState, Message, RaftConfig, Ready, Role, Snapshot


class Rng(Protocol):
    def randrange(self, start: int, stop: int) -> int: ...


class RaftNode:
    """Public API (the contract the driver, the simulator and the controller code against).

    Construction restores the persisted state: `hard_state`, the latest `snapshot` (or None) and the log
    `entries` that follow it (contiguous, entries[0].index == snapshot.index + 1, or 1 without snapshot).
    `applied` is the index the state machine already reflects (the snapshot index after a restart: the driver
    re-applies committed entries after it; committed entries come out of ready() once commit is known again).
    """

    def __init__(self, config: RaftConfig, rng: Rng, *, hard_state: HardState | None = None,
                 snapshot: Snapshot | None = None, entries: list[Entry] | None = None) -> None:
        raise NotImplementedError

    # --- read-only state -------------------------------------------------------------------------------
    node_id: str
    role: Role
    term: int
    leader_id: str            # "" when unknown
    commit_index: int
    applied_index: int        # highest index handed out in Ready.committed (or covered by an applied snapshot)
    last_index: int
    first_index: int          # first index still in the in-memory log (snapshot.index + 1)

    def status(self) -> dict[str, object]:
        """id, role, term, leader, vote, commit, applied, last_index, first_index, per-peer match/next (leader)."""
        raise NotImplementedError

    # --- inputs ----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """One logical clock tick: election timeout (randomized in [election_ticks, 2*election_ticks)),
        heartbeats on the leader, check-quorum step-down."""
        raise NotImplementedError

    def step(self, msg: Message) -> None:
        """Handle one message from a peer (any type in MsgType). Messages for another node id are ignored."""
        raise NotImplementedError

    def propose(self, data: bytes) -> Entry | None:
        """Leader only: append `data` as a new entry and return it (its index and term identify the proposal:
        it succeeded iff an entry with this index AND term is later applied). None when not the leader
        (the caller answers NOT_LEADER with `leader_id` as a hint)."""
        raise NotImplementedError

    def read_index(self, request_id: int) -> bool:
        """Leader only: start a linearizable read. A ReadState(request_id, index) comes out of a later Ready
        once a quorum confirmed leadership (heartbeat round) and the leader has committed an entry of its
        term. False when not the leader."""
        raise NotImplementedError

    def compact(self, index: int, data: bytes) -> None:
        """The application serialized its state as of applied index `index` (<= applied_index): keep it as the
        snapshot, drop in-memory entries <= index; the next Ready carries compact_snapshot for storage.
        Followers too far behind then get a SNAPSHOT message."""
        raise NotImplementedError

    def transfer_leadership(self, to: str) -> bool:
        """Leader only: once `to` has caught up, send it TIMEOUT_NOW. False if not leader or unknown peer."""
        raise NotImplementedError

    # --- outputs ---------------------------------------------------------------------------------------
    def has_ready(self) -> bool:
        raise NotImplementedError

    def ready(self) -> Ready:
        """Take the pending work (see Ready's docstring for the order the driver must follow)."""
        raise NotImplementedError

    def advance(self, ready: Ready) -> None:
        """The driver persisted, sent and applied `ready`: the node may now count its own persisted entries
        toward the commit quorum and hand out the next batch."""
        raise NotImplementedError


__all__ = ["RaftNode", "Rng", "Message"]
