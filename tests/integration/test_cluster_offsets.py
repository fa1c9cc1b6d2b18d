"""Issue 17 item 2: in a group written by `orbitmq cluster init` (same confs, real processes), kill -9 the master,
consume from the slave, restart the master (from another working directory, with its conf's absolute path) and
consume again: no message is consumed twice by the group. Run with the layout as written (acting master on) and
with `enableSlaveActingMaster=false`: offsets never roll back either way (the master forwards every commit to its
slaves, a returning master takes the slaves' newer offsets back before it serves)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orbitmq.cli.cluster import init_cluster
from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.client.instance import ClientInstance
from orbitmq.model import Message, MessageExt
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import (
    LOCALHOST,
    ServerProcess,
    free_port_block,
    registered_broker_addrs,
    wait_broker_registered,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

TOPIC = "CLUSTER_OFFSETS_T"
GROUP = "G_cluster_offsets"
QUEUES = 4
BEFORE, ON_SLAVE, AFTER = 20, 20, 8  # consumed on the master / on the slave / after the master is back


class OneGroup:
    """`cluster init --groups 1` (2 name servers, broker-a master + slave), each member its own process started
    from its folder as `orbitmq cluster` does."""

    def __init__(self, root: Path, *, acting_master: bool) -> None:
        self.root = root
        self.dir = root / "cluster"
        ns_port, broker_port = free_port_block(2, 1), free_port_block(2, 10)
        init_cluster(self.dir, namesrv_port=ns_port, broker_port=broker_port, groups=1,
                     commitlog_size=16 * 1024 * 1024, acting_master=acting_master)
        flag = f"enableSlaveActingMaster={str(acting_master).lower()}"
        assert flag in (self.dir / "broker-a-0" / "broker.conf").read_text()
        self.ns_addr = f"{LOCALHOST}:{ns_port}"
        self.m, self.s = f"{LOCALHOST}:{broker_port}", f"{LOCALHOST}:{broker_port + 10}"
        self.procs: dict[str, ServerProcess] = {}
        for name, kind, port in (("namesrv-0", "namesrv", ns_port), ("namesrv-1", "namesrv", ns_port + 1),
                                 ("broker-a-0", "broker", broker_port), ("broker-a-1", "broker", broker_port + 10)):
            sub = self.dir / name
            proc = ServerProcess.cli([kind, "-c", f"{kind}.conf"], sub / f"{name}.log", ports=[port], cwd=sub,
                                     name=name)
            self.procs[name] = proc.start()
        for addr in (self.m, self.s):
            wait_broker_registered(self.ns_addr, addr, proc=self.procs["broker-a-0"])

    @property
    def master(self) -> ServerProcess:
        return self.procs["broker-a-0"]

    def restart_master_elsewhere(self) -> None:
        """`orbitmq broker -c <abs path>` from another working directory: the store must be the member's."""
        conf = self.dir / "broker-a-0" / "broker.conf"
        proc = ServerProcess.cli(["broker", "-c", str(conf)], self.dir / "broker-a-0" / "broker-a-0.log",
                                 ports=[int(self.m.rsplit(":", 1)[1])], cwd=self.root, name="broker-a-0 again")
        self.procs["broker-a-0"] = proc.start()
        wait_broker_registered(self.ns_addr, self.m, proc=proc, timeout_s=40)

    def close(self) -> None:
        for proc in reversed(self.procs.values()):
            proc.close()


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float, logs: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{logs()}")


async def runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3000)
    return KVTable.from_json(resp.body).table


async def send(producer: Producer, prefix: str, n: int) -> list[str]:
    bodies = [f"{prefix}-{i}" for i in range(n)]
    for i, body in enumerate(bodies):
        r = await producer.send_orderly(Message(TOPIC, body.encode(), {}), str(i % QUEUES))
        assert r.status is SendStatus.SEND_OK
    return bodies


