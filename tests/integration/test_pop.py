"""Pop consumption against a real standalone broker: redelivery after the invisible time (reconsume times 1),
acked messages never come back, two pop consumers share one queue without duplicates, pop and push groups on one
topic each get everything, and a kill -9 of the broker loses no ack and no un-acked message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus, SimpleConsumer
from orbitmq.client.errors import TopicNotExistError
from orbitmq.model import Message, MessageExt
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.testing.procs import Standalone, blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _send(ns: str, topic: str, keys: list[str]) -> None:
    p = Producer("pop_pg", namesrv=ns)
    await p.start()
    try:
        for k in keys:
            m = Message(topic, f"body-{k}".encode(), {})
            m.keys = k
            r = await p.send(m)
            assert r.status == SendStatus.SEND_OK
    finally:
        await p.shutdown()
    await _wait_route(ns, topic)


async def _wait_route(ns: str, topic: str) -> None:
    """An auto-created topic reaches the name server with the broker's next registration."""
    async with Admin(ns) as admin:
        for _ in range(100):
            try:
                route = await admin.topic_route(topic)
                if route.queue_datas:
                    return
            except TopicNotExistError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"no route for {topic}")


async def _create_topic(sa: Standalone, topic: str, queues: int) -> None:
    async with Admin(sa.namesrv_addr) as admin:
        await admin.update_topic(topic, broker_addr=sa.broker_addr, read_queue_nums=queues, write_queue_nums=queues)
        for _ in range(100):
            try:
                route = await admin.topic_route(topic)
                if route.queue_datas and route.queue_datas[0].read_queue_nums == queues:
                    return
            except TopicNotExistError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("topic route never appeared")


async def _receive_until(c: SimpleConsumer, want: int, timeout_s: float, invisible_ms: int,
                         ack: bool = False) -> list[MessageExt]:
    got: list[MessageExt] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while len(got) < want and loop.time() < end:
        msgs = await c.receive(16, invisible_ms, 500)
        got.extend(msgs)
        if ack:
            for m in msgs:
                await c.ack(m)
    return got


def test_unacked_comes_back_with_reconsume_times_1_and_acked_never_does(standalone: Standalone) -> None:
    topic, group = "PopT1", "GPop1"

    async def main() -> None:
        await _send(standalone.namesrv_addr, topic, ["a", "b", "c"])
        async with SimpleConsumer(group, standalone.namesrv_addr, topic) as c:
            first = await _receive_until(c, 3, 10, 2000)
            assert sorted(m.keys[0] for m in first) == ["a", "b", "c"]
            assert all(m.reconsume_times == 0 and m.topic == topic for m in first)
            by_key = {m.keys[0]: m for m in first}
            await c.ack(by_key["a"])
            await c.change_invisible_time(by_key["c"], 6000)  # c stays hidden beyond b's redelivery
            await c.ack(by_key["c"])  # acked through its renewed handle: never comes back
            again = await _receive_until(c, 1, 8, 2000)
            assert [m.keys[0] for m in again] == ["b"]
            assert again[0].reconsume_times == 1 and again[0].topic == topic
            assert again[0].body == b"body-b"
            await c.ack(again[0])
            late = await _receive_until(c, 1, 5, 1000)
            assert late == [], [m.keys for m in late]

    asyncio.run(main())


def test_two_pop_consumers_share_one_queue_without_duplicates(standalone: Standalone) -> None:
    topic, group, n = "PopT2", "GPop2", 300

    async def main() -> None:
        await _create_topic(standalone, topic, 1)
        keys = [f"k{i}" for i in range(n)]
        await _send(standalone.namesrv_addr, topic, keys)
        seen: dict[str, list[str]] = {"a": [], "b": []}

        async def worker(name: str) -> None:
            async with SimpleConsumer(group, standalone.namesrv_addr, topic, instance_name=f"pop-{name}") as c:
                idle = 0
                while idle < 3:
                    msgs = await c.receive(4, 60_000, 300)
                    idle = 0 if msgs else idle + 1
                    for m in msgs:
                        seen[name].append(m.keys[0])
                        await c.ack(m)

        await asyncio.wait_for(asyncio.gather(worker("a"), worker("b")), 60)
        all_keys = seen["a"] + seen["b"]
        assert len(all_keys) == len(set(all_keys)), "a message was delivered twice"
        assert sorted(all_keys) == sorted(keys)
        assert seen["a"] and seen["b"], "both consumers should have received messages from the shared queue"

    asyncio.run(main())


