"""Failover bench: controller mode (RIP-44) with allAckInSyncStateSet on and off, beside RIP-32 (slave acting master),
each a group of 3 brokers on real processes, and lease election (a two-broker group elected by a lease row in the local
PostgreSQL or MariaDB, allAckInSyncStateSet on, `--lease-ttl` ms). Per mode: send throughput and latency (SDK, concurrent senders), then
`--kills` kill -9 trials of the master under a small send load, with the failover time distribution and a
lost-ack count. Printed as a rich table, written to bench/results/failover-<stamp>.{json,md} (+ failover-latest.*).
Nothing is asserted. `.venv/bin/python -m bench.failover_bench [--kills 20] [--messages 5000] [--modes ...]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.metrics import percentiles_ms  # noqa: E402
from orbitmq.client import Admin, Message, Producer, SendStatus  # noqa: E402
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from orbitmq.protocol.bodies import TopicRouteData  # noqa: E402
from orbitmq.remoting import RemotingClient  # noqa: E402
from orbitmq.testing.controller_cluster import ControllerCluster, wait_until  # noqa: E402
from orbitmq.testing.failover_load import (  # noqa: E402
    SendLoad,
    check_acked_readable,
    probe_send,
    wait_new_master_write,
)
from orbitmq.testing.lease_cluster import LeaseCluster  # noqa: E402
from orbitmq.testing.procs import BrokerCluster, ServerProcess, blocking_request  # noqa: E402
from orbitmq.testing.readback import read_topic  # noqa: E402

TOPIC = "FailoverBench"  # the kill trials' load (checked end to end afterwards)
TPUT_TOPIC = "FailoverBenchTput"  # the throughput phase (one random body for every message, so never checked)
QUEUES = 8
MODES = ("allack", "noallack", "rip32", "lease-pg", "lease-mysql")
LABELS = {"allack": "controller allAck=on", "noallack": "controller allAck=off", "rip32": "RIP-32 SYNC_MASTER",
          "lease-pg": "lease PostgreSQL (2 nodes)", "lease-mysql": "lease MariaDB (2 nodes)"}
RIP32_KEYS: dict[str, Any] = {"enableSlaveActingMaster": True, "compatibleWithOldNameSrv": False,
                              "brokerHeartbeatInterval": 500, "brokerNotActiveTimeoutMillis": 3000,
                              "syncBrokerMemberGroupPeriod": 500, "slaveSyncInterval": 500,
                              "registerNameServerPeriod": 2000}


# ---- load -------------------------------------------------------------------------------------------------
async def throughput(ns: str, messages: int, senders: int, size: int) -> dict[str, Any]:
    """`senders` concurrent SDK senders, each awaiting its ack, `messages` in total (after a warm-up)."""
    body = os.urandom(size)
    latencies: list[float] = []
    not_ok = 0
    remaining = messages
    async with Producer("PG_fo_bench", namesrv=ns, send_timeout_ms=10_000) as p:
        for _ in range(100):
            await p.send(Message(TPUT_TOPIC, body))

        async def sender() -> None:
            nonlocal remaining, not_ok
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                r = await p.send(Message(TPUT_TOPIC, body))
                latencies.append(time.perf_counter() - t0)
                not_ok += r.status is not SendStatus.SEND_OK

        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        elapsed = time.perf_counter() - start
    pct = percentiles_ms(latencies)
    return {"msgs_per_s": round(messages / elapsed), "send_p50_ms": _r(pct["p50"]), "send_p99_ms": _r(pct["p99"]),
            "send_not_ok": not_ok}


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)


def dist(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    pct = percentiles_ms(values)
    return {"n": len(values), "p50_s": _r((pct["p50"] or 0) / 1000, 3), "p99_s": _r((pct["p99"] or 0) / 1000, 3),
            "max_s": round(max(values), 3)}


async def create_topic(ns: str, master_addr: str) -> None:
    async with Admin(ns) as admin:
        for topic in (TOPIC, TPUT_TOPIC):
            await admin.update_topic(topic, broker_addr=master_addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)


# ---- controller mode ----------------------------------------------------------------------------------------
async def controller_trials(c: ControllerCluster | LeaseCluster, kills: int, console: Console,
                            size: int = 3) -> dict[str, Any]:
    load = await SendLoad(c.ns_addr, TOPIC, senders=2, run="fb").start()
    probe, sdk = [], []
    try:
        for k in range(kills):
            await asyncio.to_thread(c.wait_group_ready, None, size, 60.0)
            old = await asyncio.to_thread(lambda: c.wait_master(topic=TOPIC))
            await asyncio.sleep(0.5)
            t_kill = await asyncio.to_thread(c.kill9, old)
            secs, new, ack = await wait_new_master_write(c, TOPIC, old.addr, t_kill, f"probe-{k}",  # type: ignore[arg-type]
                                                         60.0)
            load.acked[ack.body] = ack
            probe.append(secs)
            deadline = time.monotonic() + 30
            while (t := load.first_ack_after(t_kill)) is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if t is not None:
                sdk.append(t - t_kill)
            console.print(f"  trial {k + 1}: {old.name} -> {new.name}: write accepted {secs:.3f}s, SDK ack "
                          f"{'-' if t is None else f'{t - t_kill:.3f}s'}")
            await asyncio.to_thread(c.restart, old)
    finally:
        await load.stop()
    await asyncio.to_thread(c.wait_group_ready, None, size, 60.0)
    problems = check_acked_readable(load.acked, await read_topic(c.ns_addr, TOPIC))
    return {"failover": dist(probe), "sdk_failover": dist(sdk), "acked": len(load.acked), "problems": problems}


def measure(c: ControllerCluster | LeaseCluster, args: argparse.Namespace, console: Console,
            size: int) -> dict[str, Any]:
    """Start the cluster, create the topics, then the throughput phase and the kill trials."""
    c.start()
    master = c.wait_master()
    asyncio.run(create_topic(c.ns_addr, master.addr))
    c.wait_master(topic=TOPIC)
    result = asyncio.run(throughput(c.ns_addr, args.messages, args.senders, args.size))
    console.print(f"  throughput: {result}")
    result.update(asyncio.run(controller_trials(c, args.kills, console, size)))
    return result


def run_controller(all_ack: bool, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    keys = {"allAckInSyncStateSet": all_ack}
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as tmp, \
            ControllerCluster(tmp, broker_keys=keys) as c:
        return measure(c, args, console, 3)


# ---- lease election ----------------------------------------------------------------------------------------
def run_lease(kind: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from orbitmq.testing.sql_dbs import SqlDbUnavailable, create_db, drop_db

    try:
        db = create_db(kind)
    except SqlDbUnavailable as e:
        raise RuntimeError(str(e)) from None
    try:
        with tempfile.TemporaryDirectory(prefix=f"failover-bench-lease-{kind}-") as tmp, \
                LeaseCluster(tmp, db.url, ttl_ms=args.lease_ttl) as c:
            return measure(c, args, console, 2)
    finally:
        drop_db(db)


# ---- RIP-32 -------------------------------------------------------------------------------------------------
def route_master(ns: str, group: str = "broker-a") -> str | None:
    resp = blocking_request(ns, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 1.5)
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    bd = next((b for b in TopicRouteData.from_json(resp.body).broker_datas if b.broker_name == group), None)
    return None if bd is None else bd.broker_addrs.get(0)


async def rip32_trial(ns: str, master: ServerProcess, addr: str) -> tuple[float, float]:
    """kill -9 the master: seconds until a slave acts as master in the route (reads served), and until a write is
    accepted again (RIP-32 never writes on a slave: that is the master's restart, begun right after the kill)."""
    client = RemotingClient(name="rip32-probe")
    try:
        t_kill = time.monotonic()
        master.kill9()
        restart = asyncio.ensure_future(asyncio.to_thread(master.start))
        acting = await asyncio.to_thread(wait_until, "an acting master in the route",
                                         lambda: (route_master(ns) or addr) != addr, 60.0, 0.02)
        t_acting = time.monotonic() - t_kill if acting else float("nan")
        await restart
        i = 0
        while True:
            i += 1
            if route_master(ns) == addr and await probe_send(client, addr, TOPIC, f"rip32-{t_kill}-{i}"):
                return t_acting, time.monotonic() - t_kill
            await asyncio.sleep(0.02)
    finally:
        await client.close()


def run_rip32(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="failover-bench-rip32-") as tmp:
        cluster = BrokerCluster(tmp, broker_defaults=RIP32_KEYS, supportActingMaster=True,
                                scanNotActiveBrokerInterval=1000)
        try:
            master, addr = cluster.broker("broker-a", 0, "SYNC_MASTER")
            cluster.broker("broker-a", 1, "SLAVE")
            cluster.broker("broker-a", 2, "SLAVE")
            asyncio.run(create_topic(cluster.ns_addr, addr))
            wait_until("the topic's route", lambda: route_master(cluster.ns_addr) == addr, 30.0)
            result = asyncio.run(throughput(cluster.ns_addr, args.messages, args.senders, args.size))
            console.print(f"  throughput: {result}")
            acting, write = [], []
            for k in range(args.kills):
                a, w = asyncio.run(rip32_trial(cluster.ns_addr, master, addr))
                acting.append(a)
                write.append(w)
                console.print(f"  trial {k + 1}: acting master in route {a:.3f}s, write accepted {w:.3f}s "
                              "(master restarted)")
            result.update({"failover": dist(write), "acting_master": dist(acting), "sdk_failover": {"n": 0},
                           "acked": None, "problems": []})
            return result
        finally:
            cluster.close()


# ---- report -------------------------------------------------------------------------------------------------
def render(console: Console, results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    t = Table(title=f"Failover: {args.kills} kill -9 of the master per mode; throughput {args.messages} x "
                    f"{args.size} B, {args.senders} senders; group of 3 (lease: 2, TTL {args.lease_ttl} ms)")
    for col in ("mode", "msgs/s", "send p50 ms", "send p99 ms", "write back p50 s", "p99 s", "max s",
                "SDK ack p50 s", "SDK p99 s", "acting p50 s", "acked", "problems"):
        t.add_column(col, justify="left" if col == "mode" else "right", no_wrap=col == "mode")
    for mode, r in results.items():
        fo, sdk, act = r.get("failover", {}), r.get("sdk_failover", {}), r.get("acting_master", {})
        t.add_row(LABELS[mode], str(r.get("msgs_per_s")), str(r.get("send_p50_ms")), str(r.get("send_p99_ms")),
                  str(fo.get("p50_s", "-")), str(fo.get("p99_s", "-")), str(fo.get("max_s", "-")),
                  str(sdk.get("p50_s", "-")), str(sdk.get("p99_s", "-")), str(act.get("p50_s", "-")),
                  str(r.get("acked", "-")), str(len(r.get("problems", []))) if "error" not in r else r["error"])
    console.print(t)
    for mode, r in results.items():
        for problem in r.get("problems", []):
            console.print(f"{LABELS[mode]}: {problem[:300]}")
    console.print("write back = kill -9 -> a new master listed as brokerId 0 in the route accepts a write (RIP-32: "
                  "the restarted master, as a slave never takes writes); SDK ack = kill -> the first SEND_OK of a "
                  "2-sender SDK load (pushed routes); acting = kill -> a slave acting master in the route (reads "
                  "only); problems = acknowledged messages lost / duplicated / moved, checked after the trials.")


def write(results: dict[str, dict[str, Any]], args: argparse.Namespace, console: Console) -> None:
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    doc = {"meta": {"stamp": stamp, "cpus": os.cpu_count()}, "options": vars(args), "results": results}
    rec = Console(record=True, width=200, file=open(os.devnull, "w"))  # noqa: SIM115 - closed with the console
    render(rec, results, args)
    for name in (f"failover-{stamp}", "failover-latest"):
        (out / f"{name}.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        (out / f"{name}.md").write_text("```\n" + rec.export_text() + "```\n")
    rec.file.close()
    console.print(f"results: {out}/failover-{stamp}.json, .md")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--lease-ttl", type=int, default=2000, help="leaseTtlMillis of the lease modes")
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    console = Console(width=max(160, Console().width))
    results: dict[str, dict[str, Any]] = {}
    for mode in args.modes.split(","):
        console.print(f"[bold]{LABELS[mode]}[/bold]")
        try:
            if mode.startswith("lease-"):
                results[mode] = run_lease("postgresql" if mode == "lease-pg" else "mysql", args, console)
            else:
                results[mode] = (run_rip32(args, console) if mode == "rip32"
                                 else run_controller(mode == "allack", args, console))
        except (AssertionError, RuntimeError, OSError) as e:  # one mode failing still reports the others
            console.print(f"  [red]failed: {e}[/red]")
            results[mode] = {"error": str(e).splitlines()[0][:80]}
    render(console, results, args)
    write(results, args, console)


if __name__ == "__main__":
    main()
