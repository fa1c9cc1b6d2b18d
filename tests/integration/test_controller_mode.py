"""Controller mode end to end on real processes (127.0.0.1): 3 `orbitmq controller`s, a name server and one broker
group of 3 (brokerId=-1, allAckInSyncStateSet=true; orbitmq/testing/controller_cluster.py). Ids assigned by the
controller and kept in brokerIdentity across a restart; one master; the SyncStateSet grows to 3; a send is
acknowledged and readable on all three; kill -9 of the master -> a slave becomes master, accepts writes and is
brokerId 0 in the route; the old master comes back as a slave and catches up; no acknowledged message lost, consumer
offsets never went back. Every wait is for a condition, bounded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.controller import EpochEntryCache
from orbitmq.remoting import RemotingClient
from orbitmq.testing.controller_cluster import BrokerMember, ControllerCluster
from orbitmq.testing.failover_load import (
    Ack,
    check_acked_readable,
    probe_send,
    read_topic_at,
    wait_new_master_write,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "CtlModeTopic"
QUEUES = 2
GROUP = "G_ctl_mode"


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except (OSError, ConnectionError, TimeoutError, OrbitMQError) as e:  # e.g. a slave without the topic yet
            last = e
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def identity(m: BrokerMember) -> str:
    return (m.store_dir / "brokerIdentity").read_text()


async def runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(json.loads(resp.body)["table"])


async def committed(client: RemotingClient, addr: str, queue_id: int) -> int:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "setZeroIfNotFound": "false"}), 3000)
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


async def commit(client: RemotingClient, addr: str, queue_id: int, offset: int) -> None:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "commitOffset": str(offset)}), 3000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def send_batch(client: RemotingClient, addr: str, prefix: str, n: int, acked: dict[str, Ack]) -> None:
    for i in range(n):
        body = f"{prefix}-{i}"
        ack = await probe_send(client, addr, TOPIC, body, queue_id=i % QUEUES, timeout_ms=5000)
        assert ack is not None, f"send of {body} to {addr} not acknowledged"
        acked[body] = ack


async def has_all(addr: str, acked: dict[str, Ack]) -> bool:
    stored = await read_topic_at(addr, TOPIC, QUEUES)
    bodies = {m.body.decode() for msgs in stored.values() for m in msgs}
    return set(acked) <= bodies


async def scenario(c: ControllerCluster) -> None:
    members = c.members()
    ids_before = {m.name: identity(m) for m in members}
    assert len({t.rsplit("#", 1)[1] for t in ids_before.values()}) == 3, ids_before
    assert all(t.startswith("DefaultCluster#broker-a#") for t in ids_before.values()), ids_before
    assert not any((m.store_dir / "brokerIdentity-temp").exists() for m in members)
    master = await asyncio.to_thread(c.wait_master)
    async with Admin(c.ns_addr) as admin:
        await admin.update_topic(TOPIC, broker_addr=master.addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    await asyncio.to_thread(lambda: c.wait_master(topic=TOPIC))
    client = RemotingClient(name="ctl-mode-test")
    try:
        info = await runtime(client, master.addr)
        assert info["controllerRole"] == "MASTER" and info["brokerId"] == "0", info
        assert len(info["syncStateSet"].split(",")) == 3, info
        for m in members:
            if m is not master:
                r = await runtime(client, m.addr)
                assert r["controllerRole"] == "SLAVE" and r["brokerRole"] == "SLAVE", r
                assert r["controllerBrokerId"] == r["brokerId"] != "0", r
        await until("the master's write lease", lambda: _lease_held(client, master.addr))
        acked: dict[str, Ack] = {}
        await send_batch(client, master.addr, "a", 20, acked)
        for m in members:  # all-ack: acknowledged means every SyncStateSet member has it
            await until(f"the acked messages readable on {m.name}", lambda a=m.addr: has_all(a, acked))
        resp = await client.invoke(master.addr, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), 3000)
        cache = EpochEntryCache.from_json(resp.body)
        assert cache.epoch_list and cache.max_offset > 0, cache
        await commit(client, master.addr, 0, 7)
        for m in members:  # forwarded master -> slaves at once
            await until(f"offset 7 on {m.name}", lambda a=m.addr: _eq(committed(client, a, 0), 7))

        t_kill = await asyncio.to_thread(c.kill9, master)
        secs, new, ack = await wait_new_master_write(c, TOPIC, master.addr, t_kill, "after-kill")
        print(f"kill -9 of the master -> a new master accepted a write after {secs:.2f} s")
        acked[ack.body] = ack
        assert new is not master
        assert await committed(client, new.addr, 0) >= 7, "a consumer offset went back after the failover"
        info = await runtime(client, new.addr)
        assert info["controllerRole"] == "MASTER" and info["brokerId"] == "0" and info["fenced"] == "false", info
        await send_batch(client, new.addr, "b", 10, acked)
        await commit(client, new.addr, 1, 5)

        await asyncio.to_thread(c.restart, master)
        await asyncio.to_thread(c.wait_group_ready, None, 3, 90.0)
        assert await asyncio.to_thread(c.master) is new, "the old master took over again"
        r = await runtime(client, master.addr)
        assert r["controllerRole"] == "SLAVE", r
        assert identity(master) == ids_before[master.name], "the broker id changed across a restart"
        await until("the old master caught up", lambda: has_all(master.addr, acked), 60)
        await until("offsets on the old master", lambda: _eq(committed(client, master.addr, 0), 7))
        stored = await read_topic_at(new.addr, TOPIC, QUEUES)
        problems = check_acked_readable(acked, stored)
        assert not problems, "\n".join(problems)
        assert await committed(client, new.addr, 0) >= 7 and await committed(client, new.addr, 1) >= 5
    finally:
        await client.close()


async def _lease_held(client: RemotingClient, addr: str) -> bool:
    r = await runtime(client, addr)
    return int(r["leaseRemainingMs"]) > 0 and r["fenced"] == "false"


async def _eq(value: Awaitable[int], want: int) -> bool:
    return await value >= want


async def fencing_scenario(c: ControllerCluster) -> None:
    """#7017: the master loses every controller link (black hole: no close is seen), keeps its replicas and
    clients. It must stop acknowledging writes before the controller may elect another master."""
    old = await asyncio.to_thread(c.wait_master)
    async with Admin(c.ns_addr) as admin:
        await admin.update_topic(TOPIC, broker_addr=old.addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    client = RemotingClient(name="ctl-fence-test")
    acked: dict[str, Ack] = {}
    try:
        await until("the master's write lease", lambda: _lease_held(client, old.addr))
        await send_batch(client, old.addr, "pre", 5, acked)
        t_cut = time.monotonic()
        await asyncio.to_thread(c.cut_controller_links, old, True)
        last_old_ack = t_cut
        i = 0
        new: BrokerMember | None = None
        first_new_ack: float | None = None
        deadline = t_cut + 30
        while time.monotonic() < deadline and first_new_ack is None:
            i += 1
            ack = await probe_send(client, old.addr, TOPIC, f"old-{i}", queue_id=i % QUEUES, timeout_ms=500)
            if ack is not None:
                acked[ack.body] = ack
                last_old_ack = time.monotonic()
            m = await asyncio.to_thread(c.master)
            if m is not None and m is not old:
                ack = await probe_send(client, m.addr, TOPIC, f"new-{i}", queue_id=i % QUEUES, timeout_ms=1000)
                if ack is not None:
                    acked[ack.body] = ack
                    new, first_new_ack = m, time.monotonic()
            await asyncio.sleep(0.02)
        assert new is not None and first_new_ack is not None, "no new master after the cut"
        print(f"cut at 0: old master's last ack {last_old_ack - t_cut:.2f} s, "
              f"new master's first ack {first_new_ack - t_cut:.2f} s")
        assert last_old_ack < first_new_ack, "two masters acknowledged writes at the same time"
        # lease = controllerHeartBeatTimeoutMills - 2 x brokerHeartbeatInterval = 2 s after the last renewal (sent
        # before the cut); the bound leaves room for the answer of a put accepted just before the lease ran out
        assert last_old_ack - t_cut < 3.0
        r = await runtime(client, old.addr)
        assert r["fenced"] == "true", r
        assert await probe_send(client, old.addr, TOPIC, "refused", timeout_ms=1000) is None
        await asyncio.to_thread(c.heal_controller_links, old)
        await until("the old master steps down to slave",
                    lambda: _role_is(client, old.addr, "SLAVE"), 30)
        await until("the old master has every acked message", lambda: has_all(old.addr, acked), 60)
        problems = check_acked_readable(acked, await read_topic_at(new.addr, TOPIC, QUEUES))
        assert not problems, "\n".join(problems)
    finally:
        await client.close()


async def _role_is(client: RemotingClient, addr: str, role: str) -> bool:
    return (await runtime(client, addr))["controllerRole"] == role


def test_controller_mode_master_without_controller_is_fenced(tmp_path: Path) -> None:
    c = ControllerCluster(tmp_path)
    try:
        try:
            c.start(timeout_s=90)
            asyncio.run(asyncio.wait_for(fencing_scenario(c), 200))
        except BaseException:
            print(c.logs(60))
            raise
    finally:
        c.close()


def test_controller_mode_failover(tmp_path: Path) -> None:
    c = ControllerCluster(tmp_path)
    try:
        try:
            c.start(timeout_s=90)
            asyncio.run(asyncio.wait_for(scenario(c), 240))
        except BaseException:
            print(c.logs(60))
            raise
    finally:
        c.close()
