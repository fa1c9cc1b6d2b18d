"""RaftNode elections by hand-driven messages: pre-vote, vote persistence order, leader lease, check-quorum,
stale/higher terms, leadership transfer, single-node clusters."""

from __future__ import annotations

from orbitmq.raft.messages import Entry, HardState, Message, MsgType, RaftConfig, Ready, Role
from orbitmq.raft.node import CAMPAIGN_TRANSFER, RaftNode

PEERS = ("n0", "n1", "n2")


class MinRng:
    """randrange(a, b) -> a: the election timeout is exactly election_ticks."""

    def randrange(self, start: int, stop: int) -> int:
        return start


def mk(node_id: str = "n0", peers: tuple[str, ...] = PEERS, **kw: object) -> RaftNode:
    hs = kw.pop("hard_state", None)
    entries = kw.pop("entries", None)
    cfg = RaftConfig(node_id, peers, **kw)  # type: ignore[arg-type]
    return RaftNode(cfg, MinRng(), hard_state=hs, entries=entries)  # type: ignore[arg-type]


def take(node: RaftNode) -> Ready:
    rd = node.ready()
    node.advance(rd)
    return rd


def sent(rd: Ready, kind: MsgType) -> list[Message]:
    return [m for m in rd.messages if m.type == kind]


def tick_n(node: RaftNode, n: int) -> None:
    for _ in range(n):
        node.tick()


def resp(kind: MsgType, src: str, dst: str, term: int, **kw: object) -> Message:
    return Message(kind, src, dst, term, **kw)  # type: ignore[arg-type]


def elect(node: RaftNode) -> None:
    """Drive `node` (n0 of PEERS) to leadership with n1's help."""
    tick_n(node, node.config.election_ticks)
    take(node)
    node.step(resp(MsgType.PRE_VOTE_RESP, "n1", node.node_id, node.term + 1))
    take(node)
    node.step(resp(MsgType.VOTE_RESP, "n1", node.node_id, node.term))
    assert node.role == Role.LEADER


def test_election_runs_prevote_then_vote_and_appends_a_noop() -> None:
    n = mk()
    tick_n(n, 9)
    assert n.role == Role.FOLLOWER
    n.tick()
    assert n.role == Role.PRE_CANDIDATE and n.term == 0
    rd = take(n)
    pre = sent(rd, MsgType.PRE_VOTE)
    assert sorted(m.dst for m in pre) == ["n1", "n2"] and all(m.term == 1 for m in pre)
    assert rd.hard_state is None                       # pre-vote changes nothing durable
    n.step(resp(MsgType.PRE_VOTE_RESP, "n1", "n0", 1))
    assert n.role == Role.CANDIDATE and n.term == 1 and n.vote == "n0"
    rd = take(n)
    assert rd.hard_state == HardState(1, "n0", 0)
    assert sorted(m.dst for m in sent(rd, MsgType.VOTE)) == ["n1", "n2"]
    n.step(resp(MsgType.VOTE_RESP, "n2", "n0", 1))
    assert n.role == Role.LEADER and n.leader_id == "n0"
    rd = take(n)
    assert rd.entries == [Entry(1, 1, b"")]
    assert {m.dst for m in sent(rd, MsgType.APPEND)} == {"n1", "n2"}


def test_failed_prevote_does_not_bump_the_term() -> None:
    n = mk()
    for _ in range(3):
        tick_n(n, 10)
        assert n.role == Role.PRE_CANDIDATE
        rd = take(n)
        assert sent(rd, MsgType.PRE_VOTE) and not sent(rd, MsgType.VOTE)
    n.step(resp(MsgType.PRE_VOTE_RESP, "n1", "n0", 0, reject=True))
    n.step(resp(MsgType.PRE_VOTE_RESP, "n2", "n0", 0, reject=True))
    assert n.role == Role.FOLLOWER and n.term == 0 and n.vote == ""
    assert take(n).hard_state is None


def test_prevote_is_refused_to_a_shorter_log_and_granted_without_changing_our_term() -> None:
    n = mk("n1", hard_state=HardState(2, "", 0), entries=[Entry(1, 1), Entry(2, 2)])
    n.step(Message(MsgType.PRE_VOTE, "n0", "n1", 3, log_index=1, log_term=1))
    rd = take(n)
    assert sent(rd, MsgType.PRE_VOTE_RESP)[0].reject and n.term == 2
    n.step(Message(MsgType.PRE_VOTE, "n2", "n1", 3, log_index=2, log_term=2))
    rd = take(n)
    (r,) = sent(rd, MsgType.PRE_VOTE_RESP)
    assert not r.reject and r.term == 3
    assert n.term == 2 and n.vote == "" and rd.hard_state is None


def test_vote_is_in_the_hard_state_of_the_ready_that_carries_the_grant() -> None:
    n = mk("n1")
    inflight = n.ready()                               # some Ready is being persisted
    n.step(Message(MsgType.VOTE, "n0", "n1", 1))
    assert not n.has_ready()                           # nothing leaves before the previous Ready is done
    n.advance(inflight)
    rd = n.ready()
    (grant,) = sent(rd, MsgType.VOTE_RESP)
    assert not grant.reject
    assert rd.hard_state == HardState(1, "n0", 0)      # persisted (step 1) before it is sent (step 2)
    n.advance(rd)
    n.step(Message(MsgType.VOTE, "n2", "n1", 1))       # second candidate, same term
    assert sent(take(n), MsgType.VOTE_RESP)[0].reject


