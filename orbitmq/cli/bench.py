"""`orbitmq bench producer|consumer|latency|all`: front end of the benchmark in bench/ (source tree only).

Each sub-command selects load shapes and passes the options to bench.run.run_bench(), which shows live
progress, prints the final tables and writes bench/results/.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from orbitmq.cli import EXIT_FAILURE, CliError, run_async

SHAPES_BY_COMMAND = {
    "producer": ["send", "autobatch", "batch"],
    "consumer": ["consume"],
    "latency": ["latency"],
    "all": ["send", "autobatch", "batch", "consume", "latency", "memory"],
}


def _bench_run() -> Any:
    """Import bench.run, adding the source tree root to sys.path when needed."""
    try:
        import bench.run as run
        return run
    except ImportError:
        root = Path(__file__).resolve().parents[2]
        if not (root / "bench" / "run.py").is_file():
            raise CliError("the benchmark lives in the source tree's bench/ directory, which is not available",
                           EXIT_FAILURE) from None
        sys.path.insert(0, str(root))
        import bench.run as run
        return run


def _csv(allowed: tuple[str, ...]) -> Callable[[click.Context, click.Parameter, str], list[str]]:
    def convert(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
        items = [v.strip().lower() for v in value.split(",") if v.strip()]
        bad = [v for v in items if v not in allowed]
        if bad or not items:
            raise click.BadParameter(f"choose from {','.join(allowed)}")
        return items
    return convert


def bench_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--systems", default="orbitmq,rabbitmq,nats", show_default=True,
                     callback=_csv(("orbitmq", "rabbitmq", "nats"))),
        click.option("--modes", default="async,sync", show_default=True, callback=_csv(("async", "sync")),
                     help="OrbitMQ flush modes"),
        click.option("--messages", type=int, default=1_000_000, show_default=True,
                     help="messages drained by the consumer phase"),
        click.option("--send-messages", type=int, default=100_000, show_default=True,
                     help="messages per producer phase"),
        click.option("--message-size", type=int, default=1024, show_default=True),
        click.option("--concurrency", type=int, default=8, show_default=True),
        click.option("--high-concurrency", type=int, default=32, show_default=True),
        click.option("--batch-size", type=int, default=32, show_default=True),
        click.option("--batch-senders", type=int, default=8, show_default=True),
        click.option("--rate", type=float, default=2000.0, show_default=True, help="paced phase msgs/s"),
        click.option("--latency-seconds", type=float, default=10.0, show_default=True),
        click.option("--mem-gib", type=float, default=1.0, show_default=True,
                     help="memory probe after writing this many GiB (all only; 0: off)"),
        click.option("--queues", type=int, default=8, show_default=True, help="OrbitMQ topic queues"),
        click.option("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672/", show_default=True),
        click.option("--nats-url", default="nats://127.0.0.1:4222", show_default=True),
        click.option("--out-dir", default=None, help="results directory (default bench/results)"),
        click.option("--keep-data", is_flag=True, help="keep the OrbitMQ broker's temp data dir"),
        click.option("--no-write", "no_write", is_flag=True, help="do not write result files"),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _run(command: str, kw: dict[str, Any]) -> None:
    run = _bench_run()
    no_write = kw.pop("no_write")
    out_dir = kw.pop("out_dir")
    opts = run.BenchOptions(shapes=SHAPES_BY_COMMAND[command], write_results=not no_write, **kw)
    if out_dir:
        opts.out_dir = out_dir
    run_async(run.run_bench(opts))


@click.group("bench")
def bench_group() -> None:
    """Throughput / latency benchmark of OrbitMQ vs RabbitMQ vs NATS JetStream (1 KiB messages by default)."""


@bench_group.command("producer")
@bench_options
def bench_producer(**kw: Any) -> None:
    """Producer msgs/s: N concurrent senders and batched sends."""
    _run("producer", kw)


@bench_group.command("consumer")
@bench_options
def bench_consumer(**kw: Any) -> None:
    """Consumer msgs/s draining --messages messages (filled first)."""
    _run("consumer", kw)


@bench_group.command("latency")
@bench_options
def bench_latency(**kw: Any) -> None:
    """Send latency p50/p99/p999 at a fixed open-loop rate."""
    _run("latency", kw)


@bench_group.command("all")
@bench_options
def bench_all(**kw: Any) -> None:
    """Every shape, CPU per million messages and the memory probe; one side-by-side table."""
    _run("all", kw)
