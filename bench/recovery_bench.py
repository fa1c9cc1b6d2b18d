"""Restart time after `kill -9` under load (issue 16 item 1): `python -m bench.recovery_bench --sizes 1,4,10`.

For each size (GiB of CommitLog):
1. build: a store of that size written straight through the MessageStore API (1 KiB messages in batches of 32
   over 8 queues, store times an hour old so they are outside the de-dup window), then a clean shutdown;
2. start `orbitmq standalone` on it, send 1 KiB messages with 8 concurrent senders for --load-seconds, and
   `kill -9` it while they send;
3. restart it and measure from the spawn: when the name server first answers (and the slowest answer while the
   broker recovers), and when the first send succeeds (a fresh Producer retrying every 100 ms).
The data directory is removed at the end unless --keep. Check `df` first: a size needs its GiB free plus ~10 %.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from orbitmq.client import Producer, SendStatus
from orbitmq.model import Message
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.testing.procs import LOCALHOST, Standalone, blocking_request, free_port, wait_broker_registered

TOPIC = "RecoveryBench"
BODY = 1024
GIB = 1 << 30


class _OldClock:
    """Store times an hour back: the built records are older than the de-dup window (as a long-lived log's are)."""

    def __init__(self) -> None:
        self.offset_ms = 3600 * 1000

    def now_ms(self) -> int:
        return int(time.time() * 1000) - self.offset_ms

    def monotonic_ms(self) -> int:
        return int(time.monotonic() * 1000)


def build_store(store_dir: Path, gib: float) -> float:
    """Write `gib` GiB of 1 KiB records through the store API; returns seconds taken."""
    target = int(gib * GIB)
    t0 = time.monotonic()

    async def go() -> None:
        store = MessageStore(StoreConfig(str(store_dir)), clock=_OldClock())
        store.load()
        await store.start()
        body = os.urandom(BODY)
        i = 0
        while store.max_phys_offset < target:
            batch = [MessageInner(TOPIC, (i + k) % 8, body, {"KEYS": f"b{i + k}"}) for k in range(32)]
            r = await store.put_messages(batch)
            if not r.ok:
                raise RuntimeError(f"build: put failed: {r}")
            i += 32
            if i % (32 * 4096) == 0:
                print(f"  build: {store.max_phys_offset / GIB:.2f} GiB", flush=True)
        await store.shutdown()

    asyncio.run(go())
    return time.monotonic() - t0


async def _load_then_kill(sa: Standalone, seconds: float, senders: int = 8) -> int:
    p = Producer("recovery_bench_pg", namesrv=sa.namesrv_addr, send_timeout_ms=3000, retry_times=0)
    await p.start()
    acked = 0
    stop = asyncio.Event()
    deadline = time.monotonic() + seconds

    async def sender(n: int) -> None:
        nonlocal acked
        i = 0
        body = os.urandom(BODY)
        while not stop.is_set():
            i += 1
            try:
                r = await p.send(Message(TOPIC, body, {"seq": str(i)}))
            except Exception:  # noqa: BLE001 - the kill makes sends fail
                if not sa.proc.running:
                    return
                await asyncio.sleep(0.05)
                continue
            if r.status == SendStatus.SEND_OK:
                acked += 1
            if time.monotonic() >= deadline and sa.proc.running:
                sa.kill9()  # in the middle of the load: the other senders have requests in flight
                stop.set()

    await asyncio.wait_for(asyncio.gather(*(sender(n) for n in range(senders))), seconds + 120)
    await p.shutdown()
    return acked


@dataclass
class _NamesrvProbe:
    addr: str
    first_answer_s: float | None = None
    slowest_answer_s: float = 0.0
    unanswered: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, t0: float) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                blocking_request(self.addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 2.0)
            except OSError:
                if self.first_answer_s is not None:
                    self.unanswered += 1
                time.sleep(0.02)
                continue
            now = time.monotonic()
            if self.first_answer_s is None:
                self.first_answer_s = now - t0
            else:
                self.slowest_answer_s = max(self.slowest_answer_s, now - sent)
            time.sleep(0.05)


async def _first_send(sa: Standalone, t0: float, limit_s: float) -> float:
    p = Producer("recovery_bench_pg2", namesrv=sa.namesrv_addr, send_timeout_ms=1000, retry_times=0)
    await p.start()
    try:
        while time.monotonic() - t0 < limit_s:
            try:
                r = await p.send(Message(TOPIC, b"x" * BODY))
                if r.status == SendStatus.SEND_OK:
                    return time.monotonic() - t0
            except Exception:  # noqa: BLE001 - not up yet
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError(f"no successful send within {limit_s} s of the restart")
    finally:
        await p.shutdown()


