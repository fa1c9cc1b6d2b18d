"""Measurement primitives: message meters, latency samples and percentiles, process CPU and memory probes.

Hot paths only append a float or bump a counter; percentiles and /proc reads happen outside timed loops.
"""

from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass, field

_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Meter:
    """Counts messages and bytes as they complete; read by the progress display."""

    total: int = 0
    count: int = 0
    bytes: int = 0
    errors: int = 0


@dataclass(slots=True)
class Latencies:
    """Latency samples in seconds."""

    samples: list[float] = field(default_factory=list)

    def percentiles_ms(self) -> dict[str, float | None]:
        return percentiles_ms(self.samples)


def percentiles_ms(samples: list[float]) -> dict[str, float | None]:
    """p50/p99/p999 (nearest-rank) in milliseconds; None when there are no samples."""
    if not samples:
        return {"p50": None, "p99": None, "p999": None}
    ordered = sorted(samples)
    n = len(ordered)

    def rank(p: float) -> float:
        return ordered[min(n - 1, max(0, math.ceil(p * n) - 1))] * 1000.0

    return {"p50": rank(0.50), "p99": rank(0.99), "p999": rank(0.999)}


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc/<pid>/stat (fields 14 and 15), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read().decode()
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rindex(")") + 2:].split()
    utime, stime = int(rest[11]), int(rest[12])
    return (utime + stime) / _CLK_TCK


def self_cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this (load generator) process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def proc_memory_kib(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and RssShmem of a process from /proc/<pid>/status, in KiB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def find_server_pid(names: tuple[str, ...]) -> int | None:
    """Pid of the first running process whose name is one of `names` (e.g. beam.smp, nats-server)."""
    import psutil

    best: tuple[float, int] | None = None
    for proc in psutil.process_iter(["name", "create_time"]):
        if proc.info["name"] in names:
            # The oldest match is the server; helpers spawned later share no names we look for.
            key = (proc.info["create_time"] or 0.0, proc.pid)
            if best is None or key < best:
                best = key
    return best[1] if best else None


class CpuWindow:
    """CPU seconds used by the server process (and by this process) between start() and stop()."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._server0 = 0.0
        self._self0 = 0.0
        self.server_s: float | None = None
        self.client_s: float = 0.0

    def start(self) -> CpuWindow:
        if self.pid is not None:
            self._server0 = proc_cpu_seconds(self.pid)
        self._self0 = self_cpu_seconds()
        return self

    def stop(self) -> None:
        if self.pid is not None:
            try:
                self.server_s = proc_cpu_seconds(self.pid) - self._server0
            except OSError:
                self.server_s = None
        self.client_s = self_cpu_seconds() - self._self0