def test_pop_and_push_groups_on_one_topic_each_get_everything(standalone: Standalone) -> None:
    topic, n = "PopT3", 40

    async def main() -> None:
        keys = [f"k{i}" for i in range(n)]
        await _send(standalone.namesrv_addr, topic, keys[:1])
        pushed: list[str] = []

        def listener(msgs: list[MessageExt]) -> ConsumeResult:
            pushed.extend(m.keys[0] for m in msgs)
            return ConsumeResult.SUCCESS

        push = PushConsumer("GPush3", namesrv=standalone.namesrv_addr, instance_name="push3",
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        push.subscribe(topic, "*", listener)
        await push.start()
        try:
            await _send(standalone.namesrv_addr, topic, keys[1:])
            async with SimpleConsumer("GPop3", standalone.namesrv_addr, topic) as c:
                popped = await _receive_until(c, n, 20, 30_000, ack=True)
            for _ in range(200):
                if len(set(pushed)) >= n:
                    break
                await asyncio.sleep(0.1)
        finally:
            await push.shutdown()
        assert sorted(m.keys[0] for m in popped) == sorted(keys)
        assert sorted(set(pushed)) == sorted(keys)

    asyncio.run(main())


def test_broker_kill9_loses_no_ack_and_unacked_messages_come_back(tmp_path: Path) -> None:
    topic, group, n = "PopT4", "GPop4", 20
    sa = Standalone(tmp_path / "sa", flushConsumerOffsetInterval=300).start()
    try:
        keys = [f"k{i}" for i in range(n)]

        async def before() -> None:
            await _send(sa.namesrv_addr, topic, keys)
            async with SimpleConsumer(group, sa.namesrv_addr, topic) as c:
                got = await _receive_until(c, n, 10, 3000)
                assert sorted(m.keys[0] for m in got) == sorted(keys)
                for m in got:
                    if int(m.keys[0][1:]) < n // 2:
                        await c.ack(m)
            # no pause: popOffset.json / consumerOffset.json may lag; the CK and ack records in the CommitLog decide

        asyncio.run(before())
        sa.kill9()
        sa.restart()

        async def after() -> None:
            async with SimpleConsumer(group, sa.namesrv_addr, topic) as c:
                back = await _receive_until(c, n // 2, 20, 30_000, ack=True)
                assert sorted(m.keys[0] for m in back) == sorted(keys[n // 2:])
                assert all(m.reconsume_times == 1 for m in back)
                await _send(sa.namesrv_addr, topic, ["fresh"])
                fresh = await _receive_until(c, 2, 5, 30_000, ack=True)
                assert [m.keys[0] for m in fresh] == ["fresh"], "acked messages must not be delivered again"

        asyncio.run(after())
    finally:
        sa.close()


def test_notification_reports_poppable_messages_and_long_polls(standalone: Standalone) -> None:
    topic, group = "PopT5", "GPop5"

    async def main() -> None:
        await _create_topic(standalone, topic, 1)
        header = {"consumerGroup": group, "topic": topic, "queueId": "-1", "pollTime": "0", "bornTime": "0"}

        def notify(poll_ms: int) -> dict[str, str]:
            cmd = RemotingCommand.request(RequestCode.NOTIFICATION, {**header, "pollTime": str(poll_ms)})
            resp = blocking_request(standalone.broker_addr, cmd, 10)
            assert resp.code == 0, resp.remark
            return resp.ext_fields

        assert (await asyncio.to_thread(notify, 0))["hasMsg"] == "false"
        waiting = asyncio.ensure_future(asyncio.to_thread(notify, 8000))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        t0 = asyncio.get_running_loop().time()
        await _send(standalone.namesrv_addr, topic, ["n1"])
        assert (await waiting)["hasMsg"] == "true"
        assert asyncio.get_running_loop().time() - t0 < 5, "the held notification should be woken by the send"
        async with SimpleConsumer(group, standalone.namesrv_addr, topic) as c:
            got = await _receive_until(c, 1, 5, 30_000, ack=True)
            assert [m.keys[0] for m in got] == ["n1"]
        assert (await asyncio.to_thread(notify, 0))["hasMsg"] == "false"

    asyncio.run(main())
