"""RaftNode replication by hand-driven messages: conflict resolution and fast back-off, the Figure-8 commit rule,
the leader's own fsync before counting, batching/pipelining, ReadIndex, snapshots, restart."""

from __future__ import annotations

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
from orbitmq.raft.node import RaftNode

PEERS = ("n0", "n1", "n2")


class MinRng:
    def randrange(self, start: int, stop: int) -> int:
        return start


def mk(node_id: str = "n0", peers: tuple[str, ...] = PEERS, *, hard_state: HardState | None = None,
       snapshot: Snapshot | None = None, entries: list[Entry] | None = None, **kw: object) -> RaftNode:
    cfg = RaftConfig(node_id, peers, **kw)  # type: ignore[arg-type]
    return RaftNode(cfg, MinRng(), hard_state=hard_state, snapshot=snapshot, entries=entries)


def take(node: RaftNode) -> Ready:
    rd = node.ready()
    node.advance(rd)
    return rd


def sent(rd: Ready, kind: MsgType, dst: str | None = None) -> list[Message]:
    return [m for m in rd.messages if m.type == kind and (dst is None or m.dst == dst)]


def elect(node: RaftNode) -> None:
    for _ in range(node.config.election_ticks):
        node.tick()
    take(node)
    node.step(Message(MsgType.PRE_VOTE_RESP, "n1", node.node_id, node.term + 1))
    take(node)
    node.step(Message(MsgType.VOTE_RESP, "n1", node.node_id, node.term))
    assert node.role == Role.LEADER


def pump(nodes: dict[str, RaftNode], rounds: int = 50) -> None:
    """Deliver every message among `nodes` until nothing is left to do."""
    for _ in range(rounds):
        busy = False
        for n in nodes.values():
            if n.has_ready():
                busy = True
                rd = take(n)
                for m in rd.messages:
                    if m.dst in nodes:
                        nodes[m.dst].step(m)
        if not busy:
            return


def log_of(n: RaftNode) -> list[tuple[int, int]]:
    return [(e.index, e.term) for e in n.log.slice(n.first_index, n.last_index + 1)]


def test_follower_truncates_a_conflicting_suffix_and_appends() -> None:
    f = mk("n1", hard_state=HardState(2, "", 1),
           entries=[Entry(1, 1), Entry(1, 2), Entry(2, 3), Entry(2, 4)])
    f.step(Message(MsgType.APPEND, "n0", "n1", 3, log_index=2, log_term=1, commit=3,
                   entries=(Entry(3, 3, b"a"), Entry(3, 4, b"b"))))
    rd = take(f)
    assert rd.entries == [Entry(3, 3, b"a"), Entry(3, 4, b"b")]    # storage truncates from index 3
    assert log_of(f) == [(1, 1), (2, 1), (3, 3), (4, 3)]
    assert sent(rd, MsgType.APPEND_RESP)[0].index == 4 and f.commit_index == 3
    assert [e.index for e in rd.committed] == [1, 2, 3]             # all already in this or an earlier Ready


def test_follower_keeps_its_longer_log_on_a_stale_shorter_append() -> None:
    f = mk("n1", hard_state=HardState(1, "", 0), entries=[Entry(1, 1), Entry(1, 2), Entry(1, 3)])
    f.step(Message(MsgType.APPEND, "n0", "n1", 1, log_index=0, log_term=0, entries=(Entry(1, 1),)))
    rd = take(f)
    assert f.last_index == 3 and rd.entries == []
    assert sent(rd, MsgType.APPEND_RESP)[0].index == 1


def test_reject_carries_a_hint_and_the_leader_skips_back_fast() -> None:
    f = mk("n1", hard_state=HardState(3, "", 0), entries=[Entry(1, 1)] + [Entry(2, i) for i in range(2, 9)])
    f.step(Message(MsgType.APPEND, "n0", "n1", 4, log_index=8, log_term=3))
    r = sent(take(f), MsgType.APPEND_RESP)[0]
    assert r.reject and r.log_index == 8 and (r.index, r.log_term) == (8, 2)
    # a leader whose log holds terms 1, 1, 3...: the term-2 suffix is skipped in one step, not one by one
    ld = mk("n0", hard_state=HardState(3, "", 0), entries=[Entry(1, 1), Entry(1, 2)] + [Entry(3, i) for i in range(3, 9)])
    elect(ld)
    take(ld)
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", ld.term, reject=True, log_index=8, index=8, log_term=2))
    (probe,) = sent(take(ld), MsgType.APPEND, "n1")
    assert probe.log_index == 2


