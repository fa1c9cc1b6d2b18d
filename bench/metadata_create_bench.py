"""Event-loop stall while auto-creating many subscription groups (issue 12.2).

A ticker coroutine stands for every other client of the broker: it wakes every millisecond and records how late it
was. The groups are created as heartbeats would create them (find_or_create on the loop, yielding every 100). Two
runs: the broker's write-behind persistence, and the old way (a whole-file atomic write with fsyncs on the loop
after every change), the latter with fewer groups because it is quadratic.

    .venv/bin/python bench/metadata_create_bench.py [groups] [old_way_groups]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.metadata import SubscriptionGroupManager


async def _run(n: int, old_way: bool) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as d:
        groups = SubscriptionGroupManager(d, BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1"))
        if old_way:
            groups._schedule_persist = groups.persist  # type: ignore[method-assign]
        worst = 0.0
        running = True

        async def ticker() -> None:
            nonlocal worst
            while running:
                t0 = time.perf_counter()
                await asyncio.sleep(0.001)
                worst = max(worst, time.perf_counter() - t0 - 0.001)

        t = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        start = time.perf_counter()
        for i in range(n):
            groups.find_or_create(f"BenchGroup{i}")
            if i % 100 == 0:
                await asyncio.sleep(0)
        await groups.flushed()
        elapsed = time.perf_counter() - start
        running = False
        await t
        return elapsed, worst, groups.writes


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    n_old = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    for label, count, old in (("write-behind", n, False), ("sync on loop (old)", n_old, True)):
        elapsed, worst, writes = asyncio.run(_run(count, old))
        print(f"{label}: {count} groups in {elapsed:.2f} s, {writes} file writes, "
              f"worst loop stall {worst * 1000:.1f} ms")


if __name__ == "__main__":
    main()
