"""Load shapes shared by every driver: closed-loop concurrent sends, batched sends, draining, paced sends.

Each shape drives a Driver (bench/drivers) and returns a PhaseResult; it never knows which system it talks to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from time import perf_counter

from bench.drivers import Driver
from bench.metrics import CpuWindow, Latencies, Meter

MAX_ERRORS = 100  # a phase aborts after this many failed sends
SEND_TIMEOUT_S = 30.0


@dataclass
class PhaseResult:
    name: str
    messages: int
    bytes: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    server_cpu_s: float | None
    client_cpu_s: float
    errors: int = 0
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


class PhaseAborted(Exception):
    """Too many errors, or no progress for too long."""


def _result(name: str, meter: Meter, seconds: float, lat: Latencies, cpu: CpuWindow, note: str = "") -> PhaseResult:
    pct = lat.percentiles_ms()
    seconds = max(seconds, 1e-9)
    return PhaseResult(
        name=name, messages=meter.count, bytes=meter.bytes, seconds=round(seconds, 3),
        msgs_per_s=meter.count / seconds, mb_per_s=meter.bytes / seconds / 1e6,
        p50_ms=pct["p50"], p99_ms=pct["p99"], p999_ms=pct["p999"],
        server_cpu_s=cpu.server_s, client_cpu_s=cpu.client_s, errors=meter.errors, note=note,
    )


async def _timed(coro: Awaitable[object]) -> None:
    await asyncio.wait_for(coro, SEND_TIMEOUT_S)


def _record_error(meter: Meter, exc: BaseException, errors: list[str]) -> None:
    meter.errors += 1
    if len(errors) < 3:
        errors.append(f"{type(exc).__name__}: {exc}")
    if meter.errors >= MAX_ERRORS:
        raise PhaseAborted(f"{meter.errors} send errors, first: {'; '.join(errors)}") from exc


async def closed_loop_send(name: str, driver: Driver, count: int, concurrency: int, body: bytes,
                           meter: Meter, auto_batch: bool = False, with_id: bool = False) -> PhaseResult:
    """`concurrency` senders, each waiting for the broker's ack before sending its next message (through the
    driver's auto-batching client when `auto_batch`; each with a unique id the server de-duplicates by when
    `with_id`)."""
    send = driver.send_auto if auto_batch else driver.send_with_id if with_id else driver.send
    size = len(body)
    lat = Latencies()
    samples = lat.samples
    remaining = count
    errors: list[str] = []
    meter.total = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            t0 = perf_counter()
            try:
                await _timed(send(body))
            except (PhaseAborted, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - counted and reported
                _record_error(meter, exc, errors)
                continue
            samples.append(perf_counter() - t0)
            meter.count += 1
            meter.bytes += size

    cpu = CpuWindow(driver.server_pid()).start()
    t_start = perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = perf_counter() - t_start
    cpu.stop()
    return _result(name, meter, elapsed, lat, cpu, "; ".join(errors))


async def batch_send(name: str, driver: Driver, count: int, batch_size: int, concurrency: int, body: bytes,
                     meter: Meter) -> PhaseResult:
    """`concurrency` senders each sending batches of `batch_size`; latency is per batch."""
    lat = Latencies()
    remaining = count
    errors: list[str] = []
    meter.total = count
    size = len(body)

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            n = min(batch_size, remaining)
            remaining -= n
            t0 = perf_counter()
            try:
                await _timed(driver.send_batch([body] * n))
            except (PhaseAborted, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - counted and reported
                _record_error(meter, exc, errors)
                continue
            lat.samples.append(perf_counter() - t0)
            meter.count += n
            meter.bytes += n * size

    cpu = CpuWindow(driver.server_pid()).start()
    t_start = perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = perf_counter() - t_start
    cpu.stop()
    return _result(name, meter, elapsed, lat, cpu, "; ".join(errors))


async def drain(name: str, driver: Driver, count: int, meter: Meter, idle_timeout_s: float = 30.0) -> PhaseResult:
    """Consume `count` messages from the beginning of the destination as fast as the driver can."""
    meter.total = count
    cpu = CpuWindow(driver.server_pid()).start()
    t_start = perf_counter()
    task = asyncio.ensure_future(driver.consume(count, meter))
    note = ""
    last, last_change = 0, perf_counter()
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            if meter.count != last:
                last, last_change = meter.count, perf_counter()
            elif perf_counter() - last_change > idle_timeout_s:
                note = f"stopped: no message for {idle_timeout_s:.0f} s after {meter.count}"
                break
        elapsed = perf_counter() - t_start
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    cpu.stop()
    if task.done() and not task.cancelled() and task.exception() is not None:
        note = f"{type(task.exception()).__name__}: {task.exception()}"
    return _result(name, meter, elapsed, Latencies(), cpu, note)


async def paced_send(name: str, driver: Driver, rate: float, seconds: float, body: bytes, meter: Meter,
                     max_in_flight: int = 10_000) -> PhaseResult:
    """Open-loop sends at a fixed rate; latency counts from each message's scheduled time (no coordinated
    omission: a slow ack never delays the next send)."""
    count = max(1, int(rate * seconds))
    meter.total = count
    interval = 1.0 / rate
    lat = Latencies()
    errors: list[str] = []
    in_flight: set[asyncio.Task[None]] = set()
    size = len(body)
    skipped = 0

    async def one(due: float) -> None:
        try:
            await _timed(driver.send(body))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - counted and reported
            meter.errors += 1
            if len(errors) < 3:
                errors.append(f"{type(exc).__name__}: {exc}")
            return
        lat.samples.append(perf_counter() - due)
        meter.count += 1
        meter.bytes += size

    cpu = CpuWindow(driver.server_pid()).start()
    t_start = perf_counter() + 0.01
    for i in range(count):
        due = t_start + i * interval
        delay = due - perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(in_flight) >= max_in_flight or meter.errors >= MAX_ERRORS:
            skipped += 1
            continue
        task = asyncio.create_task(one(due))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)
    elapsed = perf_counter() - t_start
    cpu.stop()
    note = "; ".join(errors)
    if skipped:
        note = f"{skipped} sends skipped (in-flight cap or errors); " + note
    return _result(name, meter, elapsed, lat, cpu, note)


ProgressFactory = Callable[[str, int], Meter]