def test_divergent_logs_converge_on_the_leader() -> None:
    ld = mk("n0", hard_state=HardState(3, "", 2), entries=[Entry(1, 1), Entry(1, 2), Entry(3, 3), Entry(3, 4)])
    f1 = mk("n1", hard_state=HardState(2, "", 2), entries=[Entry(1, 1), Entry(1, 2)] + [Entry(2, i) for i in range(3, 12)])
    f2 = mk("n2", hard_state=HardState(3, "", 2), entries=[Entry(1, 1), Entry(1, 2), Entry(3, 3)])
    nodes = {"n0": ld, "n1": f1, "n2": f2}
    for _ in range(10):
        ld.tick()
    pump(nodes)
    assert ld.role == Role.LEADER and ld.term == 4
    for i in range(3):
        ld.propose(f"x{i}".encode())
    pump(nodes)
    assert log_of(f1) == log_of(ld) == log_of(f2)
    assert f1.commit_index == f2.commit_index == ld.commit_index == ld.last_index == 8


def test_figure8_an_older_term_entry_is_not_committed_by_counting() -> None:
    ld = mk("n0", hard_state=HardState(2, "", 1), entries=[Entry(1, 1), Entry(2, 2)])
    elect(ld)                                          # term 3, no-op at index 3
    take(ld)                                           # the no-op is durable
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 3, index=2))
    assert ld.commit_index == 1                        # (2, term 2) is on a quorum but is not of term 3
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 3, index=3))
    assert ld.commit_index == 3                        # the no-op commits, and index 2 with it


def test_leader_counts_its_own_entry_only_after_the_ready_is_persisted() -> None:
    ld = mk()
    elect(ld)
    rd = ld.ready()                                    # carries the no-op; not yet persisted
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=1))
    assert ld.commit_index == 0                        # n1 + a leader that has not fsynced is no quorum
    ld.advance(rd)
    assert ld.commit_index == 1


def test_followers_ack_quorum_commits_without_the_leaders_fsync() -> None:
    ld = mk()
    elect(ld)
    ld.ready()
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=1))
    ld.step(Message(MsgType.APPEND_RESP, "n2", "n0", 1, index=1))
    assert ld.commit_index == 1


def test_appends_are_batched_and_pipelined_within_the_window() -> None:
    ld = mk(max_append_entries=2, max_inflight_appends=3)
    elect(ld)
    take(ld)
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=1))   # n1 -> replicate
    take(ld)
    for i in range(10):
        ld.propose(f"p{i}".encode())
    apps = sent(take(ld), MsgType.APPEND, "n1")
    assert [len(m.entries) for m in apps] == [2, 2, 2]              # 3 in flight, 2 entries each
    assert [m.log_index for m in apps] == [1, 3, 5]
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=3))   # frees one slot
    apps = sent(take(ld), MsgType.APPEND, "n1")
    assert [m.log_index for m in apps] == [7]
    # n2 never answered: it is probed with a single APPEND, not flooded
    assert len(sent(take(ld), MsgType.APPEND, "n2")) <= 1


def _read_round(ld: RaftNode) -> int:
    hbs = [m for m in sent(take(ld), MsgType.HEARTBEAT) if m.context]
    assert hbs and len({m.context for m in hbs}) == 1
    return hbs[0].context


def test_read_index_waits_for_a_commit_in_term_and_a_heartbeat_quorum() -> None:
    peers = ("n0", "n1", "n2", "n3", "n4")
    ld = mk(peers=peers)
    for _ in range(10):
        ld.tick()
    take(ld)
    for p in ("n1", "n2"):
        ld.step(Message(MsgType.PRE_VOTE_RESP, p, "n0", 1))
    take(ld)
    for p in ("n1", "n2"):
        ld.step(Message(MsgType.VOTE_RESP, p, "n0", 1))
    assert ld.role == Role.LEADER
    take(ld)
    assert ld.read_index(42)
    assert not [m for m in take(ld).messages if m.type == MsgType.HEARTBEAT and m.context]  # no commit in term yet
    for p in ("n1", "n2"):
        ld.step(Message(MsgType.APPEND_RESP, p, "n0", 1, index=1))  # the no-op commits
    ctx1 = _read_round(ld)
    assert ld.read_index(43)
    ctx2 = _read_round(ld)
    assert ctx2 > ctx1
    ld.step(Message(MsgType.HEARTBEAT_RESP, "n3", "n0", 1, context=ctx2))
    assert not take(ld).read_states                    # leader + n3 is no quorum of 5
    ld.step(Message(MsgType.HEARTBEAT_RESP, "n4", "n0", 1, context=ctx1))
    assert take(ld).read_states == [ReadState(42, 1)]  # ctx1 confirmed by n3 (later round) and n4; ctx2 not
    ld.step(Message(MsgType.HEARTBEAT_RESP, "n1", "n0", 1, context=ctx2))
    assert take(ld).read_states == [ReadState(43, 1)]