def test_candidate_with_lost_vote_returns_to_follower_in_its_term() -> None:
    n = mk(pre_vote=False)
    tick_n(n, 10)
    assert n.role == Role.CANDIDATE and n.term == 1
    take(n)
    n.step(resp(MsgType.VOTE_RESP, "n1", "n0", 1, reject=True))
    n.step(resp(MsgType.VOTE_RESP, "n2", "n0", 1, reject=True))
    assert n.role == Role.FOLLOWER and n.term == 1


def test_follower_ignores_votes_while_its_leader_is_live() -> None:
    n = mk("n1")
    n.step(Message(MsgType.HEARTBEAT, "n0", "n1", 1))
    take(n)
    n.step(Message(MsgType.VOTE, "n2", "n1", 2, log_index=5, log_term=1))
    assert n.term == 1 and not n.has_ready()           # no term bump, no answer
    n.step(Message(MsgType.PRE_VOTE, "n2", "n1", 2, log_index=5, log_term=1))
    assert not n.has_ready()
    n.step(Message(MsgType.VOTE, "n2", "n1", 2, log_index=5, log_term=1, context=CAMPAIGN_TRANSFER))
    assert n.term == 2 and not sent(take(n), MsgType.VOTE_RESP)[0].reject   # a transfer bypasses the lease


def test_follower_votes_once_the_leader_went_quiet() -> None:
    n = mk("n1", election_ticks=10)
    n.step(Message(MsgType.HEARTBEAT, "n0", "n1", 1))
    take(n)
    tick_n(n, 10)                                      # a full minimum timeout without the leader
    assert n.role == Role.PRE_CANDIDATE                # (MinRng: it also timed out itself)
    n.step(Message(MsgType.VOTE, "n2", "n1", 2, log_index=5, log_term=1))
    assert n.term == 2 and n.vote == "n2"


def test_check_quorum_leader_steps_down_without_a_quorum() -> None:
    n = mk()
    elect(n)
    take(n)
    tick_n(n, 9)
    n.step(resp(MsgType.HEARTBEAT_RESP, "n2", "n0", n.term))
    n.tick()                                           # round 1 ends: n2 was active -> quorum of 2
    assert n.role == Role.LEADER
    tick_n(n, 10)                                      # round 2: nobody answered
    assert n.role == Role.FOLLOWER and n.leader_id == "" and n.term == 1


def test_leader_without_check_quorum_stays() -> None:
    n = mk(check_quorum=False)
    elect(n)
    tick_n(n, 50)
    assert n.role == Role.LEADER


def test_stale_messages_are_ignored_and_a_higher_term_steps_down() -> None:
    n = mk()
    elect(n)
    take(n)
    n.step(Message(MsgType.APPEND_RESP, "n1", "n0", 0, index=5))   # stale term
    assert n.role == Role.LEADER and n.status()["progress"]["n1"]["match"] == 0  # type: ignore[index]
    n.step(Message(MsgType.APPEND_RESP, "n2", "n0", 7))              # newer term
    assert n.role == Role.FOLLOWER and n.term == 7 and n.vote == ""


def test_stale_leader_is_told_the_newer_term() -> None:
    n = mk("n1", hard_state=HardState(5, "", 0))
    n.step(Message(MsgType.APPEND, "n0", "n1", 3, entries=(Entry(3, 1, b"x"),)))
    rd = take(n)
    (r,) = rd.messages
    assert r.type == MsgType.APPEND_RESP and r.term == 5 and n.last_index == 0


def test_leadership_transfer_sends_timeout_now_and_target_campaigns_at_once() -> None:
    n = mk()
    elect(n)
    take(n)
    n.step(resp(MsgType.APPEND_RESP, "n1", "n0", 1, index=1))
    take(n)
    assert n.transfer_leadership("n1") and not n.transfer_leadership("nx")
    assert n.propose(b"x") is None                     # no proposals while transferring
    (tn,) = sent(take(n), MsgType.TIMEOUT_NOW)
    assert tn.dst == "n1"
    f = mk("n1")
    f.step(Message(MsgType.HEARTBEAT, "n0", "n1", 1))
    take(f)
    f.step(tn)
    assert f.role == Role.CANDIDATE and f.term == 2    # no pre-vote round
    votes = sent(take(f), MsgType.VOTE)
    assert votes and all(v.context == CAMPAIGN_TRANSFER for v in votes)


def test_transfer_waits_for_the_target_to_catch_up() -> None:
    n = mk()
    elect(n)
    take(n)
    assert n.transfer_leadership("n2")
    rd = take(n)
    assert not sent(rd, MsgType.TIMEOUT_NOW)
    n.step(resp(MsgType.APPEND_RESP, "n2", "n0", 1, index=1))
    assert [m.dst for m in sent(take(n), MsgType.TIMEOUT_NOW)] == ["n2"]


def test_single_node_elects_itself_and_commits_after_persisting() -> None:
    n = mk("solo", ("solo",))
    tick_n(n, 10)
    assert n.role == Role.LEADER and n.term == 1
    rd = n.ready()
    assert rd.entries == [Entry(1, 1, b"")] and rd.committed == [] and n.commit_index == 0
    n.advance(rd)                                      # now the no-op is durable: it counts
    assert n.commit_index == 1
    e = n.propose(b"a")
    assert e == Entry(1, 2, b"a")
    assert n.read_index(9)
    rd = n.ready()
    assert rd.committed == [Entry(1, 1, b"")] and rd.entries == [e] and n.commit_index == 1
    assert [r.request_id for r in rd.read_states] == [9]
    n.advance(rd)
    assert n.commit_index == 2 and take(n).committed == [e]
