"""Memory probe: fill a fresh `orbitmq standalone` with N GiB of 1 KiB messages and report the broker's resident
memory beyond the page cache (RssAnon) against the mapped files (RssFile), sampled as the CommitLog grows.

    .venv/bin/python bench/memory_probe.py --gib 10            # the issue's target: RssAnon < 300 MiB at 10 GiB
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.metrics import proc_memory_kib  # noqa: E402
from orbitmq.client import Producer  # noqa: E402
from orbitmq.model import Message  # noqa: E402
from orbitmq.testing.procs import Standalone  # noqa: E402

GIB = 1 << 30


async def fill(sa: Standalone, gib: float, size: int, batch: int, senders: int, samples: list[tuple]) -> None:
    target = int(gib * GIB)
    body = os.urandom(size)
    written = 0
    pid = sa.proc.pid
    async with Producer("mem_probe", namesrv=sa.namesrv_addr, send_timeout_ms=10_000) as p:
        with Progress(TextColumn("[bold]fill"), BarColumn(), TextColumn("{task.completed:.2f}/{task.total:.1f} GiB"),
                      TextColumn("RssAnon {task.fields[anon]:.0f} MiB"), TimeElapsedColumn()) as prog:
            task = prog.add_task("fill", total=gib, anon=0.0)
            next_sample = 0.0

            async def sender() -> None:
                nonlocal written, next_sample
                while written < target:
                    msgs = [Message("MemProbe", body, {}) for _ in range(batch)]
                    for m in msgs:
                        m.keys = f"k{written}"
                    await p.send_batch(msgs)
                    written += size * batch
                    if written / GIB >= next_sample:
                        st = proc_memory_kib(pid)
                        samples.append((written / GIB, st.get("RssAnon", 0) / 1024, st.get("RssFile", 0) / 1024))
                        next_sample += max(0.25, gib / 20)
                        prog.update(task, completed=written / GIB, anon=samples[-1][1])
                    else:
                        prog.update(task, completed=written / GIB)

            await asyncio.gather(*(sender() for _ in range(senders)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=10.0)
    ap.add_argument("--message-size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--dir", default=None, help="data directory (default: a temp dir, removed afterwards)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra broker.conf keys")
    a = ap.parse_args()
    con = Console()
    tmp = tempfile.TemporaryDirectory(prefix="orbitmq-mem-", dir=a.dir)
    keys = dict(kv.split("=", 1) for kv in a.conf)
    sa = Standalone(Path(tmp.name) / "sa", **keys).start()
    samples: list[tuple] = []
    t0 = time.monotonic()
    try:
        asyncio.run(fill(sa, a.gib, a.message_size, a.batch, a.senders, samples))
        time.sleep(2)
        st = proc_memory_kib(sa.proc.pid)
        samples.append((a.gib, st.get("RssAnon", 0) / 1024, st.get("RssFile", 0) / 1024))
    finally:
        sa.close()
        tmp.cleanup()
    t = Table(title=f"broker memory while filling {a.gib} GiB of {a.message_size} B messages "
                    f"({time.monotonic() - t0:.0f} s)")
    for col in ("CommitLog GiB", "RssAnon MiB", "RssFile MiB"):
        t.add_column(col, justify="right")
    for g, anon, file in samples:
        t.add_row(f"{g:.2f}", f"{anon:.0f}", f"{file:.0f}")
    con.print(t)
    peak = max(s[1] for s in samples)
    con.print(f"peak RssAnon {peak:.0f} MiB (target < 300 MiB beyond the page cache)")


if __name__ == "__main__":
    main()
