"""Local delivery load for tests and bench (issue 14; docs/design/local-delivery.md): SimpleConsumers attached to
chosen members of a RaftGroup (broker_addr), receiving and acknowledging until stopped, with every delivery recorded;
an order checker; and the leader's TCP bytes sent and CPU per delivered message for one consumer placement.
Test/bench-only; nothing under orbitmq/ outside testing imports it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from orbitmq.client import Admin, Message, MessageExt, Producer, SendStatus
from orbitmq.client.errors import ResponseError, TopicNotExistError
from orbitmq.client.simple_consumer import SimpleConsumer
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.testing.procs import blocking_request
from orbitmq.testing.raft_group import RaftGroup, sent_between

PREFETCH = 8
INVISIBLE_MS = 10_000
QUEUES = 4


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
    ack_together: bool = False  # ack a received batch concurrently (as a consumer thread pool does), not one by one
    running: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))  # cleared: consumers wait
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
            if attached.is_set():
                await self.running.wait()
            try:
                msgs = await sc.receive(max_nums=PREFETCH, invisible_time_ms=INVISIBLE_MS, poll_ms=500)
            except Exception:  # noqa: BLE001 - no leader, member down, topic not adopted yet: counted, retried
                self.errors += 1
                await asyncio.sleep(0.1)
                continue
            attached.set()
            for m in msgs:
                self.deliveries.append(Delivery(name, m.body.decode(), m.queue_id, m.queue_offset, m.reconsume_times))
            if self.ack_together:
                await asyncio.gather(*(self._ack(sc, m) for m in msgs))
            else:
                for m in msgs:
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


def _set(ev: asyncio.Event) -> asyncio.Event:
    ev.set()
    return ev


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


async def create_topic(g: RaftGroup, leader: int, topic: str, queues: int = QUEUES) -> None:
    """Create `topic` on the leader and wait until every member has its config (so every member serves pops)."""
    async with Admin(g.ns_addr) as admin:
        await admin.update_topic(topic, broker_addr=g.addr(leader), read_queue_nums=queues, write_queue_nums=queues)
    while not all([await asyncio.to_thread(_has_topic, g, i, topic) for i in range(g.size)]):
        await asyncio.sleep(0.2)
    while not await _routed(g.ns_addr, topic):  # producers find a writable queue on the leader
        await asyncio.sleep(0.2)


async def _routed(ns_addr: str, topic: str) -> bool:
    async with Admin(ns_addr) as admin:
        try:
            route = await admin.topic_route(topic)
        except TopicNotExistError:
            return False
    return any(bd.broker_addrs.get(0) for bd in route.broker_datas) and any(
        qd.write_queue_nums > 0 for qd in route.queue_datas)


def _has_topic(g: RaftGroup, i: int, topic: str) -> bool:
    resp = blocking_request(g.addr(i), RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 2.0)
    return resp.code == 0 and topic.encode() in (resp.body or b"")


async def send_bodies(ns: str, topic: str, n: int, size: int, tag: str, attempts: int = 10) -> list[str]:
    """`n` numbered messages, each sent until acknowledged (a send not confirmed across a leader change is sent
    again: the log may then hold its body twice)."""
    bodies = []
    async with Producer(f"PG_{tag}", namesrv=ns, send_timeout_ms=5000) as p:
        for k in range(n):
            body = f"{tag}-{k:06d}-".ljust(size, "x")
            for attempt in range(attempts):
                try:
                    r = await p.send(Message(topic, body.encode()))
                except Exception:  # noqa: BLE001 - no leader for a moment: try again
                    if attempt == attempts - 1:
                        raise
                    await asyncio.sleep(0.3)
                    continue
                if r.status is SendStatus.SEND_OK:
                    break
                assert attempt < attempts - 1, r
                await asyncio.sleep(0.3)
            bodies.append(body)
    return bodies


async def until_delivered(c: Consumers, want: set[str], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not want <= c.bodies() or len(c.acked) + len(c.ack_refused) < len(c.deliveries):
        if time.monotonic() > end:
            raise AssertionError(f"{len(want - c.bodies())} of {len(want)} messages never delivered; "
                                 f"{len(c.deliveries)} deliveries, {len(c.acked)} acks, {c.errors} errors")
        await asyncio.sleep(0.1)


async def until_drained(g: RaftGroup, member: int, timeout_s: float) -> None:
    """Until `member`'s local delivery state holds no waiting message and no checkout: everything stored was
    delivered and acknowledged, including the messages whose ack was refused (they come back after their invisible
    time, or when their consumer is declared down, and are delivered again)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            info = await asyncio.to_thread(g.runtime, member)
        except Exception:  # noqa: BLE001 - a busy member: asked again
            info = {}
        if info.get("localDeliveryWaiting") == "0" and info.get("localDeliveryCheckouts") == "0":
            return
        if time.monotonic() > end:
            raise AssertionError(f"n{member} still has messages to deliver after {timeout_s:.0f} s: "
                                 f"{ {k: v for k, v in info.items() if k.startswith('localDelivery')} }")
        await asyncio.sleep(0.2)


def cpu_seconds(pids: set[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


async def measure(g: RaftGroup, leader: int, group: str, topic: str, members: list[int], n: int,
                  size: int, *, consume_only: bool = False, ack_together: bool = False) -> dict[str, Any]:
    """`n` messages of `size` bytes sent and consumed by consumers on `members`: per member, TCP bytes sent and
    CPU seconds during the phase (kernel socket counters, /proc), and the consumers' record. `consume_only`: the
    messages are sent while the (attached) consumers wait, and only their consumption is measured."""
    await create_topic(g, leader, topic)
    c = await Consumers(g, group, topic, members, ack_together=ack_together).start()
    try:
        if consume_only:
            c.running.clear()
            sent = await send_bodies(g.ns_addr, topic, n, size, group)
        before = {i: g.bytes_sent(i) for i in range(g.size)}
        cpu0 = {i: cpu_seconds(g.pids(i)) for i in range(g.size)}
        if consume_only:
            c.running.set()
        else:
            sent = await send_bodies(g.ns_addr, topic, n, size, group)
        await until_delivered(c, set(sent), 120)
        after = {i: g.bytes_sent(i) for i in range(g.size)}
        cpu1 = {i: cpu_seconds(g.pids(i)) for i in range(g.size)}
    finally:
        await c.stop()
    return {"bytes": {f"n{i}": sent_between(before[i], after[i]) for i in range(g.size)},
            "cpu_s": {f"n{i}": round(cpu1[i] - cpu0[i], 3) for i in range(g.size)},
            "deliveries": len(c.deliveries), "consumers": c}
