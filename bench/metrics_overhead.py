"""Metrics overhead bench: broker CPU per message with Prometheus metrics off and on, in one run.

One command: `.venv/bin/python -m bench.metrics_overhead [--messages 20000] [--senders 8] [--rounds 2]`. Each round
starts, for each setting (off = metricsExporterType=DISABLE, on = PROM), a name server and a broker process (temp
dir, free ports), sends `--messages` 1 KiB messages with `--senders` concurrent SDK senders (each awaits its ack),
then drains them with a push consumer. With metrics on, /metrics is scraped every `--scrape-interval` seconds during
the load (the scrapes' own cost is included). Broker CPU = utime+stime from /proc/<pid>/stat over the load, divided
by the message count. Settings alternate (off, on, off, on, ...) so that drift of a busy machine hits both.
Nothing is asserted; the results go to stdout and bench/results/metrics-overhead-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.metrics import proc_cpu_seconds  # noqa: E402
from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus  # noqa: E402
from orbitmq.model import Message, MessageExt  # noqa: E402
from orbitmq.testing.procs import LOCALHOST, free_port, start_broker, start_namesrv  # noqa: E402

TOPIC = "METRICS_BENCH"
RESULTS = Path(__file__).resolve().parent / "results"


async def _load(ns: str, broker: str, pid: int, messages: int, senders: int, size: int,
                metrics_port: int | None, scrape_interval_s: float) -> dict[str, float]:
    async with Admin(ns) as admin:
        await admin.update_topic(TOPIC, broker_addr=broker, read_queue_nums=8, write_queue_nums=8)
    body = os.urandom(size)
    scrapes = 0
    stop = asyncio.Event()

    async def scraper() -> None:
        nonlocal scrapes
        url = f"http://{LOCALHOST}:{metrics_port}/metrics"
        while not stop.is_set():
            await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
            scrapes += 1
            try:
                await asyncio.wait_for(stop.wait(), scrape_interval_s)
            except TimeoutError:
                pass

    async with Producer("metrics_bench_pg", namesrv=ns, send_timeout_ms=10_000) as p:
        for _ in range(200):  # warm-up: routes, connections, topic created
            await p.send(Message(TOPIC, body, {}))
        remaining = messages
        failed = 0

        async def sender() -> None:
            nonlocal remaining, failed
            while remaining > 0:
                remaining -= 1
                r = await p.send(Message(TOPIC, body, {}))
                if r.status is not SendStatus.SEND_OK:
                    failed += 1

        scrape_task = asyncio.create_task(scraper()) if metrics_port is not None else None
        cpu0, t0 = proc_cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        cpu1, t1 = proc_cpu_seconds(pid), time.perf_counter()

    got = 0
    done = asyncio.Event()
    total = messages + 200

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        nonlocal got
        got += len(msgs)
        if got >= total:
            done.set()
        return ConsumeResult.SUCCESS

    c = PushConsumer("metrics_bench_cg", namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     listener_in_thread=False)
    c.subscribe(TOPIC, "*", listener)
    cpu2, t2 = proc_cpu_seconds(pid), time.perf_counter()
    await c.start()
    await asyncio.wait_for(done.wait(), 600)
    cpu3, t3 = proc_cpu_seconds(pid), time.perf_counter()
    await c.shutdown()
    stop.set()
    if scrape_task is not None:
        await scrape_task
    return {"send_us_per_msg": (cpu1 - cpu0) / messages * 1e6, "consume_us_per_msg": (cpu3 - cpu2) / total * 1e6,
            "send_msgs_per_s": messages / (t1 - t0), "consume_msgs_per_s": total / (t3 - t2),
            "not_ok": failed, "scrapes": scrapes}


def run_one(on: bool, messages: int, senders: int, size: int, scrape_interval_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"metrics-bench-{'on' if on else 'off'}-") as tmp:
        d = Path(tmp)
        ns = start_namesrv(d / "ns")
        procs = [ns]
        try:
            ns_addr = f"{LOCALHOST}:{ns.ports[0]}"
            mport = free_port() if on else None
            keys = {"metricsExporterType": "PROM", "metricsPromExporterHost": LOCALHOST,
                    "metricsPromExporterPort": mport} if on else {}
            broker = start_broker(d / "b", ns_addr, **keys)
            procs.append(broker)
            assert broker.pid is not None
            return asyncio.run(_load(ns_addr, f"{LOCALHOST}:{broker.ports[0]}", broker.pid, messages, senders, size,
                                     mport, scrape_interval_s))
        finally:
            for p in reversed(procs):
                p.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--rounds", type=int, default=2, help="off/on pairs")
    ap.add_argument("--scrape-interval", type=float, default=15.0,
                    help="seconds between scrapes when metrics are on (Prometheus commonly scrapes every 15 s)")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    args = ap.parse_args(argv)
    rows: list[tuple[str, dict[str, float]]] = []
    for r in range(args.rounds):
        for on in (False, True):
            label = "on" if on else "off"
            res = run_one(on, args.messages, args.senders, args.size, args.scrape_interval)
            rows.append((label, res))
            print(f"round {r + 1} metrics {label:<3} " + json.dumps({k: round(v, 2) for k, v in res.items()}),
                  flush=True)
    summary: dict[str, dict[str, float]] = {}
    for label in ("off", "on"):
        vals = [res for lab, res in rows if lab == label]
        summary[label] = {k: round(statistics.mean(v[k] for v in vals), 2)
                          for k in ("send_us_per_msg", "consume_us_per_msg", "send_msgs_per_s", "consume_msgs_per_s")}
        summary[label]["send_us_spread"] = round(max(v["send_us_per_msg"] for v in vals)
                                                 - min(v["send_us_per_msg"] for v in vals), 2)
    print(f"\nbroker CPU per message ({args.messages} x {args.size} B, {args.senders} senders, {args.rounds} rounds, "
          f"scrape every {args.scrape_interval:g} s when on)")
    print(f"{'metrics':<8} {'send us/msg':>12} {'(spread)':>9} {'consume us/msg':>15} {'send msgs/s':>12}")
    for label, s in summary.items():
        print(f"{label:<8} {s['send_us_per_msg']:>12} {s['send_us_spread']:>9} {s['consume_us_per_msg']:>15} "
              f"{s['send_msgs_per_s']:>12}")
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = {"args": vars(args), "rounds": [{"metrics": lab, **res} for lab, res in rows], "summary": summary,
               "stamp": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        (RESULTS / "metrics-overhead-latest.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
