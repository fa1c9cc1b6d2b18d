"""Timer-message benchmark (not a test): N timer messages (default 100,000) due over the next 60 s against a real
`orbitmq standalone`; reports lateness p50/p99/max, lost, early, duplicates and the broker's RSS.

    .venv/bin/python bench/timer_bench.py [--messages 100000] [--span-s 60] [--lead-s 75] [--senders 32] [--producers 2]

The producer runs in a child process so that sending does not delay the consumer's receive timestamps; both
processes read the same wall clock. Lateness = first receive time - TIMER_DELIVER_MS.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orbitmq.client import ConsumeResult, Producer, PushConsumer, SendStatus  # noqa: E402
from orbitmq.model import Message, MessageExt  # noqa: E402
from orbitmq.testing.procs import Standalone  # noqa: E402

TOPIC = "TimerBench"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _due_of(i: int, n: int, first_ms: int, span_ms: int) -> int:
    return first_ms + i * span_ms // n


async def _produce(namesrv: str, n: int, first_ms: int, span_ms: int, senders: int, part: int,
                   parts: int) -> tuple[int, int, float]:
    """Send messages part, part+parts, ... -> (sent ok, sent after their due time, seconds)."""
    ok = late_sends = 0
    start = time.monotonic()
    async with Producer("P_timer_bench", namesrv=namesrv, send_timeout_ms=10_000) as p:
        async def sender(k: int) -> None:
            nonlocal ok, late_sends
            body = b"x" * 100
            for i in range(part + k * parts, n, senders * parts):
                due = _due_of(i, n, first_ms, span_ms)
                m = Message(TOPIC, body, {"i": str(i)})
                m.set_delivery_time_ms(due)
                r = await p.send(m)
                if r.status == SendStatus.SEND_OK:
                    ok += 1
                    if _now_ms() >= due:
                        late_sends += 1

        await asyncio.gather(*(sender(k) for k in range(senders)))
    return ok, late_sends, time.monotonic() - start


def _producer_main(namesrv: str, n: int, first_ms: int, span_ms: int, senders: int, part: int, parts: int,
                   out: mp.Queue) -> None:
    out.put(asyncio.run(_produce(namesrv, n, first_ms, span_ms, senders, part, parts)))


def _rss_anon(pid: int) -> int:
    """RssAnon (bytes) from /proc/<pid>/status: heap, not mapped CommitLog/wheel pages; -1 off Linux."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def _pct(sorted_vals: list[int], q: float) -> int:
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))] if sorted_vals else -1


async def _run(args: argparse.Namespace, sa: Standalone) -> dict[str, object]:
    n, span_ms = args.messages, int(args.span_s * 1000)
    first_recv: dict[int, int] = {}
    dups = 0

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        nonlocal dups
        t = _now_ms()
        for m in msgs:
            i = m.properties.get("i")
            if i is None:
                continue
            if int(i) in first_recv:
                dups += 1
            else:
                first_recv[int(i)] = t
        return ConsumeResult.SUCCESS

    async with Producer("P_timer_warm", namesrv=sa.namesrv_addr) as p:
        await p.send(Message(TOPIC, b"warm", {}))
    c = PushConsumer("C_timer_bench", namesrv=sa.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     listener_in_thread=False, rebalance_interval_ms=1000, pull_batch_size=64,
                     consume_batch_size=32)
    c.subscribe(TOPIC, "*", listener)
    await c.start()
    await asyncio.sleep(2.0)
    broker = psutil.Process(sa.proc.pid)
    rss_base = broker.memory_info().rss
    rss_peak = rss_base
    anon_base = anon_peak = _rss_anon(broker.pid)
    first_ms = _now_ms() + int(args.lead_s * 1000)
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_producer_main, args=(sa.namesrv_addr, n, first_ms, span_ms, args.senders, k,
                                                      args.producers, q)) for k in range(args.producers)]
    for prod in procs:
        prod.start()
    deadline = first_ms + span_ms + args.grace_s * 1000
    while len(first_recv) < n and _now_ms() < deadline:
        await asyncio.sleep(1.0)
        rss_peak = max(rss_peak, broker.memory_info().rss)
        anon_peak = max(anon_peak, _rss_anon(broker.pid))
    sent = late_sends = 0
    send_s = 0.0
    for _ in procs:
        ok, late_n, secs = await asyncio.to_thread(q.get)
        sent, late_sends, send_s = sent + ok, late_sends + late_n, max(send_s, secs)
    for prod in procs:
        await asyncio.to_thread(prod.join)
    await c.shutdown()
    late = sorted(t - _due_of(i, n, first_ms, span_ms) for i, t in first_recv.items())
    return {
        "messages": n, "sent_ok": sent, "send_seconds": round(send_s, 1), "send_rate": int(sent / send_s),
        "sent_after_due": late_sends, "received": len(first_recv), "lost": n - len(first_recv),
        "early": sum(1 for v in late if v < 0), "duplicates": dups,
        "late_p50_ms": _pct(late, 0.50), "late_p99_ms": _pct(late, 0.99), "late_max_ms": late[-1] if late else -1,
        "within_1500ms": sum(1 for v in late if 0 <= v <= 1500),
        "broker_rss_base_mib": round(rss_base / 2**20, 1), "broker_rss_peak_mib": round(rss_peak / 2**20, 1),
        "broker_rss_anon_base_mib": round(anon_base / 2**20, 1),
        "broker_rss_anon_peak_mib": round(anon_peak / 2**20, 1),
        "timer_log_bytes": os.path.getsize(sa.store_dir / "timerwheel" / "timerlog"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--span-s", type=float, default=60.0)
    ap.add_argument("--lead-s", type=float, default=75.0,
                    help="first message due this long after the start: long enough for every send to land first "
                         "(a message sent after its due time is stored as a plain message, and its lateness is "
                         "the producer's, not the timer's); sent_after_due reports how many did")
    ap.add_argument("--senders", type=int, default=32, help="concurrent sends per producer process")
    ap.add_argument("--producers", type=int, default=2, help="producer processes")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker.conf key for the standalone (repeatable), e.g. dedupEnable=false")
    ap.add_argument("--grace-s", type=int, default=30, help="wait this long past the last due time")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="timer-bench-") as d:
        keys = dict(kv.split("=", 1) for kv in args.conf)
        sa = Standalone(Path(d) / "sa", **keys).start()
        try:
            res = asyncio.run(_run(args, sa))
        finally:
            sa.close()
    width = max(len(k) for k in res)
    for k, v in res.items():
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
