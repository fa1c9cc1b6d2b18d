"""Delay levels, retry and dead letters against a real broker process: a level-2 message arrives 5 s (±1 s) after
its send through a broker restart (SIGTERM and kill -9); a consumer failing a message sees reconsumeTimes 1, 2, 3
at growing delays; past maxReconsumeTimes the message sits in the read-only %DLQ%<group>, queryable and pullable."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.client import Admin, ConsumeResult, Producer, PullConsumer, PullStatus, PushConsumer, SendStatus
from orbitmq.client.consume import ConsumeOrderlyResult
from orbitmq.model import Message, MessageExt, MessageQueue, Prop
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.admin import DelayOffsetSerializeWrapper
from orbitmq.testing.procs import Standalone, blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class Arrivals:
    """Listener recording (wall time, message) per key; fails a key's first `fail_times` deliveries."""

    def __init__(self, fail_times: int = 0, orderly: bool = False, fail_keys: tuple[str, ...] = ()) -> None:
        self.fail_times = fail_times
        self.fail_keys = fail_keys
        self.orderly = orderly
        self.seen: dict[str, list[tuple[float, MessageExt]]] = {}

    def __call__(self, msgs: list[MessageExt]) -> ConsumeResult | ConsumeOrderlyResult:
        failed = False
        for m in msgs:
            got = self.seen.setdefault(m.keys[0] if m.keys else "", [])
            got.append((time.time(), m))
            failed = failed or (m.keys[0] in self.fail_keys and len(got) <= self.fail_times)
        if self.orderly:
            return ConsumeOrderlyResult.SUSPEND if failed else ConsumeOrderlyResult.SUCCESS
        return ConsumeResult.RECONSUME_LATER if failed else ConsumeResult.SUCCESS

    async def wait_for(self, key: str, count: int, timeout_s: float) -> list[tuple[float, MessageExt]]:
        deadline = time.monotonic() + timeout_s
        while len(self.seen.get(key, [])) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.seen.get(key, [])


async def _send(namesrv: str, topic: str, key: str, delay_level: int = 0, sharding_key: str | None = None) -> float:
    async with Producer("P_delay", namesrv=namesrv) as p:
        m = Message(topic, key.encode(), {})
        m.keys = key
        if delay_level:
            m.delay_level = delay_level
        sent = time.time()
        r = await (p.send(m) if sharding_key is None else p.send_orderly(m, sharding_key))
        assert r.status == SendStatus.SEND_OK
        return sent


