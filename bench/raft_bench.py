"""Raft group bench (issue 14): send throughput and latency of a 3-node Raft broker group (enableDLegerCommitLog)
beside a SYNC_MASTER + slave pair and a RabbitMQ quorum queue (local RabbitMQ), in one run.

`.venv/bin/python -m bench.raft_bench [--messages 5000] [--senders 16] [--size 1024] [--systems raft,sync,rabbitmq]`.
Every system: `--senders` concurrent senders, each awaiting its acknowledgement (our SDK for OrbitMQ, aio-pika with
publisher confirms for RabbitMQ), `--messages` in total after a warm-up. An acknowledgement means: Raft group - a
majority stored the entry in its Raft log (fsynced) and the leader applied it to its CommitLog; SYNC_MASTER - the slave
has the bytes (page cache); quorum queue - a majority wrote the Raft WAL batch. Nothing is asserted. Results are
printed and written to bench/results/raft-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402

from bench.failover_bench import TPUT_TOPIC, throughput  # noqa: E402
from bench.ha_bench import run_role  # noqa: E402
from bench.metrics import percentiles_ms, proc_cpu_seconds  # noqa: E402
from orbitmq.client import Admin  # noqa: E402
from orbitmq.testing.raft_group import RaftGroup  # noqa: E402

SYSTEMS = ("raft", "sync", "rabbitmq")


async def _raft_load(g: RaftGroup, leader: int, args: argparse.Namespace) -> dict[str, Any]:
    async with Admin(g.ns_addr) as admin:
        await admin.update_topic(TPUT_TOPIC, broker_addr=g.addr(leader), read_queue_nums=8, write_queue_nums=8)
    return await throughput(g.ns_addr, args.messages, args.senders, args.size)


def run_raft(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp, RaftGroup(Path(tmp)) as g:
        g.start()
        leader = g.leader()
        r = asyncio.run(_raft_load(g, leader, args))
        pid = g.brokers[leader].pid
        out = {"msgs_per_s": r["msgs_per_s"], "p50_ms": r["send_p50_ms"], "p99_ms": r["send_p99_ms"],
               "not_ok": r["send_not_ok"]}
        if pid is not None:
            out["leader_cpu_s"] = round(proc_cpu_seconds(pid), 2)
        return out


def run_sync(args: argparse.Namespace) -> dict[str, Any]:
    r = run_role("SYNC_MASTER", args.messages, args.senders, args.size)
    return {"msgs_per_s": r["msgs_per_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "not_ok": r["not_ok"],
            "leader_cpu_s": r.get("master_cpu_s")}


async def _rabbit(args: argparse.Namespace) -> dict[str, Any]:
    from bench.drivers.rabbitmq import RabbitDriver

    d = RabbitDriver(args)
    await d.start()
    queue = f"raft_bench_{os.getpid()}"
    try:
        await d.prepare(queue)
        body = os.urandom(args.size)
        for _ in range(100):
            await d.send(body)
        latencies: list[float] = []
        remaining = args.messages

        async def sender() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                await d.send(body)
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(args.senders)))
        elapsed = time.perf_counter() - start
    finally:
        await d.cleanup()
        await d.stop()
    pct = percentiles_ms(latencies)
    return {"msgs_per_s": round(args.messages / elapsed), "p50_ms": round(pct["p50"] or 0, 2),
            "p99_ms": round(pct["p99"] or 0, 2), "not_ok": 0}


def run_rabbitmq(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(_rabbit(args))


RUNNERS = {"raft": run_raft, "sync": run_sync, "rabbitmq": run_rabbitmq}
LABELS = {"raft": "OrbitMQ Raft group (3 nodes)", "sync": "OrbitMQ SYNC_MASTER + slave",
          "rabbitmq": "RabbitMQ quorum queue (1 node)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--senders", type=int, default=16)
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672/")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for name in args.systems.split(","):
        if name not in RUNNERS:
            ap.error(f"unknown system {name!r} (one of {', '.join(SYSTEMS)})")
        try:
            results[name] = RUNNERS[name](args)
        except Exception as e:  # noqa: BLE001 - one system failing is a row of the report, the others still run
            results[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"{name:<9} {orjson.dumps(results[name]).decode()}", flush=True)
    print(f"\n{'system':<32} {'msgs/s':>8} {'p50 ms':>8} {'p99 ms':>8}  ({args.messages} x {args.size} B, "
          f"{args.senders} senders)")
    for name, r in results.items():
        print(f"{LABELS[name]:<32} {r.get('msgs_per_s', '-'):>8} {r.get('p50_ms', '-'):>8} {r.get('p99_ms', '-'):>8}"
              + (f"  {r['error']}" if "error" in r else ""))
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "raft-latest.json").write_bytes(orjson.dumps({"args": vars(args), "results": results},
                                                        option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
