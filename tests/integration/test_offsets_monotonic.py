"""Issue 4 acceptance: over N restarts of the master and the slave of a group (kill -9 and SIGTERM mixed) under a
running SDK push consumer group (a producer sending all along), no committed offset ever moves backwards.

Recorded: every QUERY_CONSUMER_OFFSET answer of the master and of the slave (polled every 100 ms) and every
offset the consumer commits, per queue. Each series must be non-decreasing. The issue's 20 restarts take ~50 s.
(With skipPreOnline=true on the master the first kill -9 of the master already shows offsets going back to 0.)
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer
from orbitmq.client.instance import ClientInstance
from orbitmq.model import Message, MessageExt
from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo, KVTable
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import BrokerCluster

pytestmark = [pytest.mark.integration]

TOPIC = "MONO_T"
GROUP = "G_mono"
QUEUES = 4
RESTARTS = 20
FAST = {"slaveSyncInterval": 500, "registerNameServerPeriod": 2000}
RIP32 = {"enableSlaveActingMaster": True, "compatibleWithOldNameSrv": False, "brokerHeartbeatInterval": 500,
         "brokerNotActiveTimeoutMillis": 3000, "syncBrokerMemberGroupPeriod": 500}


@dataclass
class Recorder:
    """Every offset seen, per (source, queue); a value below the highest seen before is a violation."""

    high: dict[tuple[str, int], int] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    phase: str = "start"

    def see(self, source: str, queue: int, offset: int) -> None:
        self.seen[source] += 1
        key = (source, queue)
        prev = self.high.get(key)
        if prev is not None and offset < prev:
            self.violations.append(f"{source} q{queue}: {prev} -> {offset} during {self.phase}")
        if prev is None or offset > prev:
            self.high[key] = offset


async def invoke(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None) -> Any:
    return await client.invoke(addr, RemotingCommand.request(code, ext or {}), 2000)


async def query_offset(client: RemotingClient, addr: str, q: int) -> int | None:
    try:
        r = await invoke(client, addr, RequestCode.QUERY_CONSUMER_OFFSET,
                         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q)})
    except (OrbitMQError, OSError):
        return None
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else None


async def poll_offsets(client: RemotingClient, brokers: dict[str, str], rec: Recorder, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for name, addr in brokers.items():
            for q in range(QUEUES):
                off = await query_offset(client, addr, q)
                if off is not None:
                    rec.see(name, q, off)
        await asyncio.sleep(0.1)


async def produce(ns: str, stop: asyncio.Event, sent: list[int]) -> None:
    async with Producer("pg_mono", namesrv=ns) as p:
        i = 0
        while not stop.is_set():
            try:
                await p.send(Message(TOPIC, b"m-%d" % i, {}))
                sent[0] += 1
            except (OrbitMQError, OSError):
                await asyncio.sleep(0.2)  # the master is down: sends are refused until it is back
            i += 1
            await asyncio.sleep(0.01)


async def until(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if await pred():
                return
        except (OrbitMQError, OSError):
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    return KVTable.from_json((await invoke(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)).body).table


async def registered(client: RemotingClient, ns: str, addr: str) -> bool:
    info = ClusterInfo.from_json((await invoke(client, ns, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    return any(addr in bd.broker_addrs.values() for bd in info.broker_addr_table.values())


class Group(BrokerCluster):
    def __init__(self, root: Path) -> None:
        super().__init__(root, broker_defaults={**FAST, **RIP32}, supportActingMaster=True,
                         scanNotActiveBrokerInterval=1000)
        self.master, self.m = self.broker("broker-mono", 0, "ASYNC_MASTER", directory="b0")
        self.slave, self.s = self.broker("broker-mono", 1, "SLAVE", directory="b1", slaveReadEnable=True)


@pytest.fixture
def group(tmp_path: Path) -> Any:
    g = Group(tmp_path)
    try:
        yield g
    finally:
        g.close()


async def restart(client: RemotingClient, g: Group, i: int, rec: Recorder) -> None:
    """Restart i: even → the master, odd → the slave; kill -9 for i % 4 in (0, 1), else SIGTERM."""
    is_master = i % 2 == 0
    proc, addr = (g.master, g.m) if is_master else (g.slave, g.s)
    how = "kill -9" if i % 4 in (0, 1) else "SIGTERM"
    rec.phase = f"restart {i} ({how} {'master' if is_master else 'slave'})"
    await asyncio.to_thread(proc.kill9 if how == "kill -9" else proc.terminate)
    await asyncio.sleep(1.0)  # the group runs on the survivor for a while
    await asyncio.to_thread(proc.start, False)
    await until(lambda: registered(client, g.ns_addr, addr), 30, f"{addr} to register again")
    master_ha = (await runtime(client, g.m))["haServerAddr"]

    async def slave_follows() -> bool:
        info = await runtime(client, g.s)
        return info.get("haConnected") == "true" and info.get("haMasterAddr") == master_ha

    await until(slave_follows, 20, "the slave to follow the master")
    rec.phase = f"after restart {i}"
    await asyncio.sleep(0.7)  # consume and commit against the full group


@pytest.mark.timeout(300)
def test_no_committed_offset_moves_backwards(group: Group, monkeypatch: Any) -> None:
    restarts = RESTARTS
    # a restarted broker keeps its address: the SDK heartbeats it again only on its periodic heartbeat (30 s)
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)

    async def go() -> None:
        client = RemotingClient(name="monotonic")
        rec = Recorder()
        stop = asyncio.Event()
        sent = [0]
        delivered: Counter[tuple[int, int]] = Counter()
        try:
            async with Admin(group.ns_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=group.m, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

            def listener(msgs: list[MessageExt]) -> ConsumeResult:
                for m in msgs:
                    delivered[(m.queue_id, m.queue_offset)] += 1
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(GROUP, namesrv=group.ns_addr, instance_name="mono",
                                    consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=500,
                                    rebalance_interval_ms=2000)
            sdk_commit = consumer._commit_offset

            async def recording_commit(mq: MessageQueue, offset: int, oneway: bool) -> None:
                rec.see("consumer" if mq.topic == TOPIC else f"consumer {mq.topic}", mq.queue_id, offset)
                await sdk_commit(mq, offset, oneway)

            consumer._commit_offset = recording_commit  # type: ignore[method-assign]
            consumer.subscribe(TOPIC, "*", listener)
            tasks = [asyncio.create_task(produce(group.ns_addr, stop, sent)),
                     asyncio.create_task(poll_offsets(client, {"master": group.m, "slave": group.s}, rec, stop))]
            await consumer.start()
            try:
                await until(lambda: _committed_past(rec, 20), 30, "the first committed offsets")
                for i in range(restarts):
                    await restart(client, group, i, rec)
                rec.phase = "end"
                await asyncio.sleep(1.5)
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                await consumer.shutdown()
            assert rec.violations == [], "\n".join(rec.violations[:20])
            assert rec.seen["master"] > 20 and rec.seen["slave"] > 20 and rec.seen["consumer"] > 0, rec.seen
            assert sent[0] > 0 and delivered, "nothing flowed"
            # the committed offsets kept up with the consumption (no queue stuck behind)
            for q in range(QUEUES):
                consumed_to = max((o for (qq, o) in delivered if qq == q), default=-1)
                assert rec.high.get(("master", q), -1) >= consumed_to - 64, (q, rec.high, consumed_to)
        finally:
            await client.close()

    asyncio.run(go())


async def _committed_past(rec: Recorder, offset: int) -> bool:
    return all(rec.high.get(("master", q), -1) > offset for q in range(QUEUES))
