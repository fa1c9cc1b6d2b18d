"""Load and checks for controller-mode failover tests and the failover bench: an SDK send load that records every
acknowledgement, a probe write that times a failover (kill -> new master in the route accepting a write), direct
per-broker readback, an offset watcher and the end-to-end check "every acked message readable exactly once at the
offset it was acked at". Test-only; nothing under orbitmq/ imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from orbitmq.base.errors import RemotingError
from orbitmq.client import Message, MessageExt, MessageQueue, Producer, PullStatus, SendStatus, broker_api
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.ext import to_send_v2
from orbitmq.remoting import RemotingClient
from orbitmq.testing.controller_cluster import BrokerMember, ControllerCluster

T = TypeVar("T")


# ---- load, failover timing and end-to-end checks (async; run in the test's event loop) ----------------
@dataclass
class Ack:
    body: str
    queue: MessageQueue
    queue_offset: int
    t: float  # time.monotonic() when the ack arrived
    t_sent: float = 0.0  # time.monotonic() when the send began


@dataclass
class SendLoad:
    """`senders` tasks sending numbered messages through the SDK Producer (pushed routes) until stop(); every SEND_OK
    is recorded in `acked` (by body); other statuses in `not_ok`, exceptions counted in `errors`."""

    namesrv: str
    topic: str
    senders: int = 2
    run: str = "r"
    pause_s: float = 0.0
    send_timeout_ms: int = 3000
    acked: dict[str, Ack] = field(default_factory=dict)
    not_ok: list[tuple[str, str]] = field(default_factory=list)
    errors: int = 0
    _seq: int = 0
    _stop: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _producer: Producer | None = None

    async def start(self) -> SendLoad:
        self._producer = Producer(f"PG_{self.run}", namesrv=self.namesrv, send_timeout_ms=self.send_timeout_ms)
        await self._producer.start()
        self._tasks = [asyncio.ensure_future(self._sender()) for _ in range(self.senders)]
        return self

    async def _sender(self) -> None:
        assert self._producer is not None
        while not self._stop:
            self._seq += 1
            body = f"{self.run}-{self._seq}"
            t_sent = time.monotonic()
            try:
                r = await self._producer.send(Message(self.topic, body.encode()))
            except Exception:  # noqa: BLE001 - a failed send is data here (counted), the load goes on
                self.errors += 1
                await asyncio.sleep(0.02)
                continue
            if r.status is SendStatus.SEND_OK:
                self.acked[body] = Ack(body, r.message_queue, r.queue_offset, time.monotonic(), t_sent)
            else:
                self.not_ok.append((body, r.status.name))
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    def first_ack_after(self, t: float) -> float | None:
        """When the first send begun at or after `t` was acknowledged (None: none yet)."""
        return min((a.t for a in self.acked.values() if a.t_sent >= t), default=None)

    async def stop(self) -> None:
        self._stop = True
        for t in self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, self.send_timeout_ms / 1000 + 5)
        if self._producer is not None:
            await self._producer.shutdown()


async def probe_send(client: RemotingClient, addr: str, topic: str, body: str, queue_id: int = 0,
                     timeout_ms: int = 1000, answers: list[int] | None = None) -> Ack | None:
    """One SEND_MESSAGE_V2 (WAIT=true) straight to `addr`; the Ack when the broker answered SUCCESS. The response
    code of every answer (success or not; none on a timeout or connection error) is appended to `answers`."""
    header = to_send_v2({"producerGroup": "PG_probe", "topic": topic, "defaultTopic": "TBW102",
                         "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
                         "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
                         "properties": encode_properties({Prop.WAIT: "true"}), "reconsumeTimes": "0",
                         "unitMode": "false", "batch": "false"})
    t_sent = time.monotonic()
    try:
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body.encode()),
                                   timeout_ms)
    except (RemotingError, OSError):
        return None
    if answers is not None:
        answers.append(resp.code)
    if resp.code != ResponseCode.SUCCESS:
        return None
    mq = MessageQueue(topic, resp.ext_fields.get("MSG_REGION", ""), queue_id)
    return Ack(body, mq, int(resp.ext_fields.get("queueOffset", "-1")), time.monotonic(), t_sent)


async def wait_new_master_write(cluster: ControllerCluster, topic: str, old_addr: str, t_kill: float,
                                probe_body: str, timeout_s: float = 30.0) -> tuple[float, BrokerMember, Ack]:
    """Seconds from `t_kill` until a master other than `old_addr` is brokerId 0 in the topic's route and accepts a
    probe write; returns (seconds, new master, the probe's ack)."""
    client = RemotingClient(name="failover-probe")
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            addr = await asyncio.to_thread(_safe, lambda: cluster.route_master_addr(topic))
            m = cluster.member_by_addr(addr)
            if m is not None and addr != old_addr:
                ack = await probe_send(client, m.addr, topic, probe_body)
                if ack is not None:
                    ack.queue = MessageQueue(topic, m.group, ack.queue.queue_id)
                    return time.monotonic() - t_kill, m, ack
            await asyncio.sleep(0.02)
        raise AssertionError(f"no new master wrote within {timeout_s}s of the kill of {old_addr}")
    finally:
        await client.close()


def _safe(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except (OSError, ConnectionError, TimeoutError):
        return None


def check_acked_readable(acked: dict[str, Ack], stored: dict[MessageQueue, list[MessageExt]]) -> list[str]:
    """Problems (empty = none): an acked message missing, a body stored twice under one message id, a queue with a
    gap or an offset used twice, or an acked (queue, offset) now holding another message (an offset reused after a
    failover)."""
    problems: list[str] = []
    where: dict[str, list[tuple[MessageQueue, int]]] = {}
    ids: dict[str, list[str | None]] = {}
    for mq, msgs in stored.items():
        offsets = [m.queue_offset for m in msgs]
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            problems.append(f"{mq}: queue offsets not contiguous/unique: {offsets[:5]}...")
        for m in msgs:
            body = m.body.decode(errors="replace")
            where.setdefault(body, []).append((mq, m.queue_offset))
            ids.setdefault(body, []).append(m.properties.get(Prop.UNIQ_KEY))
    # the same send stored twice (one message id, or none): what the broker's de-dup must prevent. A body stored
    # again under another message id is the client's own re-send (the C++ client 2.x makes a new id per attempt,
    # so no broker can tell it from a new message): at least once, allowed
    dups = {b: w for b, w in where.items() if len(w) > 1
            and (None in ids[b] or len(set(ids[b])) < len(ids[b]))}
    if dups:
        problems.append(f"{len(dups)} bodies stored more than once under one message id, e.g. "
                        f"{list(dups.items())[:3]}")
    missing = [b for b in acked if b not in where]
    if missing:
        problems.append(f"{len(missing)} of {len(acked)} acknowledged messages missing, e.g. {missing[:5]}")
    moved = [(a.body, a.queue.queue_id, a.queue_offset, where[a.body]) for a in acked.values()
             if a.body in where and a.queue_offset >= 0
             and (a.queue.queue_id, a.queue_offset) not in {(q.queue_id, o) for q, o in where[a.body]}]
    if moved:
        problems.append(f"{len(moved)} acknowledged messages not at the queue offset they were acked at "
                        f"(offset reused?), e.g. {moved[:3]}")
    return problems


async def read_topic_at(addr: str, topic: str, queues: int) -> dict[MessageQueue, list[MessageExt]]:
    """Every message of `topic` stored on the broker at `addr` (queues 0..queues-1), pulled straight from it."""
    out: dict[MessageQueue, list[MessageExt]] = {}
    client = RemotingClient(name="readback")
    try:
        for qid in range(queues):
            mq = MessageQueue(topic, "", qid)
            offset, end = await broker_api.min_offset(client, addr, mq), await broker_api.max_offset(client, addr, mq)
            msgs: list[MessageExt] = []
            while offset < end:
                h = broker_api.pull_header("readback", mq, offset, 32, broker_api.PULL_FLAG_SUBSCRIPTION, 0, 0, "*", 0)
                r = await broker_api.pull(client, addr, h, 5000, None)
                if r.status is not PullStatus.FOUND or r.next_begin_offset <= offset:
                    break
                msgs.extend(r.msgs)
                offset = r.next_begin_offset
            out[mq] = msgs
    finally:
        await client.close()
    return out


class OffsetWatch:
    """Polls the route master every `every_s`: the max queue offset of each queue of `topic` and the committed offset
    of `group`; `backwards()` lists every value that ever went down (per queue), with the brokers that answered."""

    def __init__(self, cluster: ControllerCluster, topic: str, group: str, queues: int, every_s: float = 0.2) -> None:
        self.cluster, self.topic, self.group, self.queues, self.every_s = cluster, topic, group, queues, every_s
        self.series: dict[tuple[str, int], list[tuple[float, str, int]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._t0 = time.monotonic()

    def start(self) -> OffsetWatch:
        self._task = asyncio.ensure_future(self._poll())
        return self

    async def _poll(self) -> None:
        client = RemotingClient(name="offset-watch")
        try:
            while True:
                addr = await asyncio.to_thread(_safe, lambda: self.cluster.route_master_addr(self.topic))
                for qid in range(self.queues if addr else 0):
                    mq = MessageQueue(self.topic, self.cluster.first_group, qid)
                    with contextlib.suppress(Exception):
                        self._add(("max", qid), str(addr), await broker_api.max_offset(client, str(addr), mq, 1000))
                        self._add(("committed", qid), str(addr), await broker_api.query_consumer_offset(
                            client, str(addr), self.group, mq, 1000))
                await asyncio.sleep(self.every_s)
        finally:
            await client.close()

    def _add(self, key: tuple[str, int], addr: str, value: int) -> None:
        if value >= 0:
            s = self.series.setdefault(key, [])
            if not s or s[-1][1:] != (addr, value):
                s.append((time.monotonic() - self._t0, addr, value))

    def backwards(self) -> list[str]:
        return [f"{kind} offset of queue {q} went {a[2]} ({a[1]}, t={a[0]:.2f}s) -> {b[2]} ({b[1]}, t={b[0]:.2f}s)"
                for (kind, q), s in self.series.items() for a, b in zip(s, s[1:], strict=False) if b[2] < a[2]]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(-(-p * len(s) // 100)) - 1))]
