"""Raft data types shared by the sans-IO core, its storage, its driver and the simulator (no I/O here).

Entry / HardState / Snapshot are what gets persisted; Message is what travels between peers; Ready is what the
core hands its driver after each step: persist first (hard_state, entries, snapshot), then send messages, then
apply committed entries (etcd's Ready order). Node ids are small strings (the `controllerDLegerPeers` ids, e.g. "n0").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


class MsgType(IntEnum):
    PRE_VOTE = 1          # term = the term the sender would campaign in (current + 1); not persisted
    PRE_VOTE_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    APPEND = 5            # log_index/log_term = entry preceding `entries`; commit = leader's commit
    APPEND_RESP = 6       # reject=False: index = last index now matching; reject=True: index = hint
    HEARTBEAT = 7         # commit = min(leader commit, follower match); context = ReadIndex round id (0 = none)
    HEARTBEAT_RESP = 8    # context echoed
    SNAPSHOT = 9          # snapshot carried whole (small state machines: controller metadata)
    SNAPSHOT_RESP = 10    # index = snapshot index now installed (reject=True: could not)
    TIMEOUT_NOW = 11      # leadership transfer: campaign at once, skipping pre-vote


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    data: bytes = b""     # b"" = the leader's no-op entry on election


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    vote: str = ""        # "" = voted for nobody in `term`
    commit: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    index: int            # last log index the snapshot covers
    term: int             # term of that entry
    data: bytes = b""     # the state machine's serialized state


@dataclass(slots=True)
class Message:
    type: MsgType
    src: str
    dst: str
    term: int
    log_index: int = 0
    log_term: int = 0
    commit: int = 0
    entries: tuple[Entry, ...] = ()
    index: int = 0
    reject: bool = False
    context: int = 0
    snapshot: Snapshot | None = None


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read is safe once the local applied index reaches `index` (ReadIndex)."""
    request_id: int
    index: int


@dataclass(slots=True)
class Ready:
    """One batch of work for the driver, in this order:
    1. persist `hard_state` (if not None), `snapshot` (if not None: install it, drop stored entries <= its
       index, and drop ALL stored entries unless the stored log holds the snapshot's own entry with the same
       term -- stale entries that do not continue the snapshot must not survive a restart),
       then `entries` (first truncate the stored log from entries[0].index on, then append) -- fsynced;
    2. send `messages`;
    3. apply `committed` entries in order (the snapshot, if any, is applied before them);
    4. hand `read_states` to waiting readers once applied >= their index;
    5. call node.advance(ready).
    `compacted_to` > 0: the application took a snapshot up to that index (node.compact); storage may drop
    entries <= compacted_to after persisting `compact_snapshot`.
    """
    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    messages: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    compact_snapshot: Snapshot | None = None

    def empty(self) -> bool:
        return (self.hard_state is None and not self.entries and self.snapshot is None and not self.messages
                and not self.committed and not self.read_states and self.compact_snapshot is None)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timing is in ticks; the driver maps one tick to `tick_ms` of real time."""
    node_id: str
    peers: tuple[str, ...]                 # all voters, including node_id
    election_ticks: int = 10               # randomized in [election_ticks, 2 * election_ticks)
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True              # leader steps down without a quorum's contact for election_ticks
    max_append_entries: int = 256          # entries per APPEND message
    max_inflight_appends: int = 64         # pipelined APPENDs per follower before waiting for acks
    tick_ms: int = 100

    def validate(self) -> None:
        if self.node_id not in self.peers:
            raise ValueError(f"node id {self.node_id!r} is not one of the peers {list(self.peers)}")
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"duplicate peer ids in {list(self.peers)}")
        if self.election_ticks <= 3 * self.heartbeat_ticks:
            raise ValueError("election_ticks must be more than 3 x heartbeat_ticks")
