"""Local delivery in a Raft broker group (issue 14), three in-process members with localDeliveryGroups: a consumer
popping on each member gets its messages from that member (the leader answers only its own consumer), acks from
any member settle them, a stale handle is refused with NO_MESSAGE, a closed connection returns what its consumer
held, and every member's machine ends equal."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

from orbitmq.broker.raft_mode.codec import decode_snapshot
from orbitmq.broker.raft_mode.local_delivery import (
    SNAPSHOT_PART,
    LocalDeliveryService,
    parse_groups,
    parse_handle,
)
from orbitmq.broker.raft_mode.service import RaftGroupService
from orbitmq.client import broker_api
from orbitmq.delivery.effects import DeadLettered
from orbitmq.delivery.router import DeliveryRouter
from orbitmq.model import Prop, decode_record
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.remoting import RemotingClient
from orbitmq.store import GetStatus
from orbitmq.store.results import MessageInner
from tests.unit.broker.raft_inprocess import raft_brokers, until

TOPIC = "LdTopic"
GROUP = "ld-group"


def _pop(n: int = 8, poll_ms: int = 2000, invisible_ms: int = 30_000) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.POP_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1", "maxMsgNums": str(n),
        "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "initMode": "0", "expType": "TAG", "exp": "*"})


def _ack(handle: str, code: int = RequestCode.ACK_MESSAGE, **extra: str) -> RemotingCommand:
    parts = handle.split()
    return RemotingCommand.request(code, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": parts[6],
                                          "extraInfo": handle, "offset": parts[7], **extra})


async def _start_group(tmp_path: Path, name: str, **keys: Any) -> tuple[list[Any], list[RaftGroupService],
                                                                      list[LocalDeliveryService]]:
    """Three in-process members with the test topic; their Raft group and local-delivery services."""
    brokers = raft_brokers(tmp_path, name, **keys)
    for b in brokers:
        await b.start()
        b.ctx.topics.create_or_update(TopicConfig(TOPIC, 4, 4))
    groups: list[RaftGroupService] = [b.ctx.services["raft_group"] for b in brokers]  # type: ignore[misc]
    lds: list[LocalDeliveryService] = [b.ctx.services["local_delivery"] for b in brokers]  # type: ignore[misc]
    return brokers, groups, lds


async def _leader(groups: list[RaftGroupService], stopped: set[int] | None = None) -> int:
    """Index of the leader every running member knows."""
    down = stopped or set()

    def agreed() -> int | None:
        lead = [i for i, g in enumerate(groups) if g.driver.is_leader and i not in down]
        ok = len(lead) == 1 and all(groups[i].driver.leader_id == groups[lead[0]].self_id
                                    for i in range(len(groups)) if i not in down)
        return lead[0] + 1 if ok else None
    return await until("a leader every member knows", agreed) - 1


def test_parse_groups_and_handle() -> None:
    assert parse_groups("a, b,,") == frozenset({"a", "b"})
    assert parse_groups("a,*") is None
    assert parse_handle("3 100 30000 17 0 bk 2 3 n1.ab.4") == (17, "n1.ab.4")


def test_pop_on_every_member_ack_anywhere_and_consumer_down(tmp_path: Path) -> None:
    async def main() -> None:
        brokers, groups, lds = await _start_group(tmp_path, "raft-ld", local_delivery_groups=GROUP,
                                                  auto_create_topic_enable=True, raft_snapshot_every=20)
        clients = [RemotingClient(name=f"c{i}") for i in range(4)]
        try:
            li = await _leader(groups)
            leader = brokers[li]
            # one consumer per member attaches (an empty pop with a short poll)
            for i, b in enumerate(brokers):
                resp = await clients[i].invoke(b.addr, _pop(poll_ms=50), 5000)
                assert resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND), resp.remark
            await until("3 consumers attached everywhere", lambda: all(
                len(ld.replica.router.machines.get(f"{TOPIC}@{GROUP}").consumers) == 3  # type: ignore[union-attr]
                if f"{TOPIC}@{GROUP}" in ld.replica.router.machines else False for ld in lds))
            for n in range(30):
                r = await leader.ctx.store.put_message(MessageInner(TOPIC, n % 4, b"body-%d" % n, {}))
                assert r.ok, r
            got: dict[int, list[Any]] = {0: [], 1: [], 2: []}
            loop = asyncio.get_running_loop()
            end = loop.time() + 20
            while sum(len(v) for v in got.values()) < 30 and loop.time() < end:
                for i, b in enumerate(brokers):
                    resp = await clients[i].invoke(b.addr, _pop(poll_ms=100), 5000)
                    if resp.code == ResponseCode.SUCCESS:
                        msgs = broker_api.decode_messages(resp.body)
                        got[i] += msgs
                        for m in msgs:  # ack through another member than the one it came from
                            other = brokers[(i + 1) % 3]
                            a = await clients[3].invoke(other.addr, _ack(m.properties[Prop.POP_CK]), 5000)
                            assert a.code == ResponseCode.SUCCESS, a.remark
            bodies = sorted(m.body for v in got.values() for m in v)
            assert bodies == sorted(b"body-%d" % n for n in range(30))  # each once
            assert all(got[i] for i in range(3)), {i: len(v) for i, v in got.items()}  # every member delivered
            for i in range(3):  # each consumer's deliveries are in enqueue order per queue
                for q in range(4):
                    offs = [m.queue_offset for m in got[i] if m.queue_id == q]
                    assert offs == sorted(offs)
            assert [ld.sent for ld in lds] == [len(got[i]) for i in range(3)]
            # a stale handle (already acked) is refused
            stale = got[0][0].properties[Prop.POP_CK]
            a = await clients[3].invoke(brokers[0].addr, _ack(stale), 5000)
            assert a.code == ResponseCode.NO_MESSAGE, (a.code, a.remark)
            # a held message comes back when its consumer's connection closes
            r = await leader.ctx.store.put_message(MessageInner(TOPIC, 0, b"held", {}))
            assert r.ok
            fi = (li + 1) % 3
            held = None
            while held is None:
                for i in (fi, li, (li + 2) % 3):
                    resp = await clients[i].invoke(brokers[i].addr, _pop(n=1, poll_ms=300), 5000)
                    if resp.code == ResponseCode.SUCCESS:
                        held = (i, broker_api.decode_messages(resp.body)[0])
                        break
            hi, msg = held
            await clients[hi].close()
            others = [i for i in range(3) if i != hi]
            again = None
            while again is None:
                for i in others:
                    resp = await clients[i].invoke(brokers[i].addr, _pop(n=1, poll_ms=300), 5000)
                    if resp.code == ResponseCode.SUCCESS:
                        again = broker_api.decode_messages(resp.body)[0]
                        break
            assert again.body == b"held" and again.reconsume_times == 1
            a = await clients[3].invoke(brokers[0].addr, _ack(again.properties[Prop.POP_CK]), 5000)
            assert a.code == ResponseCode.SUCCESS
            # invisible-time change on a fresh delivery, then every machine ends equal
            await until("equal machines", lambda: len({ld.replica.router.machines[f"{TOPIC}@{GROUP}"].digest()
                                                         for ld in lds}) == 1)
            m0 = lds[0].replica.router.machines[f"{TOPIC}@{GROUP}"]
            assert not m0.checkouts and not m0.ready and not m0.returns
            # the group snapshot (taken every 20 entries here) carries the router; its part restores equal
            assert all(g.driver.status()["snapshot_index"] for g in groups)
            part = decode_snapshot(groups[li].sm.snapshot())[2][SNAPSHOT_PART]
            assert DeliveryRouter.restore(part).snapshot() == lds[li].replica.router.snapshot()
            before = lds[li].replica.router.snapshot()
            lds[li]._restore(part)  # what a snapshot install does: same state, nothing to re-send (all settled)
            assert lds[li].replica.router.snapshot() == before
        finally:
            for c in clients:
                await c.close()
            for b in reversed(brokers):
                await b.stop()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_change_invisible_expiry_batch_ack_and_node_down(tmp_path: Path) -> None:
    async def main() -> None:
        brokers, groups, lds = await _start_group(tmp_path, "raft-ld", local_delivery_groups=GROUP,
                                                  auto_create_topic_enable=True, raft_snapshot_every=20)
        clients = [RemotingClient(name=f"c{i}") for i in range(4)]
        stopped: set[int] = set()
        try:
            li = await _leader(groups)
            fi, fj = (li + 1) % 3, (li + 2) % 3
            # only the follower fi's consumer: it gets the message
            resp = await clients[fi].invoke(brokers[fi].addr, _pop(poll_ms=50), 5000)
            assert resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND), resp.remark
            assert (await brokers[li].ctx.store.put_message(MessageInner(TOPIC, 1, b"m1", {}))).ok
            resp = await clients[fi].invoke(brokers[fi].addr, _pop(n=1, poll_ms=5000), 8000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            first = broker_api.decode_messages(resp.body)[0]
            handle = first.properties[Prop.POP_CK]
            did, _cid = parse_handle(handle)
            # batch ack of a local-delivery group is refused (handles are delivery ids)
            body = b'{"acks":[{"c":"%s","t":"%s","r":0,"so":0,"q":1,"rq":0,"pt":0,"it":0,"b":[0]}]}' % (
                GROUP.encode(), TOPIC.encode())
            resp = await clients[3].invoke(brokers[li].addr, RemotingCommand.request(
                RequestCode.BATCH_ACK_MESSAGE, {}, body), 5000)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "local delivery" in (resp.remark or "")
            # invisible time shortened through the leader: the same delivery id, then it expires and comes back
            resp = await clients[3].invoke(brokers[li].addr, _ack(handle, RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                                                  invisibleTime="300"), 5000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert resp.ext_fields["reviveQid"] == str(did)
            resp = await clients[fi].invoke(brokers[fi].addr, _pop(n=1, poll_ms=5000), 8000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            again = broker_api.decode_messages(resp.body)[0]
            assert again.body == b"m1" and again.reconsume_times == 1
            stale = await clients[3].invoke(brokers[fj].addr, _ack(handle), 5000)
            assert stale.code == ResponseCode.NO_MESSAGE, stale.remark  # the expired delivery's handle
            # the member holding it dies (no ConsumerDown from it): the leader sees its match index stand still,
            # proposes NodeDown, and the message goes to fj's consumer
            resp = await clients[fj].invoke(brokers[fj].addr, _pop(poll_ms=50), 5000)
            assert resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND), resp.remark
            lds[fi]._closed = lambda cid: None  # type: ignore[method-assign]  # as a kill: no ConsumerDown on close
            await brokers[fi].stop()
            stopped.add(fi)
            got = None
            loop = asyncio.get_running_loop()
            end = loop.time() + 30
            while got is None and loop.time() < end:
                assert (await brokers[li].ctx.store.put_message(MessageInner(TOPIC, 2, b"tick", {}))).ok
                resp = await clients[fj].invoke(brokers[fj].addr, _pop(n=4, poll_ms=500), 5000)
                if resp.code == ResponseCode.SUCCESS:
                    for m in broker_api.decode_messages(resp.body):
                        a = await clients[fj].invoke(brokers[fj].addr, _ack(m.properties[Prop.POP_CK]), 5000)
                        assert a.code == ResponseCode.SUCCESS, a.remark
                        if m.body == b"m1":
                            got = m
            assert got is not None and got.reconsume_times == 2
            m = lds[li].replica.router.machines[f"{TOPIC}@{GROUP}"]
            assert all(c.node != groups[fi].self_id for c in m.consumers.values())
        finally:
            for c in clients:
                await c.close()
            for i, b in reversed(list(enumerate(brokers))):
                if i not in stopped:
                    await b.stop()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_dead_letter_survives_a_leader_change_before_the_dlq_put(tmp_path: Path) -> None:
    """A DeadLettered effect is applied on every member; the leader dies before its DLQ put: the new leader puts
    the message into %DLQ%<group> (from the replicated pending set), then DLQ_DONE clears it everywhere."""
    async def main() -> None:
        brokers, groups, lds = await _start_group(tmp_path, "raft-dlq", local_delivery_groups=GROUP,
                                                  raft_snapshot_every=1000)
        stopped: set[int] = set()
        try:
            li = await _leader(groups)
            put = await brokers[li].ctx.store.put_message(MessageInner(TOPIC, 2, b"poison", {}))
            assert put.ok, put
            await until("the message applied everywhere",
                        lambda: all(g.sm.applied >= groups[li].sm.applied for g in groups))

            async def dies_first(*_a: Any) -> None:  # the old leader is killed before its DLQ put
                return None
            lds[li]._dead_letter = dies_first  # type: ignore[method-assign]
            key = f"{TOPIC}@{GROUP}"
            for ld in lds:  # what applying the entry that dead-letters the message does on each member
                ld._effects(key, [DeadLettered(2, put.queue_offset, 16)], [])
            assert all(ld.dead_pending for ld in lds)
            await brokers[li].stop()
            stopped.add(li)
            nl = await _leader(groups, stopped)
            dlq = "%DLQ%" + GROUP

            def in_dlq() -> list[bytes] | None:
                store = groups[nl].real_store
                got = store.get_message(GROUP, dlq, 0, 0, 10)
                if got.status is not GetStatus.FOUND:
                    return None
                return [decode_record(b).body for b in got.buffers]
            assert await until("the new leader put it into the DLQ", in_dlq) == [b"poison"]
            await until("DLQ_DONE applied on the live members",
                        lambda: all(not lds[i].dead_pending for i in range(3) if i not in stopped))
            assert lds[nl].dead_lettered == 1
        finally:
            for i, b in enumerate(brokers):
                if i not in stopped:
                    await b.stop()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_deleting_the_topic_or_the_group_deletes_its_local_delivery_queue_everywhere(tmp_path: Path) -> None:
    async def main() -> None:
        brokers, groups, lds = await _start_group(tmp_path, "raft-del", local_delivery_groups=f"{GROUP},other-group",
                                                  raft_snapshot_every=1000)
        client = RemotingClient(name="del")
        try:
            li = await _leader(groups)
            fi = (li + 1) % 3
            key = f"{TOPIC}@{GROUP}"
            pop = _pop(poll_ms=50)
            resp = await client.invoke(brokers[fi].addr, pop, 5000)  # attaches: the queue exists on every member
            assert resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND), resp.remark
            other = RemotingCommand.request(RequestCode.POP_MESSAGE, {**pop.ext_fields, "consumerGroup": "other-group"})
            resp = await client.invoke(brokers[fi].addr, other, 5000)
            await until("both queues on every member",
                        lambda: all({key, f"{TOPIC}@other-group"} <= set(ld.replica.router.machines) for ld in lds))
            resp = await client.invoke(brokers[li].addr, RemotingCommand.request(
                RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "other-group", "removeOffset": "true"}), 5000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            await until("the group's queue gone everywhere",
                        lambda: all(f"{TOPIC}@other-group" not in ld.replica.router.machines for ld in lds))
            assert all(key in ld.replica.router.machines for ld in lds)
            resp = await client.invoke(brokers[li].addr, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC}), 5000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            await until("the topic's queue gone everywhere", lambda: all(not ld.replica.router.machines for ld in lds))
            digests = {ld.runtime()["localDeliveryDigest"] for ld in lds}
            assert len(digests) == 1, digests
        finally:
            await client.close()
            for b in brokers:
                await b.stop()

    asyncio.run(asyncio.wait_for(main(), 90))


class _Skewed:
    """A member whose wall clock is 10 minutes ahead."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def now_ms(self) -> int:
        return int(self.base.now_ms()) + 600_000

    def monotonic_ms(self) -> int:
        return int(self.base.monotonic_ms())


