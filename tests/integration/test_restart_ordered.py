"""Ordered consumption across a broker kill -9: a running send_orderly load over a few sharding keys and one
orderly push consumer (our SDK) while the broker is killed -9 and started again mid-way. Per key the first
deliveries are strictly increasing with no gap, and every acknowledged send is consumed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin, ClientInstance, ConsumeOrderlyResult, Producer, PushConsumer, SendStatus
from orbitmq.client.errors import TopicNotExistError
from orbitmq.model import Message, MessageExt
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC, GROUP = "ROrderT", "CG_rorder"
KEYS = [f"key{i}" for i in range(4)]
PER_KEY = 400


@pytest.fixture(autouse=True)
def _fast_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)
    monkeypatch.setattr(ClientInstance, "route_interval_ms", 1000)


def first_delivery_problem(seqs: list[int]) -> str | None:
    """None if the values seen for the first time in `seqs` (one key's deliveries in time order) are 0, 1, 2, ...
    in order; else the reason. Values seen before (redeliveries, duplicates) are allowed anywhere."""
    max_seen = -1
    for i, s in enumerate(seqs):
        if s > max_seen:
            if s != max_seen + 1:
                return f"gap: {s} after max {max_seen} at #{i}"
            max_seen = s
    return None


def test_first_delivery_problem_rejects_gaps_and_reordering() -> None:
    assert first_delivery_problem([0, 1, 2, 1, 2, 3]) is None
    assert first_delivery_problem([0, 2, 1]) is not None
    assert first_delivery_problem([0, 1, 3]) is not None


async def _create_topic(sa: Standalone) -> None:
    async with Admin(sa.namesrv_addr) as admin:
        await admin.update_topic(TOPIC, broker_addr=sa.broker_addr, read_queue_nums=4, write_queue_nums=4)
        for _ in range(100):
            try:
                route = await admin.topic_route(TOPIC)
                if route.queue_datas and route.queue_datas[0].write_queue_nums == 4:
                    return
            except TopicNotExistError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("topic route never showed 4 queues")


def test_orderly_consumption_through_broker_kill9(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa", flushConsumerOffsetInterval=300).start()
    try:
        asyncio.run(_main(sa))
    finally:
        sa.close()


async def _main(sa: Standalone) -> None:
    await _create_topic(sa)
    consumed: dict[str, list[int]] = {k: [] for k in KEYS}
    acked: dict[str, set[int]] = {k: set() for k in KEYS}

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyResult:
        for m in msgs:
            consumed[m.properties["k"]].append(int(m.properties["seq"]))
        return ConsumeOrderlyResult.SUCCESS

    c = PushConsumer(GROUP, namesrv=sa.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", orderly=True,
                     listener_in_thread=False, rebalance_interval_ms=1000, lock_interval_ms=1000,
                     persist_offset_interval_ms=500)
    c.subscribe(TOPIC, "*", listener)
    await c.start()
    killed = asyncio.Event()
    at_kill: list[int] = []  # acknowledged sends when the broker was killed

    async def killer() -> None:
        while sum(len(v) for v in consumed.values()) < PER_KEY * len(KEYS) // 3:
            await asyncio.sleep(0.01)
        sa.kill9()
        killed.set()
        at_kill.append(sum(len(v) for v in acked.values()))
        await asyncio.to_thread(sa.start)

    async with Producer("PG_rorder", namesrv=sa.namesrv_addr) as p:
        async def one_key(key: str) -> None:
            for seq in range(PER_KEY):
                deadline = time.monotonic() + 40
                while True:  # an ordered producer retries the same message until it is acknowledged
                    try:
                        m = Message(TOPIC, f"{key}:{seq}".encode(), {"k": key, "seq": str(seq)})
                        r = await p.send_orderly(m, key)
                        if r.status == SendStatus.SEND_OK:
                            acked[key].add(seq)
                            break
                    except OrbitMQError:
                        pass
                    assert time.monotonic() < deadline, f"{key}:{seq} never acknowledged"
                    await asyncio.sleep(0.1)
                if killed.is_set() is False and seq % 20 == 0:
                    await asyncio.sleep(0.005)  # leave the consumer room to keep up before the kill

        kill_task = asyncio.ensure_future(killer())
        try:
            await asyncio.gather(*(one_key(k) for k in KEYS))
            await asyncio.wait_for(kill_task, 30)
        finally:
            kill_task.cancel()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if all(acked[k] <= set(consumed[k]) for k in KEYS):
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # late out-of-order deliveries would show up now
    finally:
        await c.shutdown()
    assert killed.is_set() and at_kill[0] < PER_KEY * len(KEYS), "the kill did not land in the middle of the load"
    print(f"acked at kill {at_kill[0]}, deliveries {sum(len(v) for v in consumed.values())}")
    missing = {k: sorted(acked[k] - set(consumed[k]))[:10] for k in KEYS if acked[k] - set(consumed[k])}
    assert not missing, f"acknowledged but never consumed: {missing}"
    assert all(acked[k] == set(range(PER_KEY)) for k in KEYS)
    problems = {k: r for k in KEYS if (r := first_delivery_problem(consumed[k])) is not None}
    assert not problems, problems
    total = sum(len(v) for v in consumed.values())
    assert total - PER_KEY * len(KEYS) < PER_KEY * len(KEYS) // 2, f"{total} deliveries"
