"""RIP-32 from the consumers' side, with real processes.

1. lockInStrictMode: a 3-member group (master + 2 slaves) grants an orderly lock with one slave down (2 of 3), the
   lock is recorded on the live slave so a second client is refused there too, and with two members down nothing
   can be locked. With acting master: a lock taken on the acting slave keeps a returning master (empty lock table)
   from handing the same queue to a second consumer.
2. Master loss: a clustering and an orderly SDK push consumer keep consuming group A's queues from its slave while
   A's master is down (kill -9); the orderly one locks its queues on the acting slave; nothing is lost. The master
   comes back: routes list it as brokerId 0 with perm RW again, the slave steps down (actingMaster=false), committed
   offsets never went backwards, and re-delivery is bounded (no mass re-consumption).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orbitmq.base.clock import monotonic_ms
from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin, ConsumeOrderlyResult, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.model import Message, MessageExt
from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo, KVTable, LockBatchBody, LockBatchResponseBody, TopicRouteData
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import (
    REPO_ROOT,
    BrokerCluster,
)

pytestmark = [pytest.mark.integration]

FAST = {"slaveSyncInterval": 500, "registerNameServerPeriod": 2000}
RIP32 = {"enableSlaveActingMaster": True, "compatibleWithOldNameSrv": False, "brokerHeartbeatInterval": 500,
         "brokerNotActiveTimeoutMillis": 3000, "syncBrokerMemberGroupPeriod": 500}


# ---- helpers ---------------------------------------------------------------------------------------------
class Cluster(BrokerCluster):
    """A name server plus broker processes, all killed at teardown."""

    def __init__(self, root: Path, **namesrv_keys: Any) -> None:
        super().__init__(root, broker_defaults=FAST, **namesrv_keys)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Any:
    made: list[Cluster] = []

    def make(**namesrv_keys: Any) -> Cluster:
        c = Cluster(tmp_path, **namesrv_keys)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()


async def invoke(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
                 body: bytes | None = None, timeout_ms: int = 3000) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, ext or {}, body), timeout_ms)


async def runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await invoke(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return KVTable.from_json(resp.body).table if resp.code == 0 and resp.body else {}


async def wait_for(pred: Callable[[], Awaitable[bool]], timeout_s: float, what: str,
                   detail: Callable[[], Any] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if await pred():
                return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}" + (f": {detail()}" if detail else ""))


async def lock(client: RemotingClient, addr: str, client_id: str, mqs: list[MessageQueue], *,
               only_this_broker: bool = False, group: str = "G_lock") -> list[MessageQueue]:
    body = LockBatchBody(group, client_id, mqs, only_this_broker=only_this_broker).to_json()
    resp = await invoke(client, addr, RequestCode.LOCK_BATCH_MQ, None, body, timeout_ms=5000)
    assert resp.code == ResponseCode.SUCCESS, f"lock on {addr}: {resp.code} {resp.remark}"
    return sorted(LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set)


async def member_ids(client: RemotingClient, ns: str, name: str) -> set[int]:
    resp = await invoke(client, ns, RequestCode.GET_BROKER_CLUSTER_INFO)
    bd = ClusterInfo.from_json(resp.body).broker_addr_table.get(name)
    return set(bd.broker_addrs) if bd is not None else set()


# ---- 1. lockInStrictMode -----------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_strict_lock_needs_a_quorum_of_the_replica_group(cluster_factory: Any) -> None:
    c = cluster_factory()
    strict = {"lockInStrictMode": True, "totalReplicas": 3}
    _, m = c.broker("broker-s", 0, "ASYNC_MASTER", **strict)
    s1_proc, s1 = c.broker("broker-s", 1, "SLAVE", **strict)
    s2_proc, _ = c.broker("broker-s", 2, "SLAVE", **strict)
    q = [MessageQueue("LockT", "broker-s", i) for i in range(3)]

    async def go() -> None:
        client = RemotingClient(name="strict-lock-test")
        try:
            s2_proc.kill9()
            await wait_for(lambda: _ids_are(client, c.ns_addr, {0, 1}), 20, "slave 2 leaving the group")
            # 2 of 3 members grant: the lock holds, and the live slave recorded it
            assert await lock(client, m, "c1@1", q[:2]) == q[:2]
            assert await lock(client, m, "c2@2", q[:2]) == []
            assert await lock(client, s1, "c2@2", q[:2], only_this_broker=True) == []
            # a second client asking the slave (as it would an acting master) is refused as well
            assert await lock(client, s1, "c2@2", q[:2]) == []
            # with the second slave gone too, 1 of 3 is no quorum: not even the holder can renew
            s1_proc.kill9()
            await wait_for(lambda: _ids_are(client, c.ns_addr, {0}), 20, "slave 1 leaving the group")
            assert await lock(client, m, "c3@3", [q[2]]) == []
            assert await lock(client, m, "c1@1", q[:2]) == []
        finally:
            await client.close()

    asyncio.run(go())


async def _ids_are(client: RemotingClient, ns: str, ids: set[int]) -> bool:
    return await member_ids(client, ns, "broker-s") == ids


@pytest.mark.timeout(120)
def test_strict_lock_taken_on_the_acting_slave_binds_the_returning_master(cluster_factory: Any) -> None:
    """RIP-32's reason for strict mode: a consumer locked a queue on the acting slave; when the master returns with
    an empty lock table, a second consumer must not get the same queue from it."""
    c = cluster_factory(supportActingMaster=True)
    keys = dict(RIP32, lockInStrictMode=True, totalReplicas=3)
    m_proc, m = c.broker("broker-s", 0, "ASYNC_MASTER", **keys)
    _, s1 = c.broker("broker-s", 1, "SLAVE", **keys)
    c.broker("broker-s", 2, "SLAVE", **keys)
    q = [MessageQueue("LockT", "broker-s", i) for i in range(2)]

    async def go() -> None:
        client = RemotingClient(name="strict-acting-test")
        try:
            m_proc.kill9()
            await wait_for(lambda: _acting_now(client, s1, True), 30, "slave 1 acting")
            async def c1_locked() -> bool:  # acting slave 1 + slave 2, once slave 1's member view lists slave 2
                return await lock(client, s1, "c1@1", q) == q
            await wait_for(c1_locked, 10, "c1 locking on the acting slave")
            await asyncio.to_thread(m_proc.restart)
            await wait_for(lambda: _acting_now(client, s1, False), 60, "slave 1 stepping down")
            assert await lock(client, m, "c2@2", q) == []  # the master alone is 1 of 3
            # a queue nobody holds is granted by the whole group
            assert await lock(client, m, "c2@2", [MessageQueue("LockT", "broker-s", 5)]) == \
                [MessageQueue("LockT", "broker-s", 5)]
        finally:
            await client.close()

    asyncio.run(go())


async def _acting_now(client: RemotingClient, addr: str, acting: bool) -> bool:
    return (await runtime(client, addr)).get("actingMaster") == str(acting).lower()


# ---- 2. consumers while the master is down -------------------------------------------------------------------
TOPIC = "AM_T"
QUEUES = 4
PER_PHASE = 240  # messages per phase, alternating between groups A and B (one: consumed before the kill, two: after)
CONSUMERS = ("G_conc", "G_ord")


class Recorder:
    """Every delivery per consumer group, and a gate that holds the listeners (messages stay on the broker)."""

    def __init__(self) -> None:
        self.deliveries: dict[str, list[MessageExt]] = defaultdict(list)
        self.gate = asyncio.Event()
        self.gate.set()
        self.after_kill: dict[str, int] = defaultdict(int)
        self.killed = False

    def listener(self, group: str, result: Any) -> Callable[[list[MessageExt]], Awaitable[Any]]:
        async def on_messages(msgs: list[MessageExt]) -> Any:
            await self.gate.wait()
            self.deliveries[group].extend(msgs)
            if self.killed:
                self.after_kill[group] += sum(1 for m in msgs if _is_a(m))
            return result
        return on_messages

    def progress(self) -> dict[str, Any]:
        """Unique deliveries per group and broker group, and the highest queue offset seen per queue of A."""
        out: dict[str, Any] = {}
        for g in CONSUMERS:
            top: dict[int, int] = {}
            for m in self.deliveries[g]:
                if _is_a(m):
                    top[m.queue_id] = max(top.get(m.queue_id, -1), m.queue_offset)
            three = sorted(int(b.split("-")[1]) for b in self.unique(g, "A") if b.startswith("three-"))
            out[g] = {"A": len(self.unique(g, "A")), "B": len(self.unique(g, "B")), "A max offsets": top,
                      "A phase three": three}
        return out

    def unique(self, group: str, broker: str | None = None) -> set[str]:
        return {m.body.decode() for m in self.deliveries[group]
                if broker is None or m.properties.get("grp") == broker}


def _is_a(m: MessageExt) -> bool:
    return m.properties.get("grp") == "A"


class OffsetWatch:
    """Polls the committed offset of every (group, A queue) on whatever broker the route lists as brokerId 0 and
    records each value seen, to check that no committed offset ever moves backwards."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.seen: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
        self.client = RemotingClient(name="offset-watch")

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                addr = await broker_id0(self.client, self.ns, "broker-a")
                if addr is not None:
                    for group in CONSUMERS:
                        for qid in range(QUEUES):
                            resp = await invoke(self.client, addr, RequestCode.QUERY_CONSUMER_OFFSET,
                                                {"consumerGroup": group, "topic": TOPIC, "queueId": str(qid)},
                                                timeout_ms=1000)
                            if resp.code == ResponseCode.SUCCESS:
                                self.seen[(group, qid)].append((addr, int(resp.ext_fields["offset"])))
            except (OSError, OrbitMQError):
                pass  # a broker dying or restarting mid-poll
            await asyncio.sleep(0.2)

    def rollbacks(self) -> list[str]:
        out = []
        for key, values in self.seen.items():
            best = -1
            for addr, off in values:
                if off < best:
                    out.append(f"{key}: {off} on {addr} after {best}")
                best = max(best, off)
        return out


