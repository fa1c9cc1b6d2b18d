"""The official C++ client's set_delay_time_level(2) against `orbitmq standalone`: each message reaches its topic
5 s (-1 s / +1 s) after the send, through a broker restart in between (default messageDelayLevel, level 2 = 5 s);
when the restart itself ends after they were due, within 2 s of it."""

from __future__ import annotations

import asyncio
import time

import pytest

from orbitmq.client import ConsumeResult, PushConsumer
from orbitmq.model import MessageExt, Prop

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_cpp_delay_level_2_arrives_after_5s_through_restart(server, cpp):
    topic, run, n = "Compat_delay", "run-delay", 3
    prod = cpp("produce", group="PG_delay", namesrv=server.namesrv_addr, topic=topic, count=n, mode="sync",
               run=run, delay=2)
    assert prod.wait_for(lambda x: "done" in x, timeout_s=30), prod.lines[-3:]
    sent = {s["key"]: s for s in prod.sent()}
    assert len(sent) == n and all(s["status"] == 0 for s in sent.values())
    first_sent = min(s["sent_ms"] for s in sent.values()) / 1000
    # killed while every message still waits (due 5 s after its send); on a busy machine the restart may end after
    # they were due: then they come right after it (late by the restart only, never early, never lost)
    assert time.time() - first_sent < 4.5, "the messages were due before the broker was even stopped"
    server.restart()
    back_s = time.time()
    prod.finish()

    async def consume() -> dict[str, list[tuple[float, MessageExt]]]:
        got: dict[str, list[tuple[float, MessageExt]]] = {}

        def listener(msgs: list[MessageExt]) -> ConsumeResult:
            for m in msgs:
                got.setdefault(m.keys[0], []).append((time.time(), m))
            return ConsumeResult.SUCCESS

        c = PushConsumer("CG_delay", namesrv=server.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         listener_in_thread=False, rebalance_interval_ms=1000)
        c.subscribe(topic, "*", listener)
        await c.start()
        try:
            deadline = time.monotonic() + 15
            while len(got) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
        finally:
            await c.shutdown()
        return got

    got = asyncio.run(consume())
    assert set(got) == set(sent)
    for key, deliveries in got.items():
        assert len(deliveries) == 1, f"{key} delivered {len(deliveries)} times"
        arrived, m = deliveries[0]
        sent_s = sent[key]["sent_ms"] / 1000
        latest = max(6.0, back_s - sent_s + 2.0)
        assert 4.0 <= arrived - sent_s <= latest, f"{key} arrived {arrived - sent_s:.2f} s after send"
        assert 4000 <= m.store_timestamp - sent[key]["sent_ms"] <= latest * 1000
        assert m.topic == topic and m.body.decode() == sent[key]["body"] and m.tags == sent[key]["tags"]
        assert Prop.DELAY not in m.properties and m.properties.get("run") == run
