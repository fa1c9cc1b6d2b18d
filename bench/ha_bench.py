"""HA benchmark: producer msgs/s and send latency for SYNC_MASTER vs ASYNC_MASTER, each with one slave.

One command: `.venv/bin/python bench/ha_bench.py [--messages 20000] [--senders 16] [--size 1024]`. For each
role it starts a name server, a master and a slave as processes (temp dir, free ports), waits for the slave to
connect, sends with `--senders` concurrent SDK senders (each awaits its ack) and prints msgs/s and p50/p99.
Nothing is asserted. A SYNC_MASTER ack means a slave has the message; an ASYNC_MASTER ack, the master's page cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.metrics import percentiles_ms, proc_cpu_seconds  # noqa: E402
from orbitmq.client import Admin, Producer, SendStatus  # noqa: E402
from orbitmq.model import Message  # noqa: E402
from orbitmq.protocol import RemotingCommand, RequestCode  # noqa: E402
from orbitmq.protocol.bodies import KVTable  # noqa: E402
from orbitmq.remoting import RemotingClient  # noqa: E402
from orbitmq.testing.procs import LOCALHOST, start_broker, start_namesrv  # noqa: E402


async def _slave_connected(master: str) -> bool:
    client = RemotingClient(name="ha-bench")
    try:
        resp = await client.invoke(master, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3000)
        return KVTable.from_json(resp.body).table.get("haConnectedSlaves") == "1"
    finally:
        await client.close()


async def _load(ns: str, master: str, messages: int, senders: int, size: int) -> dict[str, object]:
    topic = "HA_BENCH"
    async with Admin(ns) as admin:
        await admin.update_topic(topic, broker_addr=master, read_queue_nums=8, write_queue_nums=8)
    for _ in range(200):
        if await _slave_connected(master):
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("slave never connected")
    body = os.urandom(size)
    latencies: list[float] = []
    failed = 0
    remaining = messages
    async with Producer("ha_bench_pg", namesrv=ns, send_timeout_ms=10_000) as p:
        for _ in range(200):  # warm-up: routes and connections
            await p.send(Message(topic, body, {}))

        async def sender() -> None:
            nonlocal remaining, failed
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                r = await p.send(Message(topic, body, {}))
                latencies.append(time.perf_counter() - t0)
                if r.status is not SendStatus.SEND_OK:
                    failed += 1

        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        elapsed = time.perf_counter() - start
    pct = percentiles_ms(latencies)
    return {"msgs_per_s": round(messages / elapsed), "p50_ms": round(pct["p50"] or 0, 2),
            "p99_ms": round(pct["p99"] or 0, 2), "not_ok": failed, "seconds": round(elapsed, 2)}


def run_role(role: str, messages: int, senders: int, size: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"ha-bench-{role}-") as tmp:
        d = Path(tmp)
        ns = start_namesrv(d / "ns")
        procs = [ns]
        try:
            ns_addr = f"{LOCALHOST}:{ns.ports[0]}"
            master = start_broker(d / "m", ns_addr, brokerRole=role)
            procs.append(master)
            procs.append(start_broker(d / "s", ns_addr, brokerRole="SLAVE", brokerId=1))
            result = asyncio.run(_load(ns_addr, f"{LOCALHOST}:{master.ports[0]}", messages, senders, size))
            if master.pid is not None:
                result["master_cpu_s"] = round(proc_cpu_seconds(master.pid), 2)
            return result
        finally:
            for p in reversed(procs):
                p.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--senders", type=int, default=16)
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--roles", default="SYNC_MASTER,ASYNC_MASTER")
    args = ap.parse_args()
    results = {}
    for role in args.roles.split(","):
        results[role] = run_role(role, args.messages, args.senders, args.size)
        print(f"{role:<13} {json.dumps(results[role])}", flush=True)
    print(f"\n{'role':<13} {'msgs/s':>8} {'p50 ms':>8} {'p99 ms':>8}  ({args.messages} x {args.size} B, "
          f"{args.senders} senders, 1 slave)")
    for role, r in results.items():
        print(f"{role:<13} {r['msgs_per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8}")


if __name__ == "__main__":
    main()
