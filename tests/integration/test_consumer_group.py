"""Two push consumers of one group against a real broker process: they split the queues; when one stops the other
takes over without losing a message; committed offsets survive a broker restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.client.errors import TopicNotExistError
from orbitmq.model import Message, MessageExt
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOPIC, GROUP = "GroupT", "G_failover"


class Recorder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.keys: list[str] = []
        self.queues: set[int] = set()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeResult:
        for m in msgs:
            self.keys.append(m.keys[0])
            self.queues.add(m.queue_id)
        return ConsumeResult.SUCCESS


async def _send(p: Producer, start: int, n: int) -> list[str]:
    keys = []
    for i in range(start, start + n):
        m = Message(TOPIC, f"m{i}".encode(), {})
        m.keys = f"k{i}"
        r = await p.send(m)
        assert r.status == SendStatus.SEND_OK
        keys.append(f"k{i}")
    return keys


async def _wait(pred, timeout_s: float, what: str) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_consumers_split_then_failover_and_offsets_survive_restart(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa").start()
    try:
        async def phase1() -> tuple[list[str], dict]:
            async with Admin(sa.namesrv_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=sa.broker_addr, read_queue_nums=8, write_queue_nums=8)
                for _ in range(100):  # until the broker's registration carries the new topic
                    try:
                        route = await admin.topic_route(TOPIC)
                        if route.queue_datas and route.queue_datas[0].write_queue_nums == 8:
                            break
                    except TopicNotExistError:
                        pass
                    await asyncio.sleep(0.1)
            a, b = Recorder("a"), Recorder("b")
            ca = PushConsumer(GROUP, namesrv=sa.namesrv_addr, instance_name="a",
                              consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=500)
            cb = PushConsumer(GROUP, namesrv=sa.namesrv_addr, instance_name="b",
                              consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=500)
            ca.subscribe(TOPIC, "*", a)
            cb.subscribe(TOPIC, "*", b)
            await ca.start()
            await cb.start()
            sent: list[str] = []
            async with Producer("G_failover_pg", namesrv=sa.namesrv_addr) as p:
                # 1. both consume: the 8 queues are split 4/4
                sent += await _send(p, 0, 400)
                await _wait(lambda: len(set(a.keys) | set(b.keys)) >= 400, 60, "first 400 messages")
                assert a.queues and b.queues and not (a.queues & b.queues)
                assert len(a.queues) == len(b.queues) == 4
                # 2. a stops; b takes over all queues, and nothing sent meanwhile is lost
                await ca.shutdown()
                sent += await _send(p, 400, 400)
                await _wait(lambda: set(sent) <= set(a.keys) | set(b.keys), 60, "takeover")
                assert len(b.queues) == 8
            await asyncio.sleep(1.2)  # one offset persist period
            await cb.shutdown()  # persists offsets
            async with Admin(sa.namesrv_addr) as admin:
                progress = {str(row[0]): row for row in await admin.consumer_progress(GROUP, TOPIC)}
            return sent, progress

        sent, before = asyncio.run(phase1())
        assert before and all(row[2] == row[1] for row in before.values()), "consumer offsets lag after shutdown"
        sa.terminate()
        sa.start()

        async def phase2() -> list[str]:
            async with Admin(sa.namesrv_addr) as admin:
                after = {str(row[0]): row for row in await admin.consumer_progress(GROUP, TOPIC)}
            assert {k: v[2] for k, v in after.items()} == {k: v[2] for k, v in before.items()}
            # a restarted consumer of the group resumes from the committed offsets: it sees only new messages
            c = Recorder("c")
            cc = PushConsumer(GROUP, namesrv=sa.namesrv_addr, instance_name="c",
                              consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            cc.subscribe(TOPIC, "*", c)
            await cc.start()
            async with Producer("G_failover_pg", namesrv=sa.namesrv_addr) as p:
                fresh = await _send(p, 800, 50)
            await _wait(lambda: set(fresh) <= set(c.keys), 60, "fresh messages")
            await asyncio.sleep(0.5)
            await cc.shutdown()
            return c.keys

        got = asyncio.run(phase2())
        assert not set(got) & set(sent), "messages committed before the restart were consumed again"
    finally:
        sa.close()
