"""RIP-32 pre-online with real processes: a master killed (-9) while its consumers go on committing on the slave
comes back without rolling any consumer offset back, is not routed to before it took the slave's offsets, and a
push consumer started afterwards is not re-fed what was consumed on the slave."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.model import Message, MessageExt
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo, ConsumerOffsetSerializeWrapper, KVTable
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import BrokerCluster

pytestmark = [pytest.mark.integration]

TOPIC = "PRE_ONLINE_T"
GROUP = "G_preonline"
QUEUES = 4
PER_QUEUE = 50
FAST = {"slaveSyncInterval": 500, "registerNameServerPeriod": 2000}
RIP32 = {"enableSlaveActingMaster": True, "compatibleWithOldNameSrv": False, "brokerHeartbeatInterval": 500,
         "brokerNotActiveTimeoutMillis": 3000, "syncBrokerMemberGroupPeriod": 500}


class Group(BrokerCluster):
    """Name server (supportActingMaster) + master and slave of one broker group; killed at teardown."""

    def __init__(self, root: Path, **master_keys: Any) -> None:
        super().__init__(root, broker_defaults={**FAST, **RIP32}, supportActingMaster=True,
                         scanNotActiveBrokerInterval=1000)
        self.master, self.m = self.broker("broker-p", 0, "ASYNC_MASTER", directory="b0", **master_keys)
        self.slave, self.s = self.broker("broker-p", 1, "SLAVE", directory="b1", slaveReadEnable=True)


@pytest.fixture
def group(tmp_path: Path) -> Any:
    g = Group(tmp_path, flushConsumerOffsetInterval=60_000)  # the master's file stays old: only pre-online helps
    try:
        yield g
    finally:
        g.close()


async def invoke(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None) -> Any:
    return await client.invoke(addr, RemotingCommand.request(code, ext or {}), 3000)


async def query_offset(client: RemotingClient, addr: str, q: int) -> int | None:
    """The committed offset of (GROUP, TOPIC, q) at `addr`; None when the broker does not answer it."""
    try:
        r = await invoke(client, addr, RequestCode.QUERY_CONSUMER_OFFSET,
                         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q)})
    except OSError:
        return None
    except Exception as e:  # noqa: BLE001 - connection refused / reset while the master restarts
        if "Remoting" in type(e).__name__:
            return None
        raise
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else None


async def commit(client: RemotingClient, addr: str, q: int, offset: int) -> None:
    r = await invoke(client, addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                     {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q), "commitOffset": str(offset)})
    assert r.code == ResponseCode.SUCCESS, r.remark


async def registered(client: RemotingClient, ns: str, addr: str) -> bool:
    r = await invoke(client, ns, RequestCode.GET_BROKER_CLUSTER_INFO)
    info = ClusterInfo.from_json(r.body)
    return any(addr in bd.broker_addrs.values() for bd in info.broker_addr_table.values())


async def runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    return KVTable.from_json((await invoke(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)).body).table


async def until(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(120)
def test_restarted_master_takes_back_the_slave_offsets(group: Group) -> None:
    async def go() -> None:
        client = RemotingClient(name="test")
        try:
            async with Admin(group.ns_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=group.m, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            async with Producer("pg_preonline", namesrv=group.ns_addr) as p:
                for i in range(QUEUES * PER_QUEUE):
                    r = await p.send(Message(TOPIC, b"m-%d" % i, {}))
                    assert r.status is SendStatus.SEND_OK
            m_max = (await runtime(client, group.m))["commitLogMaxOffset"]
            await until(lambda: _same_max(client, group.s, m_max), 20, "the slave to catch up")

            for q in range(QUEUES):  # consumed 10 per queue, committed on the master
                await commit(client, group.m, q, 10)
            await until(lambda: _all_at_least(client, group.s, 10), 10, "the slave to hold the master's offsets")

            group.master.kill9()
            for q in range(QUEUES):  # while the master is down the group consumes on the slave up to 40
                await commit(client, group.s, q, 40)
            assert [await query_offset(client, group.s, q) for q in range(QUEUES)] == [40] * QUEUES

            # restart: from its first answer on, the master never shows an offset below the slave's
            group.master.start(wait=False)
            seen_low: list[tuple[int, int]] = []
            answered_before_registered = False
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                for q in range(QUEUES):
                    off = await query_offset(client, group.m, q)
                    if off is not None and off < 40:
                        seen_low.append((q, off))
                # answered, and *then* still not registered: it answered before registering (registration only
                # moves forward; checking in the other order flagged a registration between the two calls)
                answered = await query_offset(client, group.m, 0) is not None
                if await registered(client, group.ns_addr, group.m):
                    break
                answered_before_registered = answered_before_registered or answered
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("restarted master never registered:\n" + group.master.log_tail())
            assert seen_low == [], f"master answered rolled-back offsets {seen_low[:8]}"
            assert not answered_before_registered  # pre-online ran before the broker served anything
            assert [await query_offset(client, group.m, q) for q in range(QUEUES)] == [40] * QUEUES
            info = await runtime(client, group.m)
            assert info.get("preOnline") == "done", info
            body = (await invoke(client, group.m, RequestCode.GET_ALL_CONSUMER_OFFSET)).body
            wrapper = ConsumerOffsetSerializeWrapper.from_json(body)
            assert wrapper.data_version is not None and wrapper.offset_table[f"{TOPIC}@{GROUP}"] == {
                q: 40 for q in range(QUEUES)}
            await until(lambda: _slave_follows(client, group.s, info["haServerAddr"]), 10, "the slave to follow")

            # a push consumer of the group starts where the slave left off: nothing below 40 is re-fed
            got: list[MessageExt] = []

            def listener(msgs: list[MessageExt]) -> ConsumeResult:
                got.extend(msgs)
                return ConsumeResult.SUCCESS

            c = PushConsumer(GROUP, namesrv=group.ns_addr, instance_name="pre-online-check")
            c.subscribe(TOPIC, "*", listener)
            await c.start()
            try:
                await until(lambda: _count_at_least([(m.queue_id, m.queue_offset) for m in got], QUEUES * (PER_QUEUE - 40)),
                            30, "the unconsumed tail")
                await asyncio.sleep(1)
            finally:
                await c.shutdown()
            redelivered = [(m.queue_id, m.queue_offset) for m in got if m.queue_offset < 40]
            assert redelivered == [], f"re-consumed {len(redelivered)} messages: {redelivered[:8]}"
            assert sorted({(m.queue_id, m.queue_offset) for m in got}) == [
                (q, o) for q in range(QUEUES) for o in range(40, PER_QUEUE)]
        finally:
            await client.close()

    asyncio.run(go())


async def _same_max(client: RemotingClient, addr: str, max_offset: str) -> bool:
    return (await runtime(client, addr)).get("commitLogMaxOffset") == max_offset


async def _all_at_least(client: RemotingClient, addr: str, offset: int) -> bool:
    got = [await query_offset(client, addr, q) for q in range(QUEUES)]
    return all(o is not None and o >= offset for o in got)


async def _slave_follows(client: RemotingClient, slave: str, ha_addr: str) -> bool:
    info = await runtime(client, slave)
    return info.get("haConnected") == "true" and info.get("haMasterAddr") == ha_addr


async def _count_at_least(items: list[Any], n: int) -> bool:
    """At least n distinct items: a re-delivered one must not end the wait early."""
    return len(set(items)) >= n


@pytest.mark.timeout(150)
def test_slave_behind_when_the_master_dies_rolls_nothing_back(group: Group, monkeypatch: Any) -> None:
    """The slave misses the newest messages (down while they were sent), then the master dies: the consumer's offset
    lies past the acting slave's queue end. It must be kept (not moved back to 0), and once the master is back the
    group goes on from there: no message consumed twice, no committed offset lower than before."""
    from orbitmq.client.instance import ClientInstance

    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)

    async def go() -> None:
        client = RemotingClient(name="test")
        got: list[tuple[int, int]] = []
        commits: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
        try:
            async with Admin(group.ns_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=group.m, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

            def listener(msgs: list[MessageExt]) -> ConsumeResult:
                got.extend((m.queue_id, m.queue_offset) for m in msgs)
                return ConsumeResult.SUCCESS

            c = PushConsumer(GROUP, namesrv=group.ns_addr, instance_name="behind",
                             consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=300,
                             rebalance_interval_ms=1000)
            sdk_commit = c._commit_offset

            async def recording_commit(mq: Any, offset: int, oneway: bool) -> None:
                if mq.topic == TOPIC:
                    commits[mq.queue_id].append(offset)
                await sdk_commit(mq, offset, oneway)

            c._commit_offset = recording_commit  # type: ignore[method-assign]
            c.subscribe(TOPIC, "*", listener)
            async with Producer("pg_behind", namesrv=group.ns_addr) as p:
                await _send(p, QUEUES * 10)
                m_max = (await runtime(client, group.m))["commitLogMaxOffset"]
                await until(lambda: _same_max(client, group.s, m_max), 20, "the slave to catch up")
                await until(lambda: _has_topic(client, group.s), 20, "the slave to sync the topic")
                await c.start()
                try:
                    await until(lambda: _count_at_least(got, QUEUES * 10), 30, "the first messages")
                    group.slave.kill9()  # the slave misses what follows
                    await _send(p, QUEUES * 10)
                    await until(lambda: _count_at_least(got, QUEUES * 20), 30, "the second batch")
                    await until(lambda: _all_at_least(client, group.m, 20), 10, "offsets 20 committed")
                    group.master.kill9()
                    group.slave.start(wait=True)
                    await until(lambda: registered(client, group.ns_addr, group.s), 20, "the slave back")
                    # the acting slave has 10 per queue, the consumer is at 20: keep 20, never 0
                    for q in range(QUEUES):
                        r = await invoke(client, group.s, RequestCode.PULL_MESSAGE, {
                            "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q), "queueOffset": "20",
                            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                            "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
                        assert r.code != ResponseCode.PULL_OFFSET_MOVED, r.remark
                        assert (r.ext_fields or {}).get("nextBeginOffset") == "20", (r.code, r.remark)
                    await asyncio.sleep(2)  # the consumer works against the acting slave
                    group.master.start(wait=False)
                    await until(lambda: registered(client, group.ns_addr, group.m), 30, "the master back")
                    await until(lambda: _all_at_least(client, group.m, 20), 10, "the master's offsets")
                    await _send(p, QUEUES * 5)
                    await until(lambda: _count_at_least(got, QUEUES * 25), 40, "the third batch")
                    await asyncio.sleep(1)
                finally:
                    await c.shutdown()
            twice = [k for k in set(got) if got.count(k) > 1]
            assert twice == [], f"consumed twice: {sorted(twice)[:8]}"
            assert sorted(set(got)) == [(q, o) for q in range(QUEUES) for o in range(25)]
            for q, seq in commits.items():
                assert seq == sorted(seq), f"queue {q}: commits went back: {seq}"
        finally:
            await client.close()

    asyncio.run(go())


async def _has_topic(client: RemotingClient, addr: str) -> bool:
    r = await invoke(client, addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    return f'"{TOPIC}"'.encode() in (r.body or b"")


async def _send(p: Producer, n: int) -> None:
    """n messages, spread evenly over the queues."""
    for i in range(n):
        r = await p.send_orderly(Message(TOPIC, b"x-%d" % i, {}), str(i % QUEUES))  # "0".."3" hash to 0..3
        assert r.status is SendStatus.SEND_OK
