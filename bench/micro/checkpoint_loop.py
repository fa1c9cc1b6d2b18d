"""Event-loop time of the store's periodic derived flush (ConsumeQueue/index sync + checkpoint save), measured as
the longest loop stall a probe task sees while one `_flush_derived_off_loop()` cycle runs on a real disk.

    .venv/bin/python bench/micro/checkpoint_loop.py [--cycles 200] [--msgs 200] [--dir DIR]

Each cycle puts --msgs messages (probe off), then runs one flush cycle with a probe task that yields to the loop
continuously and records the gaps between its turns; a gap is time the loop spent elsewhere (the flush's on-loop
part). Prints per-cycle max-stall percentiles and the mean summed stall per cycle, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time

from orbitmq.store import MessageInner, MessageStore, StoreConfig


async def _cycle(store: MessageStore, msgs: int, base: int) -> tuple[float, float]:
    for i in range(msgs):
        r = await store.put_message(MessageInner("T", i % 4, b"x" * 256, {"KEYS": f"k{base + i}"}))
        assert r.ok
    gaps: list[float] = []
    done = False

    async def probe() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.ensure_future(probe())
    await asyncio.sleep(0)
    await store._flush_derived_off_loop()
    done = True
    await task
    return max(gaps) * 1000, sum(g for g in gaps if g > 0.0002) * 1000


async def _main(cycles: int, msgs: int, root: str) -> None:
    store = MessageStore(StoreConfig(root, mapped_file_size_commitlog=64 << 20, max_message_size=64 * 1024,
                                     flush_interval_consume_queue_ms=3_600_000))  # no periodic flush of its own
    store.load()
    await store.start()
    try:
        worst: list[float] = []
        total: list[float] = []
        for c in range(cycles):
            w, t = await _cycle(store, msgs, c * msgs)
            worst.append(w)
            total.append(t)
    finally:
        await store.shutdown()
    q = statistics.quantiles(worst, n=100)
    print(f"cycles {cycles}, {msgs} msgs each: loop stall per flush cycle: max-gap p50 {q[49]:.3f} ms, "
          f"p90 {q[89]:.3f} ms, p99 {q[98]:.3f} ms, max {max(worst):.3f} ms; summed stall mean "
          f"{statistics.mean(total):.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--msgs", type=int, default=200)
    ap.add_argument("--dir", default=None, help="parent directory of the temporary store (a real disk)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="ckpt-loop-", dir=a.dir)
    try:
        asyncio.run(_main(a.cycles, a.msgs, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
