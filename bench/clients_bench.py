"""Per-request cost with real clients, OrbitMQ beside NATS JetStream in one run (issue 16 item 3).

    .venv/bin/python -m bench.clients_bench [--messages 20000] [--rows cpp_p2,cpp_p8,sdk_c8,batch] [--repeat 3]

Rows, each run against OrbitMQ (`orbitmq standalone`, ASYNC_FLUSH, started by the bench on free ports) and against
the local NATS server (JetStream file stream, nats://127.0.0.1:4222), `--messages` timed messages per row, 1 KiB:
  cpp_p2, cpp_p8  the official RocketMQ C++ client (rocketmq==0.4.4) in 2 / 8 processes, each a loop of
                  synchronous send_sync(); on NATS, 2 / 8 nats-py processes each a loop of `await js.publish()`
                  (bench/load_worker.py)
  sdk_c8          in this process, 8 concurrent senders each waiting for its ack: the OrbitMQ SDK Producer.send /
                  nats-py js.publish (bench/workloads.closed_loop_send, as `python -m bench`)
  sdk_c8_id       as sdk_c8, each NATS publish with a unique Nats-Msg-Id, so that JetStream de-duplicates as OrbitMQ
                  does by default with the UNIQ_KEY every RocketMQ client sets (not in the default rows)
  batch           batches of 32, 8 senders (bench/workloads.batch_send)
Then everything produced is consumed (OrbitMQ PushConsumer / a JetStream pull consumer). Per row: broker (or
nats-server) CPU seconds (utime+stime) per million messages produced in that row plus the per-message CPU of the
consume phase — the issue's "CPU per million messages produced and consumed".
`--orbitmq-set KEY=VALUE` (repeatable) adds a broker.conf setting, e.g. dedupEnable=false.
`--warm-gib G` (default 2) first touches and frees G GiB of memory, so that neither system pays a fresh virtual
machine's first touches of its pages (bench/machine.py); 0 skips it.
`--repeat N` runs N rounds, the two systems in alternating order (OrbitMQ first, then NATS first, ...), so that a
drift of the machine's speed during the run does not favour one of them; it prints each round's table and then the
median, lowest and highest OrbitMQ / NATS ratio per row (on a shared 2-core VM one round scatters by ±20 %).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from time import perf_counter

if __package__ in (None, ""):  # run as a script: make `bench` and `orbitmq` importable from the repo root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.cli_args import key_value  # noqa: E402
from bench.drivers import Driver, make_driver  # noqa: E402
from bench.machine import warm_memory  # noqa: E402
from bench.metrics import CpuWindow, Latencies, Meter  # noqa: E402
from bench.workloads import PhaseResult, _result, batch_send, closed_loop_send, drain  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load_worker.py")
ROWS = ("cpp_p2", "cpp_p8", "sdk_c8", "batch")
MORE_ROWS = ("sdk_c8_id",)
READY_TIMEOUT_S = 60.0
ROW_TIMEOUT_S = 600.0


@dataclass
class Options:
    messages: int = 20_000
    size: int = 1024
    rows: tuple[str, ...] = ROWS
    nats_url: str = "nats://127.0.0.1:4222"
    queues: int = 8
    shapes: tuple[str, ...] = ()  # OrbitDriver reads it (no auto-batch producer here)
    out: str = ""
    repeat: int = 1
    warm_gib: float = 2.0
    broker_conf: dict[str, str] = field(default_factory=dict)  # --orbitmq-set


async def _spawn(kind: str, args: dict, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, WORKER, kind, json.dumps(args), env=env,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)


async def _expect_line(proc: asyncio.subprocess.Process, timeout: float) -> str:
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        err = (await proc.stderr.read()).decode(errors="replace").strip()
        raise RuntimeError(f"load worker exited ({await proc.wait()}): {err[-500:]}")
    return line.decode().strip()


async def process_phase(name: str, kind: str, procs: int, count: int, args: dict, server_pid: int | None,
                        env: dict[str, str]) -> tuple[PhaseResult, int]:
    """`procs` worker processes of synchronous sends, `count` timed messages in all. Returns the phase and the
    number of messages written (timed + one warm-up per process)."""
    per = [count // procs + (1 if i < count % procs else 0) for i in range(procs)]
    workers = [await _spawn(kind, {**args, "count": n, "group": f"bench-cpp-{i}"}, env) for i, n in enumerate(per)]
    try:
        for w in workers:
            ready = await _expect_line(w, READY_TIMEOUT_S)
            if ready != "ready":
                raise RuntimeError(f"load worker: unexpected {ready!r}")
        meter = Meter(total=count)
        cpu = CpuWindow(server_pid).start()
        t0 = perf_counter()
        for w in workers:
            assert w.stdin is not None
            w.stdin.write(b"go\n")
            await w.stdin.drain()
        reports = [json.loads(await _expect_line(w, ROW_TIMEOUT_S)) for w in workers]
        elapsed = perf_counter() - t0
        cpu.stop()
        for w in workers:
            await asyncio.wait_for(w.wait(), 60)
    finally:
        for w in workers:
            if w.returncode is None:
                w.kill()
                await w.wait()
    meter.count = sum(r["sent"] for r in reports)
    meter.bytes = meter.count * args["size"]
    meter.errors = sum(r["errors"] for r in reports)
    note = "; ".join(sorted({r["first_error"] for r in reports if r["first_error"]}))
    return _result(name, meter, elapsed, Latencies(), cpu, note), meter.count + procs


async def run_system(system: str, opts: Options) -> dict:
    driver: Driver = make_driver(system, "async" if system == "orbitmq" else "default", opts)
    body = os.urandom(opts.size)
    phases: dict[str, PhaseResult] = {}
    written = 0
    home = tempfile.mkdtemp(prefix="bench-cpp-home-")  # librocketmq writes its logs under $HOME
    env = {**os.environ, "HOME": home}
    try:
        await driver.start()
        await driver.prepare(f"bench-clients-{system}-{int(time.time())}")
        pid = driver.server_pid()
        if system == "orbitmq":
            kind, args = "cpp", {"namesrv": driver.namesrv, "topic": driver._topic, "size": opts.size}  # type: ignore[attr-defined]
        else:
            kind, args = "nats", {"url": opts.nats_url, "subject": driver._subject, "size": opts.size}  # type: ignore[attr-defined]
        for row in opts.rows:
            if row.startswith("cpp_p"):
                res, n = await process_phase(row, kind, int(row[5:]), opts.messages, args, pid, env)
                written += n
            elif row in ("sdk_c8", "sdk_c8_id"):
                res = await closed_loop_send(row, driver, opts.messages, 8, body, Meter(), with_id=row == "sdk_c8_id")
                written += res.messages
            else:
                res = await batch_send(row, driver, opts.messages, 32, 8, body, Meter())
                written += res.messages
            phases[row] = res
            print(f"{system:8} {row:7} {res.msgs_per_s:9,.0f} msgs/s  server CPU {res.server_cpu_s:.2f} s"
                  f"  errors {res.errors} {res.note}", flush=True)
        res = await drain("consume", driver, written, Meter())
        phases["consume"] = res
        print(f"{system:8} consume {res.msgs_per_s:9,.0f} msgs/s  server CPU {res.server_cpu_s:.2f} s "
              f"({res.messages} msgs) {res.note}", flush=True)
    finally:
        await driver.cleanup()
        await driver.stop()
        shutil.rmtree(home, ignore_errors=True)  # the C++ client's logs
    cons = phases["consume"]
    per_msg_cons = (cons.server_cpu_s or 0.0) / max(1, cons.messages)
    cpu_per_million = {row: ((p.server_cpu_s or 0.0) / max(1, p.messages) + per_msg_cons) * 1e6
                       for row, p in phases.items() if row != "consume"}
    return {"system": system, "phases": {k: v.to_json() for k, v in phases.items()},
            "cpu_s_per_million": cpu_per_million}


def render(results: list[dict], opts: Options) -> str:
    by = {r["system"]: r for r in results}
    conf = f"; OrbitMQ broker with {', '.join(f'{k}={v}' for k, v in opts.broker_conf.items())}" if opts.broker_conf else ""
    lines = [f"{opts.messages:,} messages per row, {opts.size} B; server CPU s per million produced + consumed{conf}",
             "", "| row | OrbitMQ msgs/s | NATS msgs/s | OrbitMQ CPU s/M | NATS CPU s/M | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in opts.rows:
        o, n = by.get("orbitmq"), by.get("nats")
        orate = o["phases"][row]["msgs_per_s"] if o else float("nan")
        nrate = n["phases"][row]["msgs_per_s"] if n else float("nan")
        ocpu = o["cpu_s_per_million"][row] if o else float("nan")
        ncpu = n["cpu_s_per_million"][row] if n else float("nan")
        lines.append(f"| {row} | {orate:,.0f} | {nrate:,.0f} | {ocpu:.1f} | {ncpu:.1f} | {ocpu / ncpu:.2f} |")
    return "\n".join(lines)


def ratios(rounds: list[list[dict]], rows: tuple[str, ...]) -> dict[str, list[float]]:
    """Per row, the OrbitMQ / NATS CPU-per-million ratio of every round that measured both systems."""
    out: dict[str, list[float]] = {row: [] for row in rows}
    for results in rounds:
        by = {r["system"]: r["cpu_s_per_million"] for r in results}
        o, n = by.get("orbitmq"), by.get("nats")
        if o is None or n is None:
            continue
        for row in rows:
            if row in o and row in n and n[row] > 0:
                out[row].append(o[row] / n[row])
    return out


def render_summary(rounds: list[list[dict]], rows: tuple[str, ...]) -> str:
    lines = [f"{len(rounds)} rounds, OrbitMQ / NATS server CPU per million produced + consumed", "",
             "| row | median ratio | lowest | highest | rounds ≤ 1 |", "| --- | ---: | ---: | ---: | ---: |"]
    for row, rs in ratios(rounds, rows).items():
        if not rs:
            lines.append(f"| {row} | - | - | - | 0 / 0 |")
            continue
        lines.append(f"| {row} | {statistics.median(rs):.2f} | {min(rs):.2f} | {max(rs):.2f} | "
                     f"{sum(1 for r in rs if r <= 1.0)} / {len(rs)} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.clients_bench", description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=Options.messages, help="timed messages per row")
    p.add_argument("--size", type=int, default=Options.size)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {','.join(ROWS + MORE_ROWS)}")
    p.add_argument("--orbitmq-set", action="append", default=[], metavar="KEY=VALUE", type=key_value,
                   help="a broker.conf setting for the OrbitMQ broker (repeatable), e.g. dedupEnable=false")
    p.add_argument("--nats-url", default=Options.nats_url)
    p.add_argument("--out", default="", help="also write the results as JSON to this file")
    p.add_argument("--repeat", type=int, default=1, help="rounds, the two systems in alternating order")
    p.add_argument("--warm-gib", type=float, default=Options.warm_gib,
                   help="GiB of memory to touch and free before the rounds (0: none)")
    ns = p.parse_args(argv)
    rows = tuple(r.strip() for r in ns.rows.split(",") if r.strip())
    bad = [r for r in rows if r not in ROWS + MORE_ROWS and not (r.startswith("cpp_p") and r[5:].isdigit())]
    if bad or not rows:
        p.error(f"--rows: choose from {','.join(ROWS + MORE_ROWS)} (or cpp_p<N>), got {ns.rows!r}")
    if ns.repeat < 1:
        p.error(f"--repeat: at least 1, got {ns.repeat}")
    if ns.warm_gib < 0:
        p.error(f"--warm-gib: at least 0, got {ns.warm_gib}")
    return Options(messages=ns.messages, size=ns.size, rows=rows, nats_url=ns.nats_url, out=ns.out,
                   repeat=ns.repeat, warm_gib=ns.warm_gib,
                   broker_conf=dict(ns.orbitmq_set))


async def main_async(opts: Options) -> list[list[dict]]:
    rounds: list[list[dict]] = []
    if opts.warm_gib > 0:
        print(f"warmed {opts.warm_gib:g} GiB of memory in {warm_memory(opts.warm_gib):.1f} s", flush=True)
    for i in range(opts.repeat):
        order = ("orbitmq", "nats") if i % 2 == 0 else ("nats", "orbitmq")
        results = [await run_system(system, opts) for system in order]
        rounds.append(results)
        print(render(results, opts), flush=True)
    if opts.repeat > 1:
        print(render_summary(rounds, opts.rows))
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(rounds if opts.repeat > 1 else rounds[0], f, indent=1)
    return rounds


def main(argv: list[str] | None = None) -> None:
    asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
