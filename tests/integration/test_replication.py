"""Classic HA replication with real processes: ASYNC and SYNC master/slave, a SYNC_MASTER killed (-9) under load
with every acked message on the slave, producer failover to the other broker group, slave read through
suggestWhichBrokerId, slave metadata sync and offset forwarding, and a slave refusing a stale master's epoch."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.client.broker_api import decode_messages
from orbitmq.model import Message, MessageExt
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.remoting import RemotingClient
from orbitmq.replication.frames import REPORT_SIZE, encode_data
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.testing.procs import (
    LOCALHOST,
    BrokerCluster,
    free_port,
    start_broker,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAST = {"slaveSyncInterval": 500, "registerNameServerPeriod": 2000}


# ---- helpers ---------------------------------------------------------------------------------------------
async def _invoke(addr: str, code: int, ext: dict[str, str] | None = None) -> Any:
    client = RemotingClient(name="test")
    try:
        return await client.invoke(addr, RemotingCommand.request(code, ext or {}), 3000)
    finally:
        await client.close()


async def runtime(addr: str) -> dict[str, str]:
    resp = await _invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return KVTable.from_json(resp.body).table


async def wait_for(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def caught_up(master: str, slave: str) -> bool:
    m, s = await runtime(master), await runtime(slave)
    return int(m["commitLogMaxOffset"]) > 0 and m["commitLogMaxOffset"] == s["commitLogMaxOffset"]


async def slave_connected(master: str) -> bool:
    return (await runtime(master)).get("haConnectedSlaves") == "1"


async def pull_all(addr: str, topic: str, queues: int, group: str = "G_check") -> list[MessageExt]:
    """Every message of `topic` on the broker at `addr` (raw PULL_MESSAGE with an explicit subscription)."""
    client = RemotingClient(name="puller")
    out: list[MessageExt] = []
    try:
        for q in range(queues):
            offset = 0
            while True:
                ext = {"consumerGroup": group, "topic": topic, "queueId": str(q), "queueOffset": str(offset),
                       "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                       "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
                resp = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 5000)
                if resp.code in (19, 20) and resp.ext_fields["nextBeginOffset"] == str(offset):
                    break  # end of the queue
                assert resp.code in (0, 19, 20), f"pull from {addr}: {resp.code} {resp.remark}"
                if resp.code != 0:
                    offset = int(resp.ext_fields["nextBeginOffset"])
                    continue
                out += decode_messages(resp.body)
                offset = int(resp.ext_fields["nextBeginOffset"])
    finally:
        await client.close()
    return out


class Cluster(BrokerCluster):
    def __init__(self, root: Path) -> None:
        super().__init__(root, broker_defaults=FAST)


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


async def slave_has_topic(slave: str, topic: str) -> bool:
    r = await _invoke(slave, RequestCode.GET_ALL_TOPIC_CONFIG)
    return f'"{topic}"'.encode() in (r.body or b"")


async def create_topic(ns: str, topic: str, addr: str, queues: int = 4) -> None:
    async with Admin(ns) as admin:
        await admin.update_topic(topic, broker_addr=addr, read_queue_nums=queues, write_queue_nums=queues)


# ---- tests -----------------------------------------------------------------------------------------------
def test_async_master_replicates_to_slave_and_slave_syncs_metadata(cluster: Cluster) -> None:
    _, m = cluster.broker("broker-a", 0, "ASYNC_MASTER")
    _, s = cluster.broker("broker-a", 1, "SLAVE", slaveReadEnable=True)

    async def go() -> None:
        await create_topic(cluster.ns_addr, "HA_ASYNC", m)
        async with Producer("pg_async", namesrv=cluster.ns_addr) as p:
            for i in range(300):
                r = await p.send(Message("HA_ASYNC", b"async-%d" % i, {}))
                assert r.status is SendStatus.SEND_OK
        # consumer offsets on the master, synced to the slave
        await _invoke(m, RequestCode.UPDATE_CONSUMER_OFFSET,
                      {"consumerGroup": "G_sync", "topic": "HA_ASYNC", "queueId": "1", "commitOffset": "42"})
        await wait_for(lambda: caught_up(m, s), 20, "slave catching up")
        await wait_for(lambda: slave_has_topic(s, "HA_ASYNC"), 20, "topic config synced to the slave")
        got = await pull_all(s, "HA_ASYNC", 4)
        assert sorted(x.body for x in got) == sorted(b"async-%d" % i for i in range(300))

        async def offset_synced() -> bool:
            r = await _invoke(s, RequestCode.QUERY_CONSUMER_OFFSET,
                              {"consumerGroup": "G_sync", "topic": "HA_ASYNC", "queueId": "1"})
            return r.code == 0 and r.ext_fields.get("offset") == "42"
        await wait_for(offset_synced, 10, "consumer offset sync")
        # an offset committed on the slave is forwarded to the master
        await _invoke(s, RequestCode.UPDATE_CONSUMER_OFFSET,
                      {"consumerGroup": "G_sync", "topic": "HA_ASYNC", "queueId": "2", "commitOffset": "7"})

        async def forwarded() -> bool:
            r = await _invoke(m, RequestCode.QUERY_CONSUMER_OFFSET,
                              {"consumerGroup": "G_sync", "topic": "HA_ASYNC", "queueId": "2"})
            return r.code == 0 and r.ext_fields.get("offset") == "7"
        await wait_for(forwarded, 10, "offset forwarded to the master")
        info = await runtime(s)
        assert info["brokerRole"] == "SLAVE" and info["masterAddr"] == m and info["haConnected"] == "true"
        minfo = await runtime(m)
        assert minfo["brokerRole"] == "ASYNC_MASTER" and minfo["haSlaveLagBytes"] == "0"
        # a slave refuses sends
        r = await _invoke(s, RequestCode.SEND_MESSAGE_V2, {"producerGroup": "x", "topic": "HA_ASYNC", "queueId": "0",
                                                         "sysFlag": "0", "bornTimestamp": "0", "flag": "0"})
        assert r.code == 14
    asyncio.run(go())


def test_sync_master_kill9_under_load_every_acked_message_is_on_the_slave(cluster: Cluster) -> None:
    ma_proc, ma = cluster.broker("broker-a", 0, "SYNC_MASTER")
    _, sa = cluster.broker("broker-a", 1, "SLAVE", slaveReadEnable=True)
    _, mb = cluster.broker("broker-b", 0, "ASYNC_MASTER")
    topic, total, senders = "HA_SYNC", 20_000, 16
    kill_after = random.Random().randint(3_000, 12_000)

    async def go() -> None:
        await create_topic(cluster.ns_addr, topic, ma)
        await create_topic(cluster.ns_addr, topic, mb)
        await wait_for(lambda: slave_connected(ma), 20, "slave connected")
        await wait_for(lambda: slave_has_topic(sa, topic), 20, "topic synced to the slave")
        acked: dict[str, list[bytes]] = {"broker-a": [], "broker-b": []}
        killed_at: list[float] = []
        first_b_after_kill: list[float] = []
        next_i = iter(range(10**9))
        count = 0
        async with Producer("pg_sync", namesrv=cluster.ns_addr, send_timeout_ms=5000) as p:
            async def sender() -> None:
                nonlocal count
                while count < total:
                    body = b"sync-%d" % next(next_i)
                    try:
                        r = await p.send(Message(topic, body, {}))
                    except Exception:
                        continue  # unacked: may or may not be stored
                    if r.status is not SendStatus.SEND_OK:
                        continue
                    acked[r.message_queue.broker_name].append(body)
                    count += 1
                    if killed_at and not first_b_after_kill and r.message_queue.broker_name == "broker-b":
                        first_b_after_kill.append(time.monotonic())
                    if count == kill_after and not killed_at:
                        ma_proc.kill9()
                        killed_at.append(time.monotonic())
            await asyncio.gather(*(sender() for _ in range(senders)))
        assert killed_at, "the master was never killed"
        assert first_b_after_kill and first_b_after_kill[0] - killed_at[0] < 5.0
        got = {x.body for x in await pull_all(sa, topic, 4)}
        missing = [b for b in acked["broker-a"] if b not in got]
        assert acked["broker-a"] and not missing, f"{len(missing)} acked messages missing on the slave"
        assert len(acked["broker-a"]) + len(acked["broker-b"]) >= total
    asyncio.run(go())


def test_sync_master_acks_only_replicated_and_consumer_reads_from_slave(cluster: Cluster) -> None:
    keys = {"slaveReadEnable": True, "accessMessageInMemoryMaxRatio": 0}
    _, m = cluster.broker("broker-a", 0, "SYNC_MASTER", **keys)

    async def go() -> None:
        await create_topic(cluster.ns_addr, "HA_READ", m)
        async with Producer("pg_read", namesrv=cluster.ns_addr, retry_times=0) as p:
            r = await p.send(Message("HA_READ", b"no-slave", {}))
            assert r.status is SendStatus.SLAVE_NOT_AVAILABLE
            assert (await runtime(m))["confirmOffset"] == "0"  # stored but not visible: not replicated
            _, s = cluster.broker("broker-a", 1, "SLAVE", **keys)
            await wait_for(lambda: slave_connected(m), 20, "slave connected")
            for i in range(100):
                r = await p.send(Message("HA_READ", b"read-%d" % i, {}))
                assert r.status is SendStatus.SEND_OK
        await wait_for(lambda: caught_up(m, s), 20, "slave catching up")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt]) -> ConsumeResult:
            got.extend(x.body for x in msgs)
            return ConsumeResult.SUCCESS
        c = PushConsumer("G_read", namesrv=cluster.ns_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("HA_READ", "*", listener)
        await c.start()
        try:
            async def all_got() -> bool:
                return len(set(got)) >= 101
            await wait_for(all_got, 30, "consumer got every message")
        finally:
            await c.shutdown()
        assert set(got) == {b"no-slave"} | {b"read-%d" % i for i in range(100)}
        assert int((await runtime(s))["msgGetTotalTodayNow"]) > 0, "the slave served no pull"
    asyncio.run(go())


def test_slave_refuses_frames_from_a_stale_master_epoch(tmp_path: Path) -> None:
    src = MessageStore(StoreConfig(str(tmp_path / "src"), mapped_file_size_commitlog=64 * 1024 * 1024))
    src.load()
    for i in range(20):
        src.put_messages_nowait([MessageInner("EPOCH_T", 0, b"e-%d" % i, {})])
    data = src.read_commitlog(0, src.max_phys_offset)
    half = len(data) // 2
    state: dict[str, Any] = {"epoch": 5, "until": half, "writer": None}

    async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state["writer"] = writer
        try:
            report = await reader.readexactly(REPORT_SIZE)
            start = int.from_bytes(report, "big")
            if state["until"] > start:
                writer.write(encode_data(start, state["epoch"], data[start : state["until"]]))
            while True:
                writer.write(encode_data(state["until"], state["epoch"]))
                await writer.drain()
                if not await reader.read(4096):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return

    async def go() -> None:
        port = free_port()
        server = await asyncio.start_server(fake_master, LOCALHOST, port)
        proc = start_broker(tmp_path / "slave", "", brokerRole="SLAVE", brokerId=1,
                            haMasterAddress=f"{LOCALHOST}:{port}", haSendHeartbeatInterval=200)
        addr = f"{LOCALHOST}:{proc.ports[0]}"
        try:
            proc.wait_ready(20)

            async def at(offset: int) -> bool:
                return (await runtime(addr))["commitLogMaxOffset"] == str(offset)
            await wait_for(lambda: at(half), 20, "first half from epoch 5")
            rt = await runtime(addr)
            assert rt["masterEpoch"] == "5", rt
            # a deposed master (epoch 3) reconnects and tries to stream the rest
            state.update(epoch=3, until=len(data))
            state["writer"].close()

            async def refused() -> bool:
                return int((await runtime(addr))["haStaleEpochRefusals"]) >= 1
            await wait_for(refused, 20, "stale epoch refused")
            assert (await runtime(addr))["commitLogMaxOffset"] == str(half)
            # the new master (epoch 6) is accepted
            state.update(epoch=6)
            state["writer"].close()
            await wait_for(lambda: at(len(data)), 20, "rest from epoch 6")
            assert (await runtime(addr))["masterEpoch"] == "6"
        finally:
            proc.close()
            server.close()
            await src.shutdown()
    asyncio.run(go())
