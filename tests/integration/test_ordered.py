"""Ordered consumption acceptance: 10,000 messages over 8 sharding keys (send_orderly), two orderly push consumers
(our SDK) in separate processes, one killed with kill -9 mid-way. Per key, the first-time deliveries are exactly
0..N-1 in order; the only other deliveries are redeliveries of already-consumed tail messages (at-least-once after
the crash / a rebalance), each redelivery run again in order."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orbitmq.client import Admin, Producer, SendStatus
from orbitmq.client.errors import TopicNotExistError
from orbitmq.model import Message
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC, GROUP = "OrderedT", "CG_ordered"
KEYS = [f"key{i}" for i in range(8)]
PER_KEY = 1250
HELPER = Path(__file__).with_name("ordered_consumer_helper.py")


def check_key_order(seqs: list[int], n: int, max_rewinds: int = 4) -> str | None:
    """None if `seqs` (one key's deliveries in time order) is 0..n-1 in order plus in-order redelivery runs of
    values already seen; else the reason."""
    max_seen = -1
    prev = -1
    rewinds = 0
    for i, s in enumerate(seqs):
        if s > max_seen:
            if s != max_seen + 1:
                return f"gap: {s} after max {max_seen} at #{i}"
            max_seen = s
        elif s != prev + 1:  # a redelivery run starts (or restarts) here
            rewinds += 1
            if rewinds > max_rewinds:
                return f"too many rewinds ({rewinds}) at #{i}: {s} after {prev}"
        prev = s
    if max_seen != n - 1:
        return f"incomplete: max {max_seen} of {n - 1}"
    return None


def test_check_key_order_rejects_bad_sequences() -> None:
    assert check_key_order([0, 1, 2, 3], 4) is None
    assert check_key_order([0, 1, 2, 1, 2, 3], 4) is None  # redelivery of the tail after a crash
    assert check_key_order([0, 2, 1, 3], 4) is not None  # out of order
    assert check_key_order([0, 1, 3], 4) is not None  # gap
    assert check_key_order([0, 1, 2], 4) is not None  # incomplete
    assert check_key_order([0, 1] * 6 + [2, 3], 4) is not None  # ping-pong between owners


class _Reader(threading.Thread):
    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        super().__init__(daemon=True, name=f"reader-{name}")
        self.proc = proc
        self.lines: list[tuple[int, str, int]] = []
        self.ready = threading.Event()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if parts == ["READY"]:
                self.ready.set()
            elif len(parts) == 3:
                self.lines.append((int(parts[0]), parts[1], int(parts[2])))


def _spawn(sa: Standalone, name: str, delay_ms: float, log_dir: Path) -> tuple[subprocess.Popen[str], _Reader]:
    err = open(log_dir / f"{name}.err", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, str(HELPER), sa.namesrv_addr, GROUP, TOPIC, name, str(delay_ms)],
                            stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    err.close()
    reader = _Reader(proc, name)
    reader.start()
    return proc, reader


async def _create_topic(sa: Standalone) -> None:
    async with Admin(sa.namesrv_addr) as admin:
        await admin.update_topic(TOPIC, broker_addr=sa.broker_addr, read_queue_nums=8, write_queue_nums=8)
        for _ in range(100):
            try:
                route = await admin.topic_route(TOPIC)
                if route.queue_datas and route.queue_datas[0].write_queue_nums == 8:
                    return
            except TopicNotExistError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("topic route never showed 8 queues")


async def _produce(sa: Standalone) -> None:
    async with Producer("PG_ordered", namesrv=sa.namesrv_addr) as p:
        async def one_key(key: str) -> None:
            for seq in range(PER_KEY):
                r = await p.send_orderly(Message(TOPIC, f"{key}:{seq}".encode(), {"k": key, "seq": str(seq)}), key)
                assert r.status == SendStatus.SEND_OK

        await asyncio.gather(*(one_key(k) for k in KEYS))


def test_ordered_two_consumers_one_killed(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa", rebalanceLockMaxLiveTime=5000).start()
    procs: list[subprocess.Popen[str]] = []
    try:
        asyncio.run(_create_topic(sa))
        pa, ra = _spawn(sa, "A", 2, tmp_path)
        procs.append(pa)
        assert ra.ready.wait(30), "consumer A did not start"
        pb, rb = _spawn(sa, "B", 2, tmp_path)
        procs.append(pb)
        assert rb.ready.wait(30), "consumer B did not start"
        killed = threading.Event()

        def killer() -> None:  # kill -9 B once it consumed a good share and ~1/3 of everything is consumed
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if len(rb.lines) >= 300 and len(ra.lines) + len(rb.lines) >= 3000:
                    pb.send_signal(signal.SIGKILL)
                    killed.set()
                    return
                time.sleep(0.005)

        threading.Thread(target=killer, daemon=True).start()
        asyncio.run(_produce(sa))
        assert killed.wait(30), f"B never got its share (A {len(ra.lines)}, B {len(rb.lines)})"
        pb.wait(10)
        want = {(k, s) for k in KEYS for s in range(PER_KEY)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if {(k, s) for _, k, s in list(ra.lines) + list(rb.lines)} >= want:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # late duplicates would show up now
        merged = sorted(list(ra.lines) + list(rb.lines))
        per_key: dict[str, list[int]] = {k: [] for k in KEYS}
        for _, k, s in merged:
            per_key[k].append(s)
        problems = {k: r for k, seqs in per_key.items() if (r := check_key_order(seqs, PER_KEY)) is not None}
        assert not problems, problems
        redelivered = len(merged) - len(want)
        assert redelivered < len(want) // 2, f"{redelivered} redeliveries"
        assert rb.lines and ra.lines
        assert any(t > max(t2 for t2, _, _ in rb.lines) for t, _, _ in ra.lines)  # A took over B's queues
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
        sa.close()