async def cluster_list_rows(ns: str, name: str) -> list[tuple[Any, ...]]:
    """`orbitmq clusterList --json`: (BID, role, actingMaster, minBID) of every member of broker group `name`."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    res = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "orbitmq.cli.main", "clusterList", "--json", "-n", ns],
        capture_output=True, text=True, timeout=30, env=env, cwd=str(REPO_ROOT))
    assert res.returncode == 0, res.stderr
    return sorted((r["BID"], r["role"], r["actingMaster"], r["minBID"]) for r in json.loads(res.stdout)
                  if r["brokerName"] == name)


async def committed(client: RemotingClient, addr: str, group: str) -> dict[int, int]:
    """Committed offset of every queue of TOPIC for `group` on the broker at `addr` (-1: none)."""
    out = {}
    for qid in range(QUEUES):
        resp = await invoke(client, addr, RequestCode.QUERY_CONSUMER_OFFSET,
                            {"consumerGroup": group, "topic": TOPIC, "queueId": str(qid)})
        out[qid] = int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1
    return out


async def route(client: RemotingClient, ns: str, topic: str) -> TopicRouteData | None:
    resp = await invoke(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return TopicRouteData.from_json(resp.body) if resp.code == 0 and resp.body else None


async def broker_id0(client: RemotingClient, ns: str, name: str) -> str | None:
    r = await route(client, ns, TOPIC)
    for bd in r.broker_datas if r else []:
        if bd.broker_name == name:
            return bd.broker_addrs.get(0)
    return None


async def route_of_a(client: RemotingClient, ns: str) -> tuple[dict[int, str], int | None]:
    r = await route(client, ns, TOPIC)
    addrs = next((bd.broker_addrs for bd in (r.broker_datas if r else []) if bd.broker_name == "broker-a"), {})
    perm = next((qd.perm for qd in (r.queue_datas if r else []) if qd.broker_name == "broker-a"), None)
    return dict(addrs), perm


async def send_phase(p: Producer, tag: str, n: int, queues_of: dict[str, list[MessageQueue]]) -> None:
    """n messages alternating between group A and group B, spread over the queues (retried while a route
    change reaches the producer)."""
    for i in range(n):
        group = "A" if i % 2 == 0 else "B"
        mq = queues_of[group][(i // 2) % QUEUES]
        for attempt in range(40):
            try:
                r = await p.send(Message(TOPIC, f"{tag}-{i}".encode(), {"grp": group}), queue=mq)
                if r.status is SendStatus.SEND_OK:
                    break
            except OrbitMQError:
                if attempt == 39:
                    raise
            await asyncio.sleep(0.25)


@pytest.mark.timeout(240)
def test_consumers_keep_consuming_from_the_acting_slave_and_nothing_rolls_back(cluster_factory: Any) -> None:
    c = cluster_factory(supportActingMaster=True)
    ma_proc, ma = c.broker("broker-a", 0, "ASYNC_MASTER", **RIP32)
    _, sa = c.broker("broker-a", 1, "SLAVE", **RIP32)
    _, mb = c.broker("broker-b", 0, "ASYNC_MASTER", **RIP32)

    async def go() -> None:
        client = RemotingClient(name="acting-test")
        async with Admin(c.ns_addr) as admin:
            for addr in (ma, mb):
                await admin.update_topic(TOPIC, broker_addr=addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

        async def slave_ready() -> bool:
            m, s = await runtime(client, ma), await runtime(client, sa)
            topics = await invoke(client, sa, RequestCode.GET_ALL_TOPIC_CONFIG)
            return m.get("haConnectedSlaves") == "1" and f'"{TOPIC}"'.encode() in (topics.body or b"") \
                and s.get("actingMaster", "false") == "false"
        await wait_for(slave_ready, 30, "slave connected with the topic")
        await wait_for(lambda: _route_has(client, c.ns_addr), 20, "route of both groups")
        queues_of = {g: [MessageQueue(TOPIC, f"broker-{g.lower()}", i) for i in range(QUEUES)] for g in "AB"}

        rec = Recorder()
        watch = OffsetWatch(c.ns_addr)
        stop = asyncio.Event()
        watch_task = asyncio.create_task(watch.run(stop))
        kinds = {"G_conc": (False, ConsumeResult.SUCCESS), "G_ord": (True, ConsumeOrderlyResult.SUCCESS)}

        def consumer(group: str, instance: str) -> PushConsumer:
            orderly, result = kinds[group]
            cons = PushConsumer(group, c.ns_addr, orderly=orderly, instance_name=instance,
                                consume_from_where="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=4,
                                max_cached_messages_per_queue=8, persist_offset_interval_ms=300,
                                rebalance_interval_ms=1000, lock_interval_ms=1000, listener_in_thread=False,
                                consume_concurrency=4)
            cons.subscribe(TOPIC, "*", rec.listener(group, result))
            return cons

        consumers = {g: consumer(g, f"inst-{g}") for g in CONSUMERS}
        try:
            async with Producer("pg_acting", namesrv=c.ns_addr) as p:
                await send_phase(p, "one", PER_PHASE, queues_of)
                for cons in consumers.values():
                    await cons.start()
                await wait_for(lambda: _all_consumed(rec, PER_PHASE), 60, "phase one consumed", rec.progress)
                rec.gate.clear()  # hold the listeners: what follows stays (mostly) on the broker
                await send_phase(p, "two", PER_PHASE, queues_of)
                await asyncio.sleep(1.0)  # consumers pull up to their cache limit, then stop

                async def slave_caught_up() -> bool:
                    m, s = await runtime(client, ma), await runtime(client, sa)
                    return m.get("commitLogMaxOffset") == s.get("commitLogMaxOffset")
                await wait_for(slave_caught_up, 20, "slave caught up before the kill")
                ma_proc.kill9()
                killed_ms = monotonic_ms()
                rec.killed = True
                await wait_for(lambda: _acting(client, c.ns_addr, sa), 30,
                               "slave listed as brokerId 0, read-only, and acting")
                rec.gate.set()
                await wait_for(lambda: _all_consumed(rec, 2 * PER_PHASE), 90,
                               "every message consumed while the master is down", rec.progress)
                for group in CONSUMERS:  # more than the consumers could have cached before the kill
                    assert rec.after_kill[group] > QUEUES * (8 + 4), f"{group}: {rec.after_kill[group]} after the kill"
                # the orderly consumer re-locked its A queues after the kill (so on the acting slave: its lease
                # from the dead master could have carried it so far) and another client is refused there
                async def relocked() -> bool:
                    table = consumers["G_ord"].running_info()["mqTable"]
                    return all(table.get(mq, {}).get("locked") and table[mq]["lastLockTimestamp"] > killed_ms
                               for mq in queues_of["A"])
                await wait_for(relocked, 30, "the orderly consumer locking its queues on the acting slave")
                held = await lock(client, sa, "intruder@1", queues_of["A"], group="G_ord")
                assert held == [], f"acting slave granted G_ord queues to a second client: {held}"
                assert await cluster_list_rows(c.ns_addr, "broker-a") == [(1, "SLAVE", "true", "1")]
                # G_ord stops while the master is down: its last offsets live only on the acting slave
                await consumers["G_ord"].shutdown()
                ord_on_slave = await committed(client, sa, "G_ord")
                assert ord_on_slave == {q: PER_PHASE // QUEUES for q in range(QUEUES)}, ord_on_slave  # all consumed
                deliveries_before_return = {g: len(rec.deliveries[g]) for g in CONSUMERS}

                # the master comes back
                await asyncio.to_thread(ma_proc.restart)

                async def master_back() -> bool:
                    addrs, perm = await route_of_a(client, c.ns_addr)
                    info = await runtime(client, sa)
                    return addrs.get(0) == ma and perm == 6 and info.get("actingMaster") == "false"
                await wait_for(master_back, 60, "route lists the master (perm RW) and the slave stepped down")
                assert await cluster_list_rows(c.ns_addr, "broker-a") == [(0, "ASYNC_MASTER", "false", "0"),
                                                                          (1, "SLAVE", "false", "0")]
                # nobody committed G_ord since: the master must have taken the slave's offsets back
                ord_on_master = await committed(client, ma, "G_ord")
                assert ord_on_master == ord_on_slave, f"G_ord offsets on the returned master: {ord_on_master}"
                consumers["G_ord"] = consumer("G_ord", "inst-G_ord-2")
                await consumers["G_ord"].start()
                await send_phase(p, "three", 40, queues_of)
                # 20 s: the restarted master lost every registration; consumers must heartbeat it as soon as it
                # reappears in their routes, not on the 30 s heartbeat (pulls fail with SUBSCRIPTION_NOT_EXIST)
                await wait_for(lambda: _all_consumed(rec, 2 * PER_PHASE + 40), 20, "phase three consumed",
                               rec.progress)
                await asyncio.sleep(1.0)
        finally:
            stop.set()
            await watch_task
            for cons in consumers.values():
                await cons.shutdown()
            await watch.client.close()
            await client.close()

        assert not watch.rollbacks(), f"committed offsets moved backwards: {watch.rollbacks()[:10]}"
        for group in CONSUMERS:
            redelivered = len(rec.deliveries[group]) - deliveries_before_return[group] - 40
            # at most what a consumer can have had in flight per queue of group A (cache + one pull batch);
            # a master that forgot the acting slave's offsets re-delivers everything consumed meanwhile
            assert redelivered <= QUEUES * (8 + 4), f"{group}: {redelivered} re-deliveries after the master returned"
        ordered = [m for m in rec.deliveries["G_ord"] if _is_a(m)]
        by_queue: dict[int, list[int]] = defaultdict(list)
        for m in ordered:
            by_queue[m.queue_id].append(m.queue_offset)
        for qid, offsets in by_queue.items():
            firsts = [o for i, o in enumerate(offsets) if o not in offsets[:i]]
            assert firsts == sorted(firsts), f"orderly queue {qid} delivered out of order"

    asyncio.run(go())


async def _route_has(client: RemotingClient, ns: str) -> bool:
    r = await route(client, ns, TOPIC)
    return r is not None and {bd.broker_name for bd in r.broker_datas} == {"broker-a", "broker-b"}


async def _all_consumed(rec: Recorder, n: int) -> bool:
    return all(len(rec.unique(g)) >= n for g in CONSUMERS)


async def _acting(client: RemotingClient, ns: str, slave: str) -> bool:
    addrs, perm = await route_of_a(client, ns)
    info = await runtime(client, slave)
    return addrs.get(0) == slave and perm == 4 and info.get("actingMaster") == "true"