async def consume(ns_addr: str, name: str, expect: int, logs: Callable[[], str],
                  during: Callable[[], Awaitable[None]] | None = None) -> list[str]:
    """A fresh consumer of GROUP (as a new consumer process would be): runs until `expect` distinct bodies came,
    then a little longer so a re-delivery would show; its offsets are committed at shutdown."""
    got: list[str] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        got.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(GROUP, namesrv=ns_addr, instance_name=name, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            persist_offset_interval_ms=300, rebalance_interval_ms=1000)
    consumer.subscribe(TOPIC, "*", listener)
    await consumer.start()
    try:
        if during is not None:
            await during()

        async def enough() -> bool:
            return len(set(got)) >= expect

        await until(f"{expect} messages for {name} (got {len(set(got))})", enough, 40, logs)
        await asyncio.sleep(1.5)
    finally:
        await consumer.shutdown()
    return got


def scenario(tmp_path: Path, acting_master: bool, monkeypatch: Any) -> None:
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)
    monkeypatch.setattr(ClientInstance, "route_interval_ms", 1000)
    cluster = OneGroup(tmp_path, acting_master=acting_master)

    def logs() -> str:
        return "\n".join(f"--- {n} ---\n{p.log_tail(25)}" for n, p in cluster.procs.items() if "broker" in n)

    async def go() -> None:
        client = RemotingClient(name="test")
        info: dict[str, str] = {}
        try:
            async def slave_connected() -> bool:  # a SYNC_MASTER answers SLAVE_NOT_AVAILABLE until then
                return (await runtime(client, cluster.m)).get("haConnectedSlaves") == "1"

            await until("the slave's HA connection", slave_connected, 30, logs)
            async with Admin(cluster.ns_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=cluster.m, read_queue_nums=QUEUES,
                                         write_queue_nums=QUEUES)

            async def slave_has_topic() -> bool:  # its metadata sync (slaveSyncInterval) took the topic
                topics = await client.invoke(cluster.s, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG),
                                             3000)
                return TOPIC.encode() in (topics.body or b"")

            # from here on, the slave learns the group's offsets only through the master's forwarding: the master
            # is killed well within one slaveSyncInterval (10 s) of the first commit
            await until("the slave to sync the topic", slave_has_topic, 30, logs)
            async with Producer("pg_cluster_offsets", namesrv=cluster.ns_addr) as producer:
                before = await send(producer, "before", BEFORE)
                got_before = await consume(cluster.ns_addr, "consumer-1", BEFORE, logs)
                on_slave = await send(producer, "slave", ON_SLAVE)

            async def slave_ready() -> bool:  # holds every message
                m, s = await runtime(client, cluster.m), await runtime(client, cluster.s)
                return m["commitLogMaxOffset"] == s["commitLogMaxOffset"]

            await until("the slave to catch up", slave_ready, 30, logs)
            cluster.master.kill9()

            async def master_gone() -> bool:
                return cluster.m not in registered_broker_addrs(cluster.ns_addr)

            await until("the name server to drop the master", master_gone, 40, logs)
            got_slave = await consume(cluster.ns_addr, "consumer-2", ON_SLAVE, logs)

            cluster.restart_master_elsewhere()
            info = await runtime(client, cluster.m)
            await until("the slave's HA connection to the returned master", slave_connected, 30, logs)

            async def produce_after() -> None:
                async with Producer("pg_cluster_offsets", namesrv=cluster.ns_addr) as p:
                    after.extend(await send(p, "after", AFTER))

            after: list[str] = []
            got_after = await consume(cluster.ns_addr, "consumer-3", AFTER, logs, during=produce_after)
        finally:
            await client.close()
        everything = got_before + got_slave + got_after
        twice = sorted({b for b in everything if everything.count(b) > 1})
        assert twice == [], f"consumed twice by the group: {twice[:10]} ({len(twice)} in all)"
        assert sorted(got_before) == sorted(before)
        assert sorted(got_slave) == sorted(on_slave)
        assert sorted(got_after) == sorted(after)
        assert info.get("preOnline") == "done", info  # the returning master took the slave's offsets back

    try:
        asyncio.run(go())
    finally:
        cluster.close()


def test_no_message_consumed_twice_across_a_master_restart(tmp_path: Path, monkeypatch: Any) -> None:
    scenario(tmp_path, True, monkeypatch)


def test_no_message_consumed_twice_without_acting_master(tmp_path: Path, monkeypatch: Any) -> None:
    scenario(tmp_path, False, monkeypatch)
