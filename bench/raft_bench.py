"""Raft group bench (issue 14): send throughput and latency of a 3-node Raft broker group (enableDLegerCommitLog)
beside a SYNC_MASTER + slave pair and a RabbitMQ quorum queue (local RabbitMQ), in one run.

`.venv/bin/python -m bench.raft_bench [--messages 5000] [--senders 16] [--size 1024] [--systems raft,sync,rabbitmq,local]`.
Every system: `--senders` concurrent senders, each awaiting its acknowledgement (our SDK for OrbitMQ, aio-pika with
publisher confirms for RabbitMQ), `--messages` in total after a warm-up. An acknowledgement means: Raft group - a
majority stored the entry in its Raft log (fsynced) and the leader applied it to its CommitLog; SYNC_MASTER - the slave
has the bytes (page cache); quorum queue - a majority wrote the Raft WAL batch. Nothing is asserted. Results are
printed and written to bench/results/raft-latest.json.
`local`: the same Raft group shape with localDeliveryGroups, `--ld-messages` of `--ld-size` bytes consumed by our SDK's
SimpleConsumer on each follower (local delivery) and then on the leader (leader-only delivery): the leader's TCP bytes
sent (kernel socket counters, `ss -tinp`) and CPU per delivered message.
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
from orbitmq.testing.local_delivery_load import measure  # noqa: E402
from orbitmq.testing.raft_group import RaftGroup  # noqa: E402

SYSTEMS = ("raft", "sync", "rabbitmq", "local")


async def _raft_load(g: RaftGroup, leader: int, args: argparse.Namespace) -> dict[str, Any]:
    async with Admin(g.ns_addr) as admin:
        await admin.update_topic(TPUT_TOPIC, broker_addr=g.addr(leader), read_queue_nums=8, write_queue_nums=8)
        deadline = time.monotonic() + 30
        while True:  # the route appears with the leader's next registration
            try:
                route = await admin.topic_route(TPUT_TOPIC)
                if route.queue_datas:
                    break
            except Exception:  # noqa: BLE001 - TOPIC_NOT_EXIST until then
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)
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


async def _local(g: RaftGroup, leader: int, args: argparse.Namespace) -> dict[str, Any]:
    followers = [i for i in range(g.size) if i != leader]
    await measure(g, leader, "CG_warm", "LdWarm", followers + [leader], 50, args.ld_size)  # connections, imports
    off = await measure(g, leader, "CG_off", "LdOff", [leader], args.ld_messages, args.ld_size)
    on = await measure(g, leader, "CG_on", "LdOn", followers, args.ld_messages, args.ld_size)
    # consumption only (the messages wait, sent before), acks of each received batch sent together
    c_off = await measure(g, leader, "CG_off", "LdCOff", [leader], args.ld_messages, args.ld_size,
                          consume_only=True, ack_together=True)
    c_on = await measure(g, leader, "CG_on", "LdCOn", followers, args.ld_messages, args.ld_size,
                         consume_only=True, ack_together=True)
    lead, n = f"n{leader}", args.ld_messages
    out: dict[str, Any] = {"messages": n, "size": args.ld_size}
    for name, r in (("on", on), ("off", off), ("consume_on", c_on), ("consume_off", c_off)):
        out[f"leader_bytes_per_msg_{name}"] = round(r["bytes"][lead] / n)
        out[f"leader_cpu_ms_per_msg_{name}"] = round(1000 * r["cpu_s"][lead] / n, 3)
        out[f"followers_bytes_per_msg_{name}"] = round(sum(v for k, v in r["bytes"].items() if k != lead) / n)
    return out


def run_local(args: argparse.Namespace) -> dict[str, Any]:
    """Local delivery on (one consumer on each follower) vs off (the consumers on the leader: it sends every
    delivery), same group, same messages, in one run: the leader's TCP bytes sent (kernel socket counters) and CPU
    per delivered message."""
    with tempfile.TemporaryDirectory(prefix="raft-ld-bench-") as tmp, \
            RaftGroup(Path(tmp), localDeliveryGroups="CG_warm,CG_on,CG_off") as g:
        g.start()
        leader = g.leader()
        return asyncio.run(_local(g, leader, args))


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


RUNNERS = {"raft": run_raft, "sync": run_sync, "rabbitmq": run_rabbitmq, "local": run_local}
LABELS = {"raft": "OrbitMQ Raft group (3 nodes)", "sync": "OrbitMQ SYNC_MASTER + slave",
          "rabbitmq": "RabbitMQ quorum queue (1 node)", "local": "Raft group, local delivery on/off"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--senders", type=int, default=16)
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672/")
    ap.add_argument("--ld-messages", type=int, default=1000, help="local: messages per placement")
    ap.add_argument("--ld-size", type=int, default=4000, help="local: message body bytes")
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
    rows = {name: r for name, r in results.items() if name != "local"}
    if rows:
        print(f"\n{'system':<32} {'msgs/s':>8} {'p50 ms':>8} {'p99 ms':>8}  ({args.messages} x {args.size} B, "
              f"{args.senders} senders)")
    for name, r in rows.items():
        print(f"{LABELS[name]:<32} {r.get('msgs_per_s', '-'):>8} {r.get('p50_ms', '-'):>8} {r.get('p99_ms', '-'):>8}"
              + (f"  {r['error']}" if "error" in r else ""))
    ld = results.get("local")
    if ld is not None and "error" not in ld:
        print(f"\nlocal delivery, leader per delivered message ({ld['messages']} x {ld['size']} B per placement): "
              f"on {ld['leader_bytes_per_msg_on']} B sent, {ld['leader_cpu_ms_per_msg_on']} ms CPU; "
              f"off {ld['leader_bytes_per_msg_off']} B sent, {ld['leader_cpu_ms_per_msg_off']} ms CPU; consumption only "
              f"(acks of a batch together): on {ld['leader_bytes_per_msg_consume_on']} B, "
              f"{ld['leader_cpu_ms_per_msg_consume_on']} ms; off {ld['leader_bytes_per_msg_consume_off']} B, "
              f"{ld['leader_cpu_ms_per_msg_consume_off']} ms")
    elif ld is not None:
        print(f"\nlocal delivery: {ld['error']}")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "raft-latest.json").write_bytes(orjson.dumps({"args": vars(args), "results": results},
                                                        option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
