"""Benchmark orchestration: for each system/mode run the selected load shapes and report the results.

`python -m bench [options]` or `.venv/bin/python bench/run.py [options]`; `orbitmq bench ...` calls run_bench().
Order per system: 8-sender sends, 8-sender sends with SDK auto-batching (OrbitMQ), batched sends, fill, drain, paced
latency, 32-sender sends, memory top-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run as a script: make `bench` and `orbitmq` importable from the repo root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from bench.drivers import Driver, make_driver  # noqa: E402
from bench.metrics import Meter, proc_memory_kib  # noqa: E402
from bench.report import LiveProgress, SystemResult, render_tables, write_results  # noqa: E402
from bench.workloads import PhaseAborted, PhaseResult, batch_send, closed_loop_send, drain, paced_send  # noqa: E402

SYSTEMS = ("orbitmq", "rabbitmq", "nats")
MODES = ("async", "sync")
SHAPES = ("send", "autobatch", "batch", "consume", "latency", "memory")
GIB = 1 << 30
CPU_PRODUCE_PHASES = ("send_c8", "send_c8_auto", "batch")  # each + consume gives one CPU-per-million figure


@dataclass
class BenchOptions:
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    modes: list[str] = field(default_factory=lambda: list(MODES))
    shapes: list[str] = field(default_factory=lambda: list(SHAPES))
    messages: int = 1_000_000          # drained by the consumer phase
    send_messages: int = 100_000       # per closed-loop / batched producer phase
    message_size: int = 1024
    concurrency: int = 8
    high_concurrency: int = 32         # every system and mode
    batch_size: int = 32
    batch_senders: int = 8
    rate: float = 2000.0
    latency_seconds: float = 10.0
    mem_gib: float = 1.0
    queues: int = 8
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    nats_url: str = "nats://127.0.0.1:4222"
    out_dir: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    keep_data: bool = False
    write_results: bool = True


class _Run:
    """One system/mode: owns the driver and the running message totals of its destination."""

    def __init__(self, opts: BenchOptions, driver: Driver, progress: LiveProgress) -> None:
        self.opts = opts
        self.driver = driver
        self.progress = progress
        self.body = os.urandom(opts.message_size)
        self.written_msgs = 0
        self.written_bytes = 0
        self.result = SystemResult(driver.system, driver.mode, driver.label, driver.durability)

    def _meter(self, name: str, total: int) -> tuple[str, Meter]:
        meter = Meter(total=total)
        desc = f"{self.driver.label} {name}"
        self.progress.track(desc, meter)
        return desc, meter

    def _record(self, name: str, desc: str, res: PhaseResult, produced: bool, keep: bool = True) -> None:
        if produced:
            self.written_msgs += res.messages
            self.written_bytes += res.bytes
        if keep:
            self.result.phases[name] = res
        self.progress.done(desc, res)

    async def send(self, name: str, concurrency: int, auto_batch: bool = False) -> None:
        desc, meter = self._meter(name, self.opts.send_messages)
        res = await closed_loop_send(name, self.driver, self.opts.send_messages, concurrency, self.body, meter,
                                     auto_batch)
        self._record(name, desc, res, produced=True)

    async def batch(self, name: str, count: int, keep: bool = True) -> None:
        desc, meter = self._meter(name, count)
        res = await batch_send(name, self.driver, count, self.opts.batch_size, self.opts.batch_senders,
                               self.body, meter)
        self._record(name, desc, res, produced=True, keep=keep)

    async def consume(self) -> None:
        missing = self.opts.messages - self.written_msgs
        if missing > 0:
            await self.batch("fill", missing, keep=False)
        desc, meter = self._meter("consume", self.opts.messages)
        res = await drain("consume", self.driver, self.opts.messages, meter)
        self._record("consume", desc, res, produced=False)

    async def latency(self) -> None:
        count = int(self.opts.rate * self.opts.latency_seconds)
        desc, meter = self._meter("latency", count)
        res = await paced_send("latency", self.driver, self.opts.rate, self.opts.latency_seconds, self.body, meter)
        self._record("latency", desc, res, produced=True)

    async def memory(self) -> None:
        pid = self.driver.server_pid()
        if pid is None:
            return
        target = int(self.opts.mem_gib * GIB)
        missing = (target - self.written_bytes) // self.opts.message_size
        if missing > 0:
            await self.batch("topup", missing, keep=False)
        status = proc_memory_kib(pid)
        self.result.memory = {
            "pid": pid, "written_gib": self.written_bytes / GIB,
            "rss_anon_mib": status.get("RssAnon", 0) / 1024, "rss_file_mib": status.get("RssFile", 0) / 1024,
            "rss_shmem_mib": status.get("RssShmem", 0) / 1024, "vm_rss_mib": status.get("VmRSS", 0) / 1024,
            "vm_hwm_mib": status.get("VmHWM", 0) / 1024,
        }

    def finish(self) -> None:
        """Server CPU per million messages produced and consumed, for each producing shape that ran."""
        phases = self.result.phases
        cons = phases.get("consume")
        if cons is None or cons.server_cpu_s is None or not cons.messages:
            return
        for name in CPU_PRODUCE_PHASES:
            prod = phases.get(name)
            if prod is not None and prod.server_cpu_s is not None and prod.messages:
                self.result.cpu_per_million[name] = (prod.server_cpu_s / prod.messages
                                                     + cons.server_cpu_s / cons.messages) * 1e6
        self.result.cpu_s_per_million = self.result.cpu_per_million.get("send_c8")


async def run_system(opts: BenchOptions, system: str, mode: str, progress: LiveProgress,
                     console: Console) -> SystemResult:
    driver = make_driver(system, mode if system == "orbitmq" else "default", opts)
    run = _Run(opts, driver, progress)
    shapes = set(opts.shapes)
    destination = f"bench-{system}-{mode}-{int(time.time())}"
    try:
        await driver.start()
        await driver.prepare(destination)
        if "send" in shapes:
            await run.send("send_c8", opts.concurrency)
        if "autobatch" in shapes and driver.supports_auto_batch:
            await run.send("send_c8_auto", opts.concurrency, auto_batch=True)
        if "batch" in shapes:
            await run.batch("batch", opts.send_messages)
        if "consume" in shapes:
            await run.consume()
        if "latency" in shapes:
            await run.latency()
        if "send" in shapes:  # every system and mode: the SYNC/ASYNC ratio is read at equal concurrency
            await run.send("send_c32", opts.high_concurrency)
        if "memory" in shapes and opts.mem_gib > 0:
            await run.memory()
    except (PhaseAborted, Exception) as exc:  # noqa: BLE001 - one system failing must not stop the others
        run.result.error = f"{type(exc).__name__}: {exc}"
        console.print(f"[red]{driver.label}: {run.result.error}[/red]", highlight=False)
    finally:
        with contextlib.suppress(Exception):
            await driver.cleanup()
        with contextlib.suppress(Exception):
            await driver.stop()
    run.finish()
    return run.result


async def run_bench(opts: BenchOptions, console: Console | None = None) -> list[SystemResult]:
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results: list[SystemResult] = []
    async with LiveProgress(console) as progress:
        for system in opts.systems:
            modes = opts.modes if system == "orbitmq" else ["default"]
            for mode in modes:
                results.append(await run_system(opts, system, mode, progress, console))
    render_tables(console, results, opts)
    if opts.write_results:
        meta = {"started": started, "stamp": time.strftime("%Y%m%d-%H%M%S", time.gmtime()),
                "host": f"{socket.gethostname()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"}
        json_path, md_path = write_results(opts.out_dir, results, opts, meta)
        console.print(f"results: {json_path}, {md_path}", highlight=False)
    return results


def _csv(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [v.strip().lower() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{what}: choose from {','.join(allowed)} (got {value!r})")
    return items


def parse_args(argv: list[str] | None = None) -> BenchOptions:
    d = BenchOptions()
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--systems", type=lambda v: _csv(v, SYSTEMS, "--systems"), default=d.systems)
    p.add_argument("--modes", type=lambda v: _csv(v, MODES, "--modes"), default=d.modes,
                   help="OrbitMQ flush modes (async = ASYNC_FLUSH, sync = SYNC_FLUSH)")
    p.add_argument("--shapes", type=lambda v: _csv(v, SHAPES, "--shapes"), default=d.shapes)
    p.add_argument("--messages", type=int, default=d.messages, help="messages drained by the consumer phase")
    p.add_argument("--send-messages", type=int, default=d.send_messages, help="messages per producer phase")
    p.add_argument("--message-size", type=int, default=d.message_size)
    p.add_argument("--concurrency", type=int, default=d.concurrency)
    p.add_argument("--high-concurrency", type=int, default=d.high_concurrency)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--batch-senders", type=int, default=d.batch_senders)
    p.add_argument("--rate", type=float, default=d.rate, help="paced phase: messages per second")
    p.add_argument("--latency-seconds", type=float, default=d.latency_seconds)
    p.add_argument("--mem-gib", type=float, default=d.mem_gib, help="memory probe after writing this much (0: off)")
    p.add_argument("--queues", type=int, default=d.queues, help="OrbitMQ topic queue count")
    p.add_argument("--rabbitmq-url", default=d.rabbitmq_url)
    p.add_argument("--nats-url", default=d.nats_url)
    p.add_argument("--out-dir", default=d.out_dir)
    p.add_argument("--keep-data", action="store_true", help="keep the OrbitMQ broker's temp data dir")
    p.add_argument("--no-write", dest="write_results", action="store_false", help="do not write bench/results/")
    ns = p.parse_args(argv)
    return BenchOptions(**vars(ns))


def install_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> None:
    opts = parse_args(argv)
    install_uvloop()
    try:
        asyncio.run(run_bench(opts))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
