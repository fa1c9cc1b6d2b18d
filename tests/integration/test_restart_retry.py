"""Retry and dead letters across a broker kill -9: a message failed with RECONSUME_LATER waits in
SCHEDULE_TOPIC_XXXX (retry level 3) while the broker dies; after the restart the same consumer gets it again with
reconsumeTimes 1 (after the level's delay, never lost). A message already in %DLQ%<group> stays queryable and
pullable there, read-only, after a kill -9 + restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import (
    Admin,
    ClientInstance,
    ConsumeResult,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
)
from orbitmq.model import Message, MessageExt, MessageQueue, Prop
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# level 3 (the first retry) waits 4 s: long enough to kill and restart the broker in between
LEVELS = "1s 1s 4s 1s 1s 1s"


@pytest.fixture(autouse=True)
def _fast_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # after the restart the consumer must be known again (heartbeat) and routes refreshed quickly
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)
    monkeypatch.setattr(ClientInstance, "route_interval_ms", 1000)


class Failing:
    """Records (time, message) per key; answers RECONSUME_LATER for a key's first `fail_times` deliveries."""

    def __init__(self, fail_times: int) -> None:
        self.fail_times = fail_times
        self.seen: dict[str, list[tuple[float, MessageExt]]] = {}

    def __call__(self, msgs: list[MessageExt]) -> ConsumeResult:
        failed = False
        for m in msgs:
            got = self.seen.setdefault(m.keys[0] if m.keys else "", [])
            got.append((time.time(), m))
            failed = failed or (m.keys[0].startswith("flaky") and len(got) <= self.fail_times)
        return ConsumeResult.RECONSUME_LATER if failed else ConsumeResult.SUCCESS

    async def wait_for(self, pred: object, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():  # type: ignore[operator]
                return True
            await asyncio.sleep(0.05)
        return False


async def _send(ns: str, topic: str, key: str) -> None:
    async with Producer("P_rretry", namesrv=ns) as p:
        m = Message(topic, key.encode(), {})
        m.keys = key
        r = await p.send(m)
        assert r.status == SendStatus.SEND_OK


def _push(ns: str, group: str, topic: str, listener: Failing, **kw: object) -> PushConsumer:
    c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", listener_in_thread=False,
                     rebalance_interval_ms=1000, persist_offset_interval_ms=500, **kw)  # type: ignore[arg-type]
    c.subscribe(topic, "*", listener)
    return c


def test_retry_waiting_in_schedule_topic_survives_kill9(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "s", messageDelayLevel=LEVELS).start()
    try:
        asyncio.run(_main_retry(s))
    finally:
        s.close()


async def _main_retry(s: Standalone) -> None:
    ns = s.namesrv_addr
    await _send(ns, "RRetryT", "warmup")
    rec = Failing(fail_times=1)
    c = _push(ns, "G_rretry", "RRetryT", rec)
    await c.start()
    try:
        assert await rec.wait_for(lambda: "warmup" in rec.seen, 15)
        await _send(ns, "RRetryT", "flaky")
        assert await rec.wait_for(lambda: len(rec.seen.get("flaky", [])) >= 1, 10)
        failed_at = rec.seen["flaky"][0][0]
        await asyncio.sleep(0.5)  # the send-back is answered: the retry now waits in SCHEDULE_TOPIC_XXXX
        # killed while the retry still waits (level 3 = 4 s); a slow restart may end after it was due: it must
        # then come right after the restart, never before the 4 s
        assert time.time() - failed_at < 3.5, "the retry was due before the broker was even killed"
        s.kill9()
        await asyncio.to_thread(s.start)
        ok = await rec.wait_for(lambda: any(m.reconsume_times == 1 for _, m in rec.seen.get("flaky", [])), 30)
        assert ok, f"retry never redelivered: {[m.reconsume_times for _, m in rec.seen.get('flaky', [])]}"
        got = rec.seen["flaky"]
        retried = [(t, m) for t, m in got if m.reconsume_times == 1]
        arrived, m = retried[0]
        assert arrived - failed_at >= 3.5, f"retry came back after {arrived - failed_at:.2f} s, level 3 is 4 s"
        assert m.topic == "RRetryT" and m.body == b"flaky"
        assert m.properties.get(Prop.RETRY_TOPIC) == "RRetryT"
        assert m.properties.get(Prop.ORIGIN_MESSAGE_ID) == got[0][1].offset_msg_id
        assert m.msg_id == got[0][1].msg_id
        await asyncio.sleep(1.5)  # the successful retry is not delivered again
        assert [x.reconsume_times for _, x in rec.seen["flaky"]].count(1) == 1
        # at-least-once: the original may come again (offset of RRetryT lost with the kill), but only as reconsume 0
        assert all(x.reconsume_times in (0, 1) for _, x in rec.seen["flaky"])
    finally:
        await c.shutdown()


def test_dead_letter_is_still_queryable_after_kill9(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "s", messageDelayLevel="1s 1s 1s 1s 1s 1s").start()
    try:
        origin = asyncio.run(_to_dlq(s))
        s.kill9()
        s.start()
        asyncio.run(_check_dlq(s, "%DLQ%G_rdead", "flaky-dead", origin))
    finally:
        s.close()


async def _to_dlq(s: Standalone) -> str:
    ns = s.namesrv_addr
    await _send(ns, "RDeadT", "warmup")
    rec = Failing(fail_times=1000)
    c = _push(ns, "G_rdead", "RDeadT", rec, max_reconsume_times=1)
    await c.start()
    try:
        await _send(ns, "RDeadT", "flaky-dead")
        assert await rec.wait_for(lambda: len(rec.seen.get("flaky-dead", [])) >= 2, 15)
        origin = rec.seen["flaky-dead"][0][1].offset_msg_id
    finally:
        await c.shutdown()
    await _check_dlq(s, "%DLQ%G_rdead", "flaky-dead", origin)  # it is there before the crash
    return origin


async def _check_dlq(s: Standalone, dlq: str, key: str, origin_id: str) -> None:
    async with Admin(s.namesrv_addr) as admin:
        found: list[MessageExt] = []
        route = None
        for _ in range(100):
            try:
                route = await admin.topic_route(dlq)
                found = await admin.query_msg_by_key(dlq, key)
            except OrbitMQError:
                found = []
            if found:
                break
            await asyncio.sleep(0.1)
        assert route is not None and [qd.perm for qd in route.queue_datas] == [4]
        assert len(found) == 1, found
        m = found[0]
        assert m.topic == dlq and m.reconsume_times == 2 and m.body == key.encode()
        assert m.properties.get(Prop.RETRY_TOPIC) == "RDeadT"
        assert m.properties.get(Prop.ORIGIN_MESSAGE_ID) == origin_id
    async with PullConsumer("G_rdlq_reader", namesrv=s.namesrv_addr) as pc:
        r = await pc.pull(MessageQueue(dlq, route.broker_datas[0].broker_name, 0), 0, 32)
        assert r.status == PullStatus.FOUND
        assert [x.keys for x in r.msgs] == [[key]]
