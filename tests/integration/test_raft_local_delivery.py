"""Local delivery in a Raft broker group (issue 14; docs/design/local-delivery.md): a name server and three brokers
with enableDLegerCommitLog and localDeliveryGroups, real processes (orbitmq/testing/raft_group.py); our SDK's
SimpleConsumer attached to one member each (broker_addr), acking through that member.

- nothing fails: every message is delivered and acknowledged exactly once, every member serves its consumer, each
  consumer's order is monotonic;
- the leader is kill -9'd mid-run: nothing acknowledged to the producer is lost, redeliveries stay within what
  consumers held, each consumer's first deliveries arrive in queue order over the whole run (order checker);
- the leader's TCP bytes sent per delivered message (kernel socket counters of its process, `ss -tinp`) with the
  consumers on the followers against the consumers on the leader, in one run: the difference is the payload.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, Message, MessageExt, Producer, SendStatus
from orbitmq.client.errors import ResponseError
from orbitmq.client.simple_consumer import SimpleConsumer
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.testing.controller_cluster import wait_until
from orbitmq.testing.failover_load import SendLoad
from orbitmq.testing.procs import blocking_request
from orbitmq.testing.raft_group import RaftGroup, sent_between

pytestmark = [pytest.mark.integration]

TOPIC = "LdTopic"
QUEUES = 4
GROUP = "CG_local"
PREFETCH = 8
INVISIBLE_MS = 10_000


def run(g: RaftGroup, coro: Any, timeout_s: float) -> Any:
    try:
        return asyncio.run(asyncio.wait_for(coro, timeout_s))
    except BaseException:
        print(g.logs(60))
        raise


@dataclass
class Delivery:
    consumer: str
    body: str
    queue_id: int
    queue_offset: int
    reconsume: int


@dataclass
class Consumers:
    """One SimpleConsumer per member address, each receiving and acking until stop()."""

    g: RaftGroup
    group: str
    topic: str
    members: list[int]
    deliveries: list[Delivery] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    ack_refused: list[str] = field(default_factory=list)
    errors: int = 0
    _stop: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _consumers: list[SimpleConsumer] = field(default_factory=list)

    async def start(self) -> Consumers:
        attached = []
        for i in self.members:
            sc = SimpleConsumer(self.group, self.g.ns_addr, self.topic, broker_addr=self.g.addr(i),
                                instance_name=f"ld-{self.group}-{i}", timeout_ms=5000)
            await sc.start()
            self._consumers.append(sc)
            ev = asyncio.Event()
            attached.append(ev)
            self._tasks.append(asyncio.ensure_future(self._loop(f"n{i}", sc, ev)))
        for ev in attached:  # the first answered pop (even empty) means its Attach is committed
            await ev.wait()
        return self

    async def _loop(self, name: str, sc: SimpleConsumer, attached: asyncio.Event) -> None:
        while not self._stop:
            try:
                msgs = await sc.receive(max_nums=PREFETCH, invisible_time_ms=INVISIBLE_MS, poll_ms=500)
            except Exception:  # noqa: BLE001 - no leader, member down, topic not adopted yet: counted, retried
                self.errors += 1
                await asyncio.sleep(0.1)
                continue
            attached.set()
            for m in msgs:
                self.deliveries.append(Delivery(name, m.body.decode(), m.queue_id, m.queue_offset, m.reconsume_times))
                await self._ack(sc, m)

    async def _ack(self, sc: SimpleConsumer, m: MessageExt) -> None:
        deadline = time.monotonic() + 8.0
        while not self._stop:
            try:
                await sc.ack(m)
                self.acked.append(m.body.decode())
                return
            except ResponseError as e:
                if e.code == ResponseCode.NO_MESSAGE or time.monotonic() > deadline:
                    self.ack_refused.append(m.body.decode())
                    return
            except Exception:  # noqa: BLE001 - the member is gone: its consumer's messages come back
                self.ack_refused.append(m.body.decode())
                return
            await asyncio.sleep(0.1)

    def bodies(self) -> set[str]:
        return {d.body for d in self.deliveries}

    async def stop(self) -> None:
        self._stop = True
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sc in self._consumers:
            await sc.shutdown()


def order_problems(deliveries: list[Delivery]) -> list[str]:
    """Per consumer and queue, first deliveries (reconsume 0) arrive in increasing queue offset (enqueue order)."""
    last: dict[tuple[str, int], int] = {}
    problems = []
    for d in deliveries:
        if d.reconsume:
            continue
        k = (d.consumer, d.queue_id)
        if d.queue_offset <= last.get(k, -1):
            problems.append(f"{d.consumer} q{d.queue_id}: offset {d.queue_offset} after {last[k]}")
        last[k] = max(last.get(k, -1), d.queue_offset)
    return problems


async def _create_topic(g: RaftGroup, leader: int, topic: str = TOPIC) -> None:
    async with Admin(g.ns_addr) as admin:
        await admin.update_topic(topic, broker_addr=g.addr(leader), read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    while True:  # every member has the config (the leader's TOPICS entry), so every member serves pops
        if all([await asyncio.to_thread(_has_topic, g, i, topic) for i in range(g.size)]):
            return
        await asyncio.sleep(0.2)


def _has_topic(g: RaftGroup, i: int, topic: str) -> bool:
    resp = blocking_request(g.addr(i), RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 2.0)
    return resp.code == 0 and topic.encode() in (resp.body or b"")


async def _send(ns: str, topic: str, n: int, size: int, tag: str) -> list[str]:
    bodies = []
    async with Producer(f"PG_{tag}", namesrv=ns, send_timeout_ms=5000) as p:
        for k in range(n):
            body = f"{tag}-{k:06d}-".ljust(size, "x")
            r = await p.send(Message(topic, body.encode()))
            assert r.status is SendStatus.SEND_OK, r
            bodies.append(body)
    return bodies


async def _until_delivered(c: Consumers, want: set[str], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not want <= c.bodies() or len(c.acked) + len(c.ack_refused) < len(c.deliveries):
        if time.monotonic() > end:
            raise AssertionError(f"{len(want - c.bodies())} of {len(want)} messages never delivered; "
                                 f"{len(c.deliveries)} deliveries, {len(c.acked)} acks, {c.errors} errors")
        await asyncio.sleep(0.1)


def test_consumers_on_every_member_exactly_once(tmp_path: Path) -> None:
    with RaftGroup(tmp_path / "group", localDeliveryGroups=GROUP) as g:
        g.start()
        leader = g.leader()

        async def main() -> Consumers:
            await _create_topic(g, leader)
            c = await Consumers(g, GROUP, TOPIC, list(range(g.size))).start()
            try:
                sent = await _send(g.ns_addr, TOPIC, 300, 100, "once")
                await _until_delivered(c, set(sent), 60)
                await asyncio.sleep(0.5)  # nothing more arrives
            finally:
                await c.stop()
            return c

        c = run(g, main(), 120)
        bodies = [d.body for d in c.deliveries]
        assert len(bodies) == len(set(bodies)) == 300, (len(bodies), len(set(bodies)))  # delivered exactly once
        assert sorted(c.acked) == sorted(bodies) and not c.ack_refused  # acknowledged exactly once
        per = {f"n{i}": sum(1 for d in c.deliveries if d.consumer == f"n{i}") for i in range(g.size)}
        assert all(per.values()), per  # every member served its own consumer
        assert not order_problems(c.deliveries)
        for i in range(g.size):
            info = g.runtime(i)
            assert info["dLegerRole"] in ("LEADER", "FOLLOWER")
        print(f"deliveries per member {per}")


def test_leader_kill9_no_loss_bounded_redeliveries_order(tmp_path: Path) -> None:
    with RaftGroup(tmp_path / "group", localDeliveryGroups=GROUP) as g:
        g.start()
        leader = g.leader()

        async def main() -> tuple[Consumers, SendLoad, int]:
            await _create_topic(g, leader)
            c = await Consumers(g, GROUP, TOPIC, list(range(g.size))).start()
            load = await SendLoad(g.ns_addr, TOPIC, senders=2, run="ld").start()
            try:
                while len(load.acked) < 150:
                    await asyncio.sleep(0.05)
                t_kill = await asyncio.to_thread(g.kill9, leader)
                new = await asyncio.to_thread(g.leader, 15.0, leader)
                while sum(1 for a in load.acked.values() if a.t_sent >= t_kill) < 100:
                    await asyncio.sleep(0.05)
            finally:
                await load.stop()
            try:
                await _until_delivered(c, set(load.acked), 60)
                await asyncio.sleep(0.5)
            finally:
                await c.stop()
            return c, load, new

        c, load, new = run(g, main(), 180)
        bodies = [d.body for d in c.deliveries]
        redelivered = len(bodies) - len(set(bodies))
        print(f"leader n{leader} killed, n{new} leads; {len(load.acked)} sends acknowledged, {len(bodies)} "
              f"deliveries, {redelivered} redeliveries, {len(c.ack_refused)} acks refused, {c.errors} pop errors")
        assert set(load.acked) <= set(bodies)  # nothing acknowledged to the producer is lost
        # redeliveries: only what consumers held (prefetch each) when the leader died, and acks refused meanwhile
        assert redelivered <= g.size * PREFETCH + len(c.ack_refused), redelivered
        problems = order_problems(c.deliveries)
        assert not problems, problems[:10]
        survivors = {f"n{i}" for i in range(g.size) if i != leader}
        assert {d.consumer for d in c.deliveries if d.body in load.acked} & survivors
        # the killed member restarts (its machines from the snapshot part and the log): every member ends with the
        # same consumption state, with no consumer (all closed or declared down), checkout or waiting message left
        g.restart(leader)
        g.wait_same_log(60.0)

        def settled() -> set[str] | None:
            infos = [g.runtime(i) for i in range(g.size)]
            keys = ("localDeliveryConsumers", "localDeliveryCheckouts", "localDeliveryWaiting")
            if all(all(info.get(k) == "0" for k in keys) for info in infos):
                digests = {info["localDeliveryDigest"] for info in infos}
                return digests if len(digests) == 1 else None
            return None
        try:
            wait_until("equal, empty consumption state on every member", settled, 30.0, 0.2)
        except AssertionError:
            print(g.logs(30))
            raise AssertionError([{k: v for k, v in g.runtime(i).items() if k.startswith(("localDelivery", "dLeger"))}
                                  for i in range(g.size)]) from None


def test_leader_bytes_per_delivery_local_vs_leader_only(tmp_path: Path) -> None:
    """Same group shape, same messages: consumers on both followers (local delivery: the followers send), then
    consumers on the leader (it sends every delivery). The leader's TCP bytes sent per message differ by at least
    the payload (margin: 80% of the body size)."""
    n, size = 150, 4000
    groups = "CG_on,CG_off"
    with RaftGroup(tmp_path / "group", localDeliveryGroups=groups) as g:
        g.start()
        leader = g.leader()
        followers = [i for i in range(g.size) if i != leader]

        async def phase(group: str, topic: str, members: list[int]) -> dict[str, int]:
            await _create_topic(g, leader, topic)
            c = await Consumers(g, group, topic, members).start()
            try:
                before = {i: g.bytes_sent(i) for i in range(g.size)}
                sent = await _send(g.ns_addr, topic, n, size, group)
                await _until_delivered(c, set(sent), 60)
                after = {i: g.bytes_sent(i) for i in range(g.size)}
            finally:
                await c.stop()
            assert len(c.deliveries) == n
            return {f"n{i}": sent_between(before[i], after[i]) for i in range(g.size)}

        async def main() -> tuple[dict[str, int], dict[str, int]]:
            on = await phase("CG_on", "LdBytesOn", followers)
            off = await phase("CG_off", "LdBytesOff", [leader])
            return on, off

        on, off = run(g, main(), 150)
        lead = f"n{leader}"
        per_on, per_off = on[lead] / n, off[lead] / n
        print(f"leader bytes sent per delivered {size}-byte message: local delivery {per_on:.0f}, leader-only "
              f"{per_off:.0f}, difference {per_off - per_on:.0f}; per member on {on}, off {off}")
        assert per_off - per_on >= 0.8 * size, (per_on, per_off)
        for f in followers:  # the followers sent the payload instead
            assert on[f"n{f}"] / n - off[f"n{f}"] / n >= 0.8 * size / len(followers), (on, off)