def _push(namesrv: str, group: str, topic: str, listener: Arrivals, **kw: object) -> PushConsumer:
    c = PushConsumer(group, namesrv=namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     listener_in_thread=False, rebalance_interval_ms=1000, **kw)  # type: ignore[arg-type]
    c.subscribe(topic, "*", listener)
    return c


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_delay_level_2_arrives_after_5s_through_restart(tmp_path: Path, how: str) -> None:
    s = Standalone(tmp_path / "s", messageDelayLevel="1s 5s 10s").start()
    try:
        asyncio.run(_send(s.namesrv_addr, "DelayT", "warmup"))  # creates the topic
        sent = asyncio.run(_send(s.namesrv_addr, "DelayT", "late", delay_level=2))
        time.sleep(0.3)
        if how == "kill9":
            s.kill9()
            s.start()
        else:
            s.restart()
        assert time.time() - sent < 4.5, "restart took too long for this test to mean anything"

        async def consume() -> list[tuple[float, MessageExt]]:
            rec = Arrivals()
            c = _push(s.namesrv_addr, "G_delay", "DelayT", rec)
            await c.start()
            try:
                await rec.wait_for("late", 1, 12.0)
                await asyncio.sleep(1.5)  # a second delivery (double re-put) would show up by now
                return list(rec.seen.get("late", []))
            finally:
                await c.shutdown()

        got = asyncio.run(consume())
        assert len(got) == 1, f"expected exactly one delivery, got {len(got)}"
        arrived, msg = got[0]
        assert 4.0 <= arrived - sent <= 6.0, f"arrived {arrived - sent:.2f} s after send"
        assert 4000 <= msg.store_timestamp - sent * 1000 <= 6000  # when it reached DelayT, broker side
        assert msg.topic == "DelayT" and Prop.DELAY not in msg.properties
        assert msg.properties.get(Prop.REAL_TOPIC) == "DelayT"
        path = s.store_dir / "config" / "delayOffset.json"
        deadline = time.monotonic() + 5
        while not (path.exists() and b"2:1" in path.read_bytes()) and time.monotonic() < deadline:
            time.sleep(0.1)  # progress is persisted every 2 s
        # RocketMQ's delayOffset.json layout (fastjson, integer keys) with the 5.x data version in front
        persisted = path.read_bytes()
        assert persisted.startswith(b'{"dataVersion":{') and persisted.endswith(b',"offsetTable":{2:1}}')
        assert DelayOffsetSerializeWrapper.from_json(persisted).offset_table == {2: 1}
        resp = blocking_request(s.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
        assert resp.code == ResponseCode.SUCCESS and resp.body.endswith(b',"offsetTable":{2:1}}')
        served = DelayOffsetSerializeWrapper.from_json(resp.body)
        assert served.offset_table == {2: 1} and served.data_version is not None
    finally:
        s.close()


def test_reconsume_backoff_then_dead_letter_queue(tmp_path: Path) -> None:
    # the back-off starts at level 3: 1 s, then 2 s, 3 s
    s = Standalone(tmp_path / "s", messageDelayLevel="1s 1s 1s 2s 3s 4s 5s 6s").start()
    try:
        asyncio.run(_main_retry_dlq(s))
    finally:
        s.close()


async def _main_retry_dlq(s: Standalone) -> None:
    ns = s.namesrv_addr
    await _send(ns, "RetryT", "warmup")
    retrying = Arrivals(fail_times=3, fail_keys=("flaky",))
    dead = Arrivals(fail_times=1000, fail_keys=("flaky",))
    c1 = _push(ns, "G_retry", "RetryT", retrying)
    c2 = _push(ns, "G_dead", "RetryT", dead, max_reconsume_times=2)
    await c1.start()
    await c2.start()
    try:
        await _send(ns, "RetryT", "flaky")
        got = await retrying.wait_for("flaky", 4, 20.0)
        times = [m.reconsume_times for _, m in got]
        assert times == [0, 1, 2, 3], times
        assert all(m.topic == "RetryT" for _, m in got)
        gaps = [got[i + 1][0] - got[i][0] for i in range(3)]
        assert 0.7 <= gaps[0] <= 2.0 and 1.7 <= gaps[1] <= 3.0 and 2.7 <= gaps[2] <= 4.0, gaps
        assert gaps[0] < gaps[1] < gaps[2], gaps
        assert got[1][1].properties.get(Prop.RETRY_TOPIC) == "RetryT"
        assert got[1][1].properties.get(Prop.ORIGIN_MESSAGE_ID) == got[0][1].offset_msg_id
        assert got[3][1].msg_id == got[0][1].msg_id  # UNIQ_KEY kept: the client id stays the same
        dead_got = await dead.wait_for("flaky", 3, 10.0)
        assert [m.reconsume_times for _, m in dead_got] == [0, 1, 2]
        await asyncio.sleep(1.5)  # the third failure went to the DLQ, not back to the consumer
        assert len(dead.seen["flaky"]) == 3
    finally:
        await c1.shutdown()
        await c2.shutdown()
    await _check_dlq(s, "%DLQ%G_dead", "flaky", got[0][1].offset_msg_id)


async def _check_dlq(s: Standalone, dlq: str, key: str, origin_id: str) -> None:
    async with Admin(s.namesrv_addr) as admin:
        route = await admin.topic_route(dlq)
        assert [qd.perm for qd in route.queue_datas] == [4]
        found: list[MessageExt] = []
        for _ in range(40):  # the index is queryable as soon as the record is dispatched
            found = await admin.query_msg_by_key(dlq, key)
            if found:
                break
            await asyncio.sleep(0.1)
        assert len(found) == 1
        m = found[0]
        assert m.topic == dlq and m.reconsume_times == 3 and m.body == key.encode()
        assert m.properties.get(Prop.RETRY_TOPIC) == "RetryT"
        assert m.properties.get(Prop.ORIGIN_MESSAGE_ID) == origin_id
    async with PullConsumer("G_dlq_reader", namesrv=s.namesrv_addr) as pc:
        r = await pc.pull(MessageQueue(dlq, route.broker_datas[0].broker_name, 0), 0, 32)
        assert r.status == PullStatus.FOUND
        assert [x.keys for x in r.msgs] == [[key]]
    # producers cannot write to it
    ext = {"producerGroup": "P_x", "topic": dlq, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    resp = await asyncio.to_thread(blocking_request, s.broker_addr,
                                   RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body=b"x"))
    assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, resp.remark)


def test_orderly_consumer_sends_to_dlq_after_max_reconsume_times(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "s", messageDelayLevel="1s 1s 1s 2s").start()
    try:
        asyncio.run(_main_orderly(s))
    finally:
        s.close()


async def _main_orderly(s: Standalone) -> None:
    ns = s.namesrv_addr
    await _send(ns, "OrderT", "warmup")
    rec = Arrivals(fail_times=1000, orderly=True, fail_keys=("poison",))
    c = _push(ns, "G_order", "OrderT", rec, orderly=True, max_reconsume_times=2, lock_interval_ms=1000)
    await c.start()
    try:
        await _send(ns, "OrderT", "poison", sharding_key="k")
        await _send(ns, "OrderT", "after", sharding_key="k")
        got = await rec.wait_for("poison", 3, 15.0)
        assert len(got) == 3
        # the poison message no longer blocks its queue: whatever follows it is consumed
        assert await rec.wait_for("after", 1, 10.0)
    finally:
        await c.shutdown()
    async with Admin(ns) as admin:
        found: list[MessageExt] = []
        for _ in range(40):
            found = await admin.query_msg_by_key("%DLQ%G_order", "poison")
            if found:
                break
            await asyncio.sleep(0.1)
        assert len(found) == 1 and found[0].properties.get(Prop.RETRY_TOPIC) == "OrderT"
