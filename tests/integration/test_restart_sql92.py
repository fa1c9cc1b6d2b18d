"""SQL92 property filtering across a broker kill -9: one push consumer (enablePropertyFilter=true) keeps getting
exactly the matching messages before and after the broker is killed -9 and started again; its subscription comes
back from the client's heartbeat, never a non-matching message in between."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import ClientInstance, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.model import Message, MessageExt
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC, GROUP = "RSqlT", "CG_rsql"
EXPR = "(a BETWEEN 10 AND 29 OR color IN ('red')) AND b IS NOT NULL AND NOT (a = 15)"


@pytest.fixture(autouse=True)
def _fast_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)
    monkeypatch.setattr(ClientInstance, "route_interval_ms", 1000)


def _matches(i: int) -> bool:
    a, color, has_b = i, ("red", "blue", "green")[i % 3], i % 4 != 0
    return ((10 <= a <= 29) or color == "red") and has_b and a != 15


async def _send_range(ns: str, lo: int, hi: int) -> None:
    async with Producer("PG_rsql", namesrv=ns) as p:
        for i in range(lo, hi):
            props = {"a": str(i), "color": ("red", "blue", "green")[i % 3]}
            if i % 4 != 0:
                props["b"] = "x"
            deadline = time.monotonic() + 20
            while True:
                try:
                    r = await p.send(Message(TOPIC, f"m{i}".encode(), props))
                    if r.status == SendStatus.SEND_OK:
                        break
                except OrbitMQError:  # the route to the restarted broker is re-established
                    pass
                assert time.monotonic() < deadline, f"m{i} never acknowledged"
                await asyncio.sleep(0.2)


def test_sql92_consumer_keeps_exact_matches_across_kill9(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa", enablePropertyFilter="true").start()
    try:
        asyncio.run(_main(sa))
    finally:
        sa.close()


async def _main(sa: Standalone) -> None:
    ns = sa.namesrv_addr
    got: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        got.extend(int(m.properties["a"]) for m in msgs)
        return ConsumeResult.SUCCESS

    async def wait_for(want: set[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not want <= set(got) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    await _send_range(ns, 0, 1)  # creates the topic before the consumer subscribes
    c = PushConsumer(GROUP, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", listener_in_thread=False,
                     rebalance_interval_ms=1000, persist_offset_interval_ms=500)
    c.subscribe(TOPIC, EXPR, listener, expression_type="SQL92")
    await c.start()
    try:
        await _send_range(ns, 1, 60)
        before = {i for i in range(60) if _matches(i)}
        await wait_for(before, 15)
        assert set(got) == before, sorted(set(got) ^ before)
        sa.kill9()
        await asyncio.to_thread(sa.start)
        # sent right after the restart, possibly before the consumer's heartbeat re-registers the subscription
        await _send_range(ns, 60, 150)
        want = {i for i in range(150) if _matches(i)}
        await wait_for(want, 30)
        await asyncio.sleep(1.0)  # a late non-matching delivery would show up now
    finally:
        await c.shutdown()
    assert set(got) == want, f"missing {sorted(want - set(got))}, unexpected {sorted(set(got) - want)}"
    assert len(want) > 40 and len(want - before) > 20
