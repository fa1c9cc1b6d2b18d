"""Raft broker groups replicate admin metadata (issue 14, docs/design/raft-group.md "Metadata"): three in-process
brokers with enableDLegerCommitLog in one event loop. Topic deletion and subscription-group create/update/delete
go through the leader's admin handlers as Raft commands applied on every member (the store's queues of a deleted
topic go too, so adoption from data cannot bring it back); consumer offsets follow as OFFSET_DELTA entries within
a few hundred ms; a member restarted after snapshots, and one that was down meanwhile, hold the same metadata."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson

from orbitmq.broker import Broker
from orbitmq.broker.raft_mode.codec import METADATA_PART, OFFSET_DELTA, decode_snapshot
from orbitmq.broker.raft_mode.service import OFFSETS_EVERY_S, RaftGroupService
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.store.results import MessageInner
from tests.unit.broker.raft_inprocess import raft_broker, raft_peers, until

IDS = ["n0", "n1", "n2"]


def _queue_topics(svc: RaftGroupService) -> set[str]:
    return {topic for topic, _ in svc.real_store.cq_table.queue_max_offsets()}


def _svc(b: Broker) -> RaftGroupService:
    return b.ctx.services["raft_group"]  # type: ignore[return-value]


async def _call(svc: RaftGroupService, code: int, ext: dict[str, str], body: bytes | None = None) -> RemotingCommand:
    handler = svc.handlers()[code]
    out = handler(None, RemotingCommand.request(code, ext, body))
    return await out if asyncio.iscoroutine(out) else out


def _group_body(name: str, retry_max: int) -> bytes:
    return orjson.dumps({"groupName": name, "consumeEnable": True, "consumeFromMinEnable": True,
                         "consumeBroadcastEnable": False, "retryQueueNums": 1, "retryMaxTimes": retry_max,
                         "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True})


def test_admin_metadata_and_offsets_replicate_through_the_log(tmp_path: Path) -> None:
    async def main() -> None:
        peers = raft_peers(IDS)
        brokers = {i: raft_broker(tmp_path, peers, i, "raft-m", raft_snapshot_every=8) for i in IDS}
        for b in brokers.values():
            await b.start()
        try:
            def agreed() -> RaftGroupService | None:
                svcs = [_svc(b) for b in brokers.values()]
                lead = next((s for s in svcs if s.driver.is_leader), None)
                return lead if lead is not None and {s.driver.leader_id for s in svcs} == {lead.self_id} else None

            leader = await until("a leader every member knows", agreed)
            followers = [_svc(b) for i, b in brokers.items() if i != leader.self_id]
            every = [leader, *followers]

            # a follower refuses admin changes as a RocketMQ slave does
            refused = await _call(followers[0], RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicA"})
            assert refused.code == ResponseCode.SYSTEM_ERROR and "slave" in (refused.remark or "")

            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": "TopicA", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            await until("TopicA on every member", lambda: all(s.ctx.topics.get("TopicA") for s in every), 5)
            for q in range(2):
                put = await leader.ctx.store.put_message(MessageInner("TopicA", q, b"x", {}))
                assert put.ok, put
            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, _group_body("GroupA", 5))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            # applied on the leader before the answer, on the followers at their apply of the same entry
            assert leader.ctx.groups.get("GroupA").retry_max_times == 5  # type: ignore[union-attr]
            await until("GroupA on every member", lambda: all(
                (g := s.ctx.groups.get("GroupA")) is not None and g.retry_max_times == 5 for s in every), 5)
            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, _group_body("GroupA", 9))
            assert resp.code == ResponseCode.SUCCESS
            await until("GroupA updated on every member", lambda: all(
                s.ctx.groups.get("GroupA").retry_max_times == 9 for s in every), 5)  # type: ignore[union-attr]

            # consumer offsets committed on the leader reach the followers within a few delta rounds
            committed = time.monotonic()
            leader.ctx.offsets.commit("GroupA", "TopicA", 0, 1)
            leader.ctx.offsets.commit("GroupA", "TopicA", 1, 1)
            await until("the offsets on every follower", lambda: all(
                s.ctx.offsets.query("GroupA", "TopicA", 1) == 1 for s in followers), 5)
            lag = time.monotonic() - committed
            assert lag < 20 * OFFSETS_EVERY_S, f"offsets reached the followers after {lag:.2f} s"
            assert leader.offset_deltas >= 1

            # a topic deletion removes config, offsets and queues everywhere; adoption cannot bring it back
            await until("TopicA's queues on every member", lambda: all("TopicA" in _queue_topics(s) for s in every))
            resp = await _call(leader, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicA"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            await until("TopicA gone everywhere", lambda: all("TopicA" not in s.ctx.topics for s in every), 5)
            for s in every:
                s.adopt_topics()
                assert "TopicA" not in s.ctx.topics, s.self_id
                assert "TopicA" not in _queue_topics(s), s.self_id
                assert s.ctx.offsets.query("GroupA", "TopicA", 0) == -1

            # a group deletion with removeOffset
            leader.ctx.offsets.commit("GroupB", "TopicB", 0, 3)
            await until("GroupB offsets on the followers", lambda: all(
                s.ctx.offsets.query("GroupB", "TopicB", 0) == 3 for s in followers), 5)
            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, _group_body("GroupB", 2))
            assert resp.code == ResponseCode.SUCCESS
            resp = await _call(leader, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                               {"groupName": "GroupB", "removeOffset": "true"})
            assert resp.code == ResponseCode.SUCCESS
            await until("GroupB gone everywhere", lambda: all(
                s.ctx.groups.get("GroupB") is None and s.ctx.offsets.query("GroupB", "TopicB", 0) == -1
                for s in every), 5)

            # the group snapshot carries the metadata
            _, _, parts = decode_snapshot(leader.sm.snapshot())
            meta = orjson.loads(parts[METADATA_PART])
            assert "TopicA" in meta["deleted"] and not any(t["topicName"] == "TopicA" for t in meta["topics"])
            assert any(g["groupName"] == "GroupA" for g in meta["groups"])

            # a follower goes down; meanwhile the leader changes metadata and compacts its log several times
            down = followers[1]
            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, _group_body("GroupD", 3))
            assert resp.code == ResponseCode.SUCCESS
            assert (await leader.ctx.store.put_message(MessageInner("TopicF", 0, b"f", {}))).ok
            await until("GroupD and TopicF on the member going down", lambda: down.ctx.groups.get("GroupD")
                         is not None and down.adopt_topics() is None and "TopicF" in down.ctx.topics, 5)
            await brokers[down.self_id].stop()
            assert "TopicF" in _queue_topics(leader)
            for code, ext in ((RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GroupD"}),
                              (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicF"})):
                assert (await _call(leader, code, ext)).code == ResponseCode.SUCCESS
            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, _group_body("GroupC", 4))
            assert resp.code == ResponseCode.SUCCESS
            resp = await _call(leader, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": "TopicC", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
            assert resp.code == ResponseCode.SUCCESS
            for n in range(20):  # > 2 * raftSnapshotEvery entries: the member comes back behind the compaction
                assert (await leader.ctx.store.put_message(MessageInner("TopicC", 0, b"c%d" % n, {}))).ok
            resp = await _call(leader, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicC"})
            assert resp.code == ResponseCode.SUCCESS
            leader.ctx.offsets.commit("GroupA", "TopicD", 0, 42)
            await until("the last offset on the surviving follower", lambda: followers[0].ctx.offsets.query(
                "GroupA", "TopicD", 0) == 42)
            for n in range(10):
                assert (await leader.ctx.store.put_message(MessageInner("TopicE", 0, b"e%d" % n, {}))).ok
            assert leader.driver.status()["snapshot_index"] > 0

            back = raft_broker(tmp_path, peers, down.self_id, "raft-m", raft_snapshot_every=8)
            brokers[down.self_id] = back
            await back.start()
            svc = _svc(back)
            await until("the restarted member caught up", lambda: svc.sm.applied >= leader.sm.applied
                         and svc.raft_log.behind is None, 30)
            assert svc.fetched_bytes > 0  # it came back behind the leader's compaction: snapshot installed
            assert svc.ctx.groups.get("GroupC") is not None and svc.ctx.groups.get("GroupB") is None
            assert "TopicC" not in svc.ctx.topics and "TopicA" not in svc.ctx.topics
            assert svc.ctx.groups.get("GroupD") is None and "TopicF" not in svc.ctx.topics
            svc.adopt_topics()
            assert "TopicE" in svc.ctx.topics
            for gone in ("TopicA", "TopicC", "TopicF"):
                assert gone not in svc.ctx.topics
                assert gone not in _queue_topics(svc), gone
            assert svc.ctx.offsets.query("GroupA", "TopicD", 0) == 42
            assert svc.ctx.offsets.query("GroupA", "TopicA", 0) == -1

            # every member restarts (own snapshot, the entries after it applied again)
            target = max(_svc(b).sm.applied for b in brokers.values())
            await until("every member applied everything", lambda: all(
                _svc(b).sm.applied >= target for b in brokers.values()))
            for b in reversed(list(brokers.values())):
                await b.stop()
            brokers = {i: raft_broker(tmp_path, peers, i, "raft-m", raft_snapshot_every=8) for i in IDS}
            for b in brokers.values():
                await b.start()
            leader = await until("a leader after the restart", agreed)
            for s in (_svc(b) for b in brokers.values()):
                await until(f"{s.self_id} applied the log", lambda s=s: s.sm.applied >= target)
                s.adopt_topics()
                assert s.ctx.groups.get("GroupA").retry_max_times == 9, s.self_id  # type: ignore[union-attr]
                assert s.ctx.groups.get("GroupD") is None and s.ctx.groups.get("GroupB") is None, s.self_id
                assert {"TopicA", "TopicC", "TopicF"}.isdisjoint(set(s.ctx.topics.all()) | _queue_topics(s)), s.self_id
                assert "TopicE" in s.ctx.topics, s.self_id
                assert s.ctx.offsets.query("GroupA", "TopicD", 0) == 42, s.self_id
        finally:
            for b in reversed(list(brokers.values())):
                await b.stop()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_offset_delta_is_skipped_only_by_the_leader_that_proposed_it(tmp_path: Path) -> None:
    """Applying the log again (restart) or on a member that became leader later takes every delta; only the
    proposing leader, in the term it proposed in, keeps its own newer table."""
    async def main() -> None:
        peers = raft_peers(("n0",))
        b = raft_broker(tmp_path, peers, "n0", "raft-m", raft_snapshot_every=8)
        await b.start()
        try:
            svc = _svc(b)
            await until("the single member leads", lambda: svc.driver.is_leader)
            b.ctx.offsets.commit("G", "T", 0, 10)
            await until("the delta proposed", lambda: not svc._offset_changes and svc.offset_deltas >= 1)
            b.ctx.offsets.commit("G", "T", 0, 11)  # newer than the entry: the leader's own delta leaves it
            payload = orjson.dumps({"by": "n0", "term": svc.driver.term, "offsets": {"T@G": {"0": 10}}})
            svc._apply_offset_delta(99, payload)
            assert b.ctx.offsets.query("G", "T", 0) == 11
            older = orjson.dumps({"by": "n0", "term": svc.driver.term - 1, "offsets": {"T@G": {"0": 7}}})
            svc._apply_offset_delta(100, older)  # an earlier leadership's entry (applied late): taken
            assert b.ctx.offsets.query("G", "T", 0) == 7
            other = orjson.dumps({"by": "n1", "term": svc.driver.term, "offsets": {"T@G": {"0": 8}}})
            svc._apply_offset_delta(101, other)
            assert b.ctx.offsets.query("G", "T", 0) == 8
            assert svc.sm._commands[OFFSET_DELTA] == svc._apply_offset_delta
        finally:
            await b.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_deletion_applied_again_at_start_keeps_the_queues_of_a_later_re_creation(tmp_path: Path) -> None:
    """The log is applied again from its start over the CommitLog it references (its records are hidden until their
    entry is applied again), so a TOPIC_DELETE applied again in log order drops the old queue entries and keeps
    those of the re-created topic; a put after the restart continues the re-created queue's offsets."""
    async def main() -> None:
        peers = raft_peers(("n0",))
        b = raft_broker(tmp_path, peers, "n0", "raft-m", raft_snapshot_every=10_000)
        await b.start()
        try:
            svc = _svc(b)
            await until("the single member leads", lambda: svc.driver.is_leader)
            create = {"topic": "TopicR", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}
            assert (await _call(svc, RequestCode.UPDATE_AND_CREATE_TOPIC, create)).code == ResponseCode.SUCCESS
            for n in range(2):
                assert (await b.ctx.store.put_message(MessageInner("TopicR", 0, b"old%d" % n, {}))).ok
            assert (await _call(svc, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicR"})).code == 0
            assert "TopicR" not in _queue_topics(svc)
            assert (await _call(svc, RequestCode.UPDATE_AND_CREATE_TOPIC, create)).code == ResponseCode.SUCCESS
            for n in range(3):
                assert (await b.ctx.store.put_message(MessageInner("TopicR", 0, b"new%d" % n, {}))).ok
            target = svc.sm.applied
        finally:
            await b.stop()
        b = raft_broker(tmp_path, peers, "n0", "raft-m", raft_snapshot_every=10_000)
        await b.start()
        try:
            svc = _svc(b)
            await until("the log applied again", lambda: svc.sm.applied >= target)
            svc.adopt_topics()
            assert "TopicR" in svc.ctx.topics
            assert svc.real_store.cq_table.queue_max_offsets().get(("TopicR", 0)) == 3
            await until("the single member leads again", lambda: svc.driver.is_leader)
            put = await b.ctx.store.put_message(MessageInner("TopicR", 0, b"after", {}))
            assert put.ok and put.queue_offset == 3
        finally:
            await b.stop()

    asyncio.run(asyncio.wait_for(main(), 60))