def test_forwarded_commands_carry_the_leaders_clock(tmp_path: Path) -> None:
    """A follower whose clock is 10 minutes ahead attaches and acks through the leader: the machines' time stays
    the leader's (else every checkout's deadline would be 10 minutes early for everyone)."""
    async def main() -> None:
        brokers, groups, lds = await _start_group(tmp_path, "raft-clock", local_delivery_groups=GROUP,
                                                  raft_snapshot_every=1000)
        client = RemotingClient(name="clock")
        try:
            li = await _leader(groups)
            fi = (li + 1) % 3
            lds[fi].env = dataclasses.replace(lds[fi].env, clock=_Skewed(lds[fi].env.clock))
            resp = await client.invoke(brokers[fi].addr, _pop(poll_ms=50), 5000)  # Attach, forwarded
            assert resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND), resp.remark
            key = f"{TOPIC}@{GROUP}"
            await until("the queue on every member", lambda: all(key in ld.replica.router.machines for ld in lds))
            assert (await brokers[li].ctx.store.put_message(MessageInner(TOPIC, 1, b"m", {}))).ok
            resp = await client.invoke(brokers[fi].addr, _pop(n=1, poll_ms=5000), 8000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            handle = broker_api.decode_messages(resp.body)[0].properties[Prop.POP_CK]
            resp = await client.invoke(brokers[fi].addr, _ack(handle), 5000)  # Settle, forwarded with ts + 10 min
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            for ld in lds:
                skew = ld.replica.router.machines[key].now - time.time() * 1000
                assert skew < 60_000, f"the machine's time is {skew / 1000:.0f} s ahead of the leader's clock"
        finally:
            await client.close()
            for b in brokers:
                await b.stop()

    asyncio.run(asyncio.wait_for(main(), 90))
