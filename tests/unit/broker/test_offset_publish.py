"""The consumer-offset publish rule of a controller-mode master (controller_mode/offset_publish.py) and the publish
gate of ConsumerOffsetManager: a value becomes visible only when every other SyncStateSet member holds it."""

from __future__ import annotations

from pathlib import Path

from orbitmq.broker.controller_mode.offset_publish import PublishTable
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager

Q0, Q1 = ("T@G", 0), ("T@G", 1)


def test_a_set_of_one_publishes_at_once() -> None:
    t = PublishTable()
    t.local(Q0, 5)
    assert t.publishable() == {Q0: 5} and t.pending() == 0


def test_published_is_the_minimum_over_latest_and_every_members_ack() -> None:
    t = PublishTable({2, 3})
    t.local(Q0, 10)
    assert t.batch_for(2) == {Q0: 10}
    t.acked(2, t.batch_for(2))
    assert t.publishable() == {}  # member 3 holds nothing yet
    t.acked(3, {Q0: 10})
    t.local(Q0, 20)  # a newer commit while the round was in flight
    assert t.publishable() == {Q0: 10} and t.pending() == 1
    assert t.batch_for(2) == {Q0: 20}
    t.acked(2, {Q0: 20})
    assert t.publishable() == {Q0: 10}  # 3 still holds 10
    t.acked(3, {Q0: 20})
    assert t.publishable() == {Q0: 20} and t.pending() == 0


def test_a_member_leaving_the_set_no_longer_holds_publishing_back_and_a_new_one_must_ack() -> None:
    t = PublishTable({2, 3})
    t.local(Q0, 7)
    t.local(Q1, 8)
    t.acked(2, {Q0: 7, Q1: 8})
    assert t.publishable() == {}
    t.set_members({2})
    assert t.publishable() == {Q0: 7, Q1: 8}
    t.set_members({2, 4})
    t.local(Q0, 9)
    t.acked(2, {Q0: 9})
    t.acked(3, {Q0: 9})  # not a member any more: ignored
    assert t.publishable() == {}
    t.acked(4, {Q0: 9})
    assert t.publishable() == {Q0: 9}


def test_a_lower_commit_is_published_once_acknowledged_too() -> None:
    t = PublishTable({2})
    t.local(Q0, 50)
    t.acked(2, {Q0: 50})
    assert t.publishable() == {Q0: 50}
    t.local(Q0, 30)  # a reset backwards
    assert t.publishable() == {} and t.batch_for(2) == {Q0: 30}
    t.acked(2, {Q0: 30})
    assert t.publishable() == {Q0: 30}


def test_the_gate_keeps_commits_invisible_until_published(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.commit("G", "T", 0, 3)
    seen: list[tuple[str, int, int]] = []
    m.set_gate(lambda k, q, o: seen.append((k, q, o)))
    m.commit("G", "T", 0, 3)  # unchanged: nothing to publish
    m.commit("G", "T", 0, 8)
    assert seen == [("T@G", 0, 8)]
    assert m.query("G", "T", 0) == 3 and m.latest("G", "T", 0) == 8
    assert b"{0:3}" in m.encode() and b"0:8" not in m.encode()
    m.persist()
    assert b"0:3" in Path(m.path).read_bytes()
    m.publish("T@G", 0, 8)
    assert m.query("G", "T", 0) == 8 and m.latest("G", "T", 0) == 8
    m.commit("G", "T", 0, 9)
    m.set_gate(None)  # no longer master: the unpublished 9 is dropped
    assert m.latest("G", "T", 0) == 8
    m.commit("G", "T", 0, 10)
    assert m.query("G", "T", 0) == 10