def run_size(root: Path, gib: float, load_s: float) -> dict[str, float | int | None]:
    d = root / f"{gib:g}gib"
    sa_dir = d / "sa"
    sa_dir.mkdir(parents=True)
    print(f"[{gib:g} GiB] building the CommitLog ...", flush=True)
    build_s = build_store(sa_dir / "store", gib)
    dflt = StoreConfig(str(sa_dir / "store"))  # the defaults, as built (the test harness shrinks some)
    sa = Standalone(sa_dir, flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=dflt.mapped_file_size_commitlog,
                    mappedFileSizeConsumeQueue=dflt.mapped_file_size_consume_queue, maxHashSlotNum=dflt.max_hash_slot_num,
                    maxIndexNum=dflt.max_index_num)
    t = time.monotonic()
    sa.proc.start(wait=False)  # a clean start CRC-checks a bounded tail; start()'s 20 s is short on a busy machine
    sa.proc.wait_ready(900)
    wait_broker_registered(sa.namesrv_addr, sa.broker_addr, timeout_s=120, proc=sa.proc)
    first_start_s = time.monotonic() - t
    print(f"[{gib:g} GiB] built in {build_s:.0f} s; first (clean) start {first_start_s:.1f} s; load {load_s:g} s "
          "then kill -9", flush=True)
    acked = asyncio.run(_load_then_kill(sa, load_s))
    probe = _NamesrvProbe(f"{LOCALHOST}:{sa.namesrv_port}")
    load_avg = os.getloadavg()[0]
    t0 = time.monotonic()
    sa.proc.start(wait=False)
    th = threading.Thread(target=probe.run, args=(t0,), daemon=True)
    th.start()
    try:
        first_send_s = asyncio.run(_first_send(sa, t0, 600))
    finally:
        probe.stop.set()
        th.join(5)
        sa.close()
    log = (sa_dir / "standalone.log").read_text(errors="replace")
    lines = [ln for ln in log.splitlines() if "re-dispatched" in ln or "dedup:" in ln or "store recovery" in ln]
    for ln in lines[-6:]:
        print("   ", ln[-200:])
    done = [ln for ln in lines if "store recovery: done in" in ln]
    store_recovery_s = float(done[-1].rsplit("done in ", 1)[1].split()[0]) if len(done) >= 2 else None
    return {"gib": gib, "build_s": round(build_s, 1), "first_start_s": round(first_start_s, 2), "acked": acked,
            "namesrv_first_answer_s": None if probe.first_answer_s is None else round(probe.first_answer_s, 2),
            "namesrv_slowest_answer_s": round(probe.slowest_answer_s, 3), "namesrv_unanswered": probe.unanswered,
            "first_send_s": round(first_send_s, 2), "store_recovery_s": store_recovery_s,
            "load_avg": round(load_avg, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1,4", help="CommitLog sizes in GiB, comma-separated (default 1,4)")
    ap.add_argument("--load-seconds", type=float, default=5.0, help="load before the kill -9 (default 5)")
    ap.add_argument("--dir", default=None, help="parent of the data directory (default: the temp directory)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    args = ap.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    root = Path(tempfile.mkdtemp(prefix="orbitmq-recovery-bench-", dir=args.dir))
    need = sum(sizes) * GIB * 1.1
    free = shutil.disk_usage(root).free
    if free < need:
        shutil.rmtree(root)
        raise SystemExit(f"recovery_bench: {need / GIB:.1f} GiB needed in {root.parent}, {free / GIB:.1f} GiB free")
    free_port()  # fail early if no port can be bound
    results = []
    try:
        for gib in sizes:
            results.append(run_size(root, gib, args.load_seconds))
            print(f"[{gib:g} GiB] {results[-1]}", flush=True)
            if not args.keep:
                shutil.rmtree(root / f"{gib:g}gib", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("\nGiB  build_s  clean_start_s  acked  namesrv_first_s  namesrv_slowest_s  unanswered  store_recovery_s"
          "  first_send_s  load")
    for r in results:
        print(f"{r['gib']:<4g} {r['build_s']:>7} {r['first_start_s']:>14} {r['acked']:>6} "
              f"{r['namesrv_first_answer_s']!s:>16} {r['namesrv_slowest_answer_s']:>18} {r['namesrv_unanswered']:>11} "
              f"{r['store_recovery_s']!s:>17} {r['first_send_s']:>13} {r['load_avg']:>5}")


if __name__ == "__main__":
    main()
