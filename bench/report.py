"""Presentation of benchmark results: live progress, the per-phase and side-by-side tables, JSON and markdown.

Pure formatting plus file writing; the numbers come from bench/run.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.metrics import Meter
from bench.workloads import PhaseResult

PHASE_TITLES = {
    "send_c8": "send, 8 senders",
    "send_c8_auto": "send, 8 senders, SDK auto-batch",
    "send_c32": "send, 32 senders",
    "batch": "batched send",
    "fill": "fill (not reported)",
    "consume": "consume (drain)",
    "latency": "paced send",
    "topup": "memory top-up",
}


@dataclass
class SystemResult:
    system: str
    mode: str
    label: str
    durability: str
    phases: dict[str, PhaseResult] = field(default_factory=dict)
    cpu_s_per_million: float | None = None  # send_c8 + consume (the headline figure)
    cpu_per_million: dict[str, float] = field(default_factory=dict)  # producing phase -> CPU-s per 1M with consume
    memory: dict[str, Any] | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system, "mode": self.mode, "label": self.label, "durability": self.durability,
            "phases": {k: v.to_json() for k, v in self.phases.items()},
            "cpu_s_per_million": self.cpu_s_per_million, "cpu_per_million": self.cpu_per_million,
            "memory": self.memory, "error": self.error,
        }


class LiveProgress:
    """A rich progress display fed by Meters; hot loops only bump meter.count, a task refreshes the bars."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>14}"), TimeElapsedColumn(), console=console, transient=False,
        )
        self._tracked: dict[str, tuple[int, Meter, float]] = {}
        self._refresher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveProgress:
        if self.live:
            self._progress.start()
            self._refresher = asyncio.create_task(self._refresh_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        self._refresh()
        if self.live:
            self._progress.stop()

    def track(self, description: str, meter: Meter) -> None:
        task_id = self._progress.add_task(description, total=meter.total or None, rate="") if self.live else -1
        self._tracked[description] = (task_id, meter, perf_counter())

    def done(self, description: str, result: PhaseResult) -> None:
        self._refresh()
        entry = self._tracked.pop(description, None)
        if entry is not None and self.live:
            self._progress.update(entry[0], rate=f"{result.msgs_per_s:,.0f} msg/s")
        if not self.live:
            self.console.print(f"{description}: {format_phase_line(result)}", highlight=False)

    def _refresh(self) -> None:
        if not self.live:
            return
        now = perf_counter()
        for task_id, meter, t0 in self._tracked.values():
            rate = meter.count / max(now - t0, 1e-6)
            self._progress.update(task_id, completed=meter.count, total=meter.total or None,
                                  rate=f"{rate:,.0f} msg/s")

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self._refresh()


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_phase_line(r: PhaseResult) -> str:
    line = (f"{r.messages:,} msgs in {r.seconds:.1f} s = {r.msgs_per_s:,.0f} msgs/s, {r.mb_per_s:.1f} MB/s, "
            f"p50 {_f(r.p50_ms, 2)} ms, p99 {_f(r.p99_ms, 2)} ms, p999 {_f(r.p999_ms, 2)} ms, "
            f"server CPU {_f(r.server_cpu_s, 2)} s")
    if r.errors:
        line += f", {r.errors} errors"
    if r.note:
        line += f" ({r.note})"
    return line


def phase_rows(results: list[SystemResult]) -> Iterator[list[str]]:
    for res in results:
        for name, r in res.phases.items():
            yield [res.label, PHASE_TITLES.get(name, name), f"{r.messages:,}", f"{r.msgs_per_s:,.0f}",
                   f"{r.mb_per_s:,.1f}", _f(r.p50_ms, 2), _f(r.p99_ms, 2), _f(r.p999_ms, 2),
                   _f(r.server_cpu_s, 1), _f(r.client_cpu_s, 1), str(r.errors) + (f" {r.note}" if r.note else "")]


PHASE_COLUMNS = ["system", "phase", "msgs", "msgs/s", "MB/s", "p50 ms", "p99 ms", "p999 ms", "server CPU s",
                 "client CPU s", "errors"]


def summary_rows(results: list[SystemResult], opts: Any) -> tuple[list[str], list[list[str]]]:
    """Side-by-side: one row per headline metric, one column per system/mode."""
    columns = ["metric"] + [r.label for r in results]

    def phase_value(name: str, attr: str, digits: int = 0) -> list[str]:
        out = []
        for res in results:
            r = res.phases.get(name)
            out.append(_f(getattr(r, attr), digits) if r is not None else "-")
        return out

    size = getattr(opts, "message_size", 1024)
    rows = [
        [f"producer msgs/s, {opts.concurrency} senders ({size} B)"] + phase_value("send_c8", "msgs_per_s"),
        ["  send latency p50 / p99 ms"] + [
            (f"{_f(r.phases['send_c8'].p50_ms, 2)} / {_f(r.phases['send_c8'].p99_ms, 2)}"
             if "send_c8" in r.phases else "-") for r in results],
        [f"producer msgs/s, {opts.concurrency} senders, SDK auto-batch"] + phase_value("send_c8_auto", "msgs_per_s"),
        [f"producer msgs/s, {opts.high_concurrency} senders"] + phase_value("send_c32", "msgs_per_s"),
        [f"producer msgs/s, batches of {opts.batch_size}"] + phase_value("batch", "msgs_per_s"),
        ["producer MB/s, batched"] + phase_value("batch", "mb_per_s", 1),
        ["consumer msgs/s (drain)"] + phase_value("consume", "msgs_per_s"),
        ["consumer MB/s"] + phase_value("consume", "mb_per_s", 1),
        [f"latency @ {opts.rate:,.0f} msgs/s p50 / p99 / p999 ms"] + [
            (f"{_f(r.phases['latency'].p50_ms, 2)} / {_f(r.phases['latency'].p99_ms, 2)} / "
             f"{_f(r.phases['latency'].p999_ms, 2)}" if "latency" in r.phases else "-") for r in results],
        [f"server CPU-s per 1M msgs: {opts.concurrency} senders + consume"]
        + [_f(r.cpu_per_million.get("send_c8"), 1) for r in results],
        [f"server CPU-s per 1M msgs: {opts.concurrency} senders auto-batch + consume"]
        + [_f(r.cpu_per_million.get("send_c8_auto"), 1) for r in results],
        [f"server CPU-s per 1M msgs: batches of {opts.batch_size} + consume"]
        + [_f(r.cpu_per_million.get("batch"), 1) for r in results],
        ["RssAnon / RssFile MiB after write"] + [
            (f"{r.memory['rss_anon_mib']:,.0f} / {r.memory['rss_file_mib']:,.0f} "
             f"({r.memory['written_gib']:.2f} GiB)" if r.memory else "-") for r in results],
    ]
    return columns, rows


def render_tables(console: Console, results: list[SystemResult], opts: Any) -> None:
    detail = Table(title="Phases", show_lines=False)
    for col in PHASE_COLUMNS:
        detail.add_column(col, justify="left" if col in ("system", "phase", "errors") else "right")
    for row in phase_rows(results):
        detail.add_row(*row)
    console.print(detail)
    columns, rows = summary_rows(results, opts)
    summary = Table(title="OrbitMQ vs RabbitMQ vs NATS JetStream")
    for i, col in enumerate(columns):
        summary.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        summary.add_row(*row)
    console.print(summary)
    for res in results:
        console.print(f"[bold]{res.label}[/bold]: {res.durability}" + (f"  [red]{res.error}[/red]" if res.error else ""))


def markdown(results: list[SystemResult], opts: Any, meta: dict[str, Any]) -> str:
    def table(columns: list[str], rows: list[list[str]]) -> str:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)

    columns, rows = summary_rows(results, opts)
    parts = [
        f"# Benchmark results ({meta['started']})", "",
        f"Host: {meta['host']}; message size {opts.message_size} B; drain {opts.messages:,} msgs; "
        f"closed-loop phases {opts.send_messages:,} msgs each.", "",
        table(columns, rows), "", "## Phases", "", table(PHASE_COLUMNS, list(phase_rows(results))), "",
        "## Durability of an acknowledged send", "",
    ]
    parts += [f"- **{r.label}**: {r.durability}" + (f" (error: {r.error})" if r.error else "") for r in results]
    return "\n".join(parts) + "\n"


def write_results(out_dir: str, results: list[SystemResult], opts: Any, meta: dict[str, Any]) -> tuple[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    stamp = meta["stamp"]
    doc = {"meta": meta, "options": {k: v for k, v in vars(opts).items() if not k.startswith("_")},
           "results": [r.to_json() for r in results]}
    json_path = os.path.join(out_dir, f"bench-{stamp}.json")
    md_path = os.path.join(out_dir, f"bench-{stamp}.md")
    with open(json_path, "wb") as f:
        f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str))
    with open(md_path, "w") as f:
        f.write(markdown(results, opts, meta))
    for src, name in ((json_path, "latest.json"), (md_path, "latest.md")):
        link = os.path.join(out_dir, name)
        with contextlib.suppress(OSError):
            os.remove(link)
        with open(src, "rb") as a, open(link, "wb") as b:
            b.write(a.read())
    return json_path, md_path
