"""Network limits on a real broker process: per-IP connection cap and frame deadline (refused / closed, counted in
orbitmq_limits_hit_total), and descriptor exhaustion on accept being transient (issue 12 item 2)."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import struct
import time
import urllib.request
from pathlib import Path

import pytest

from orbitmq.client import Producer, SendStatus
from orbitmq.client.errors import NoRouteError
from orbitmq.model import Message
from orbitmq.testing.procs import LOCALHOST, Standalone, free_port
from orbitmq.testing.readback import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _closed_by_peer(s: socket.socket, timeout_s: float = 10.0) -> bool:
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _limit_hits(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    hits: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("orbitmq_limits_hit_total{"):
            labels, value = line.rsplit(" ", 1)
            name = labels.split('limit="', 1)[1].split('"', 1)[0]
            hits[name] = float(value)
    return hits


async def _send_and_read(sa: Standalone, topic: str, n: int) -> None:
    async with Producer("limits_p", namesrv=sa.namesrv_addr) as p:
        for i in range(n):
            r = await p.send(Message(topic, f"m{i}".encode(), {}))
            assert r.status == SendStatus.SEND_OK
    deadline = time.monotonic() + 30
    got = 0
    while True:
        try:  # an auto-created topic reaches the name server with the next registration
            got = sum(len(v) for v in (await read_topic(sa.namesrv_addr, topic)).values())
        except NoRouteError:
            got = 0
        if got >= n or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert got == n


def test_per_ip_cap_and_frame_deadline_on_a_broker_are_enforced_and_counted(tmp_path: Path) -> None:
    mport = free_port()
    sa = Standalone(tmp_path / "sa", serverMaxConnectionsPerIp=4, serverFrameDeadlineMs=600,
                    metricsExporterType="PROM", metricsPromExporterHost=LOCALHOST,
                    metricsPromExporterPort=mport).start()
    port = sa.broker_port
    held: list[socket.socket] = []
    try:
        refused = None
        for _ in range(6):  # four admitted (fewer if a registration check holds one), then refusals
            s = socket.create_connection((LOCALHOST, port), timeout=5)
            held.append(s)
            s.settimeout(0.3)
            try:
                if s.recv(1) == b"":
                    refused = s
                    break
            except TimeoutError:
                continue  # admitted: open and silent
            except ConnectionResetError:
                refused = s
                break
        assert refused is not None, "no connection refused past serverMaxConnectionsPerIp=4"
        for s in held:
            s.close()
        held.clear()
        # slowloris: a frame begun and trickled one byte per 100 ms is closed at its deadline
        s = socket.create_connection((LOCALHOST, port), timeout=5)
        held.append(s)
        start = time.monotonic()
        closed = False
        try:
            for b in struct.pack(">i", 200) + b"\x00" * 40:
                s.sendall(bytes([b]))
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        assert closed or _closed_by_peer(s, 10)
        assert time.monotonic() - start < 10
        s.close()
        held.clear()
        _wait(lambda: {"serverMaxConnectionsPerIp", "serverFrameDeadlineMs"} <= set(_limit_hits(mport)), 20,
              "both limits in orbitmq_limits_hit_total")
        asyncio.run(_send_and_read(sa, "LimitsOk", 5))  # ordinary traffic unaffected
    finally:
        for s in held:
            s.close()
        sa.close()


def test_descriptor_exhaustion_on_accept_is_transient(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa").start()
    pid = sa.proc.pid
    assert pid is not None
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    socks: list[socket.socket] = []
    try:
        asyncio.run(_send_and_read(sa, "FdBefore", 3))  # files of a topic and the producer path exist
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 20, old[1]))
        for _ in range(120):  # far more than the broker can accept now
            try:
                s = socket.create_connection((LOCALHOST, sa.broker_port), timeout=2)
            except OSError:
                break
            socks.append(s)
        _wait(lambda: len(os.listdir(f"/proc/{pid}/fd")) >= in_use + 15, 20, "the broker's descriptors exhausted")
        assert sa.proc.running
        for s in socks:
            s.close()
        socks.clear()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        _wait(lambda: len(os.listdir(f"/proc/{pid}/fd")) < in_use + 10, 30, "descriptors released")
        asyncio.run(_send_and_read(sa, "FdAfter", 5))  # accepting and storing work again
        assert sa.proc.running
    finally:
        for s in socks:
            s.close()
        if sa.proc.running:
            try:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
            except OSError:
                pass
        sa.close()
