"""The send that crosses a CommitLog segment boundary: its latency with the next segment created inline (on the event
loop, as before issue 12's allocation work) and created ahead by the allocation thread (store/allocate.py).

A real store (MmapDisk) in a temporary directory, ASYNC_FLUSH, 1 GiB segments by default; each round writes
messages (1 MiB by default) until the second segment is in use and records the put that rolled and the median of the
64 puts before it. Modes alternate round by round so machine load hits both alike. Needs ~2-3 GiB of free disk per
round (removed after it). Large messages make every put pay page faults and dirty-page throttling (milliseconds);
small ones (--message-kib 16) leave the roll's own cost visible.

    .venv/bin/python bench/segment_roll_bench.py [--rounds 3] [--segment-mib 1024] [--message-kib 1024] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time

from orbitmq.store import MessageInner, MessageStore, PutStatus, StoreConfig, allocate


async def one_round(directory: str, segment: int, body: bytes) -> tuple[float, float]:
    """(ms of the put that rolled into the second segment, median ms of the 64 puts before it)."""
    root = tempfile.mkdtemp(prefix="segroll-", dir=directory)
    try:
        s = MessageStore(StoreConfig(root, mapped_file_size_commitlog=segment, max_message_size=2 << 20,
                                     message_index_enable=False))
        s.load()
        await s.start()
        before: list[float] = []
        roll_ms = -1.0
        while True:
            t0 = time.perf_counter()
            r = await s.put_message(MessageInner("T", 0, body, {}))
            ms = (time.perf_counter() - t0) * 1000
            assert r.status is PutStatus.PUT_OK, r.status
            if len(s.commitlog.segments) > 1:
                roll_ms = ms
                break
            before.append(ms)
            if len(before) > 256:
                del before[:-64]
        await s.shutdown()
        return roll_ms, statistics.median(before[-64:])
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--message-kib", type=int, default=1024)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    segment = a.segment_mib << 20
    default_min = allocate.AHEAD_MIN_SIZE
    results: dict[str, list[tuple[float, float]]] = {"inline": [], "ahead": []}
    for _ in range(a.rounds):
        for mode in ("inline", "ahead"):
            allocate.AHEAD_MIN_SIZE = 1 << 62 if mode == "inline" else default_min
            await asyncio.sleep(0)
            results[mode].append(await one_round(a.dir, segment, b"x" * (a.message_kib << 10)))
    allocate.AHEAD_MIN_SIZE = default_min
    print(f"segment {a.segment_mib} MiB, {a.message_kib} KiB messages, {a.rounds} rounds per mode")
    for mode, rows in results.items():
        rolls = [r for r, _ in rows]
        prev = [p for _, p in rows]
        print(f"{mode:>6}: crossing put {statistics.median(rolls):8.2f} ms median, {max(rolls):8.2f} max "
              f"(each: {', '.join(f'{r:.1f}' for r in rolls)}); the 64 puts before it {statistics.median(prev):.2f} ms "
              f"median")


if __name__ == "__main__":
    asyncio.run(main())