def test_read_index_is_refused_by_a_follower() -> None:
    assert not mk("n1").read_index(1)


def test_follower_installs_a_snapshot_then_applies_after_it() -> None:
    f = mk("n1", hard_state=HardState(1, "", 1), entries=[Entry(1, 1), Entry(1, 2)])
    snap = Snapshot(10, 2, b"state@10")
    f.step(Message(MsgType.SNAPSHOT, "n0", "n1", 2, snapshot=snap))
    rd = take(f)
    assert rd.snapshot == snap and rd.entries == [] and rd.committed == []
    assert f.commit_index == f.applied_index == 10 and f.first_index == 11
    assert sent(rd, MsgType.SNAPSHOT_RESP)[0].index == 10
    f.step(Message(MsgType.APPEND, "n0", "n1", 2, log_index=10, log_term=2, commit=11,
                   entries=(Entry(2, 11, b"y"),)))
    rd = take(f)
    assert rd.entries == [Entry(2, 11, b"y")] and rd.committed == [Entry(2, 11, b"y")]


def test_leader_sends_a_snapshot_to_a_follower_behind_its_first_index() -> None:
    ld = mk()
    elect(ld)
    take(ld)
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=1))
    for i in range(5):
        ld.propose(b"%d" % i)
    take(ld)
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=6))
    take(ld)
    assert ld.applied_index == 6
    ld.compact(5, b"state@5")
    rd = take(ld)
    assert rd.compact_snapshot == Snapshot(5, 1, b"state@5") and ld.first_index == 6
    ld.step(Message(MsgType.HEARTBEAT_RESP, "n2", "n0", 1))   # n2 (match 0) asks for more
    (s,) = sent(take(ld), MsgType.SNAPSHOT, "n2")
    assert s.snapshot == Snapshot(5, 1, b"state@5")
    ld.step(Message(MsgType.SNAPSHOT_RESP, "n2", "n0", 1, index=5))
    apps = sent(take(ld), MsgType.APPEND, "n2")
    assert apps and apps[0].log_index == 5 and [e.index for e in apps[0].entries] == [6]


def test_restart_replays_committed_entries_after_the_snapshot() -> None:
    n = mk("n1", hard_state=HardState(2, "n0", 4), snapshot=Snapshot(2, 1, b"s"),
           entries=[Entry(1, 3, b"c"), Entry(2, 4, b"d"), Entry(2, 5, b"e")])
    assert (n.term, n.vote, n.commit_index, n.applied_index, n.first_index, n.last_index) == (2, "n0", 4, 2, 3, 5)
    rd = take(n)
    assert rd.hard_state is None and rd.entries == []
    assert [e.index for e in rd.committed] == [3, 4]


def test_commit_is_never_beyond_what_the_follower_holds() -> None:
    f = mk("n1", hard_state=HardState(1, "", 0), entries=[Entry(1, 1), Entry(1, 2), Entry(1, 3)])
    f.step(Message(MsgType.APPEND, "n0", "n1", 1, log_index=1, log_term=1, commit=9))
    assert f.commit_index == 1                         # only what this APPEND proved to match


def test_lost_appends_are_resent_after_a_stall() -> None:
    ld = mk(election_ticks=10)
    elect(ld)
    take(ld)
    ld.step(Message(MsgType.APPEND_RESP, "n1", "n0", 1, index=1))   # n1 -> replicate
    take(ld)
    ld.propose(b"a")
    (lost,) = sent(take(ld), MsgType.APPEND, "n1")                    # never delivered
    assert lost.log_index == 1
    for _ in range(5):
        ld.tick()
        ld.step(Message(MsgType.HEARTBEAT_RESP, "n1", "n0", 1))
        assert not sent(take(ld), MsgType.APPEND, "n1")              # still trusting the pipeline
    ld.tick()
    ld.step(Message(MsgType.HEARTBEAT_RESP, "n1", "n0", 1))
    (again,) = sent(take(ld), MsgType.APPEND, "n1")
    assert again.log_index == 1 and [e.data for e in again.entries] == [b"a"]
