"""Prometheus exposition plumbing shared by the broker, the name server and the controller.

prometheus-client serves `/metrics` from its own HTTP server thread. The numbers live in the process's asyncio
loop (plain ints and dicts, never locked), so a scrape does not read them from that thread: `LoopCollector` runs
the process's snapshot function *on the loop* (call_soon_threadsafe) and hands the metric families it built back
to the exposition thread. Nothing here runs per message; the hot paths keep plain counters (and `Histogram`
below, an int histogram without labels or locks) that the snapshot reads.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from orbitmq.base.errors import ConfigError

log = logging.getLogger("orbitmq.metrics")

DEFAULT_PROM_PORT = 5557  # RocketMQ's metricsPromExporterPort default
EXPORTER_TYPES = ("DISABLE", "PROM")  # metricsExporterType values we act on (OTLP_GRPC and LOG are refused)
SCRAPE_TIMEOUT_S = 10.0

Snapshot = Callable[[], Iterable[Metric]]


def check_exporter_config(exporter_type: str, port: int, key_prefix: str = "") -> None:
    """ConfigError (one line) for an exporter type we do not have or a port out of range."""
    if exporter_type.upper() not in EXPORTER_TYPES:
        raise ConfigError(f"{key_prefix}metricsExporterType: {exporter_type!r} is not one of "
                          f"{', '.join(EXPORTER_TYPES)} (OTLP_GRPC and LOG exporters are not supported)")
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key_prefix}metricsPromExporterPort: {port} is not a valid TCP port")


def prom_enabled(exporter_type: str) -> bool:
    return exporter_type.upper() == "PROM"


class LoopCollector(Collector):
    """A Collector whose collect() runs `snapshot` on `loop` and yields what it returned."""

    def __init__(self, loop: asyncio.AbstractEventLoop, snapshot: Snapshot,
                 timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
        self._loop = loop
        self._snapshot = snapshot
        self._timeout_s = timeout_s

    def describe(self) -> list[Metric]:
        return []  # families are dynamic; registering must not run a scrape

    def collect(self) -> Iterator[Metric]:
        fut: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(list(self._snapshot()))
            except BaseException as e:  # noqa: BLE001 - handed to the scraping thread, which re-raises
                fut.set_exception(e)

        self._loop.call_soon_threadsafe(run)
        try:
            families = fut.result(self._timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise RuntimeError(f"metrics snapshot did not run within {self._timeout_s:.0f} s "
                               "(event loop busy or stopped)") from None
        yield from families


class PromExporter:
    """prometheus-client's HTTP server on host:port for one registry holding one LoopCollector."""

    def __init__(self, host: str, port: int, collector: Collector, what: str = "metricsPromExporterPort") -> None:
        self.host = host
        self.requested_port = port
        self._collector = collector
        self._what = what
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_port) if self._server is not None else self.requested_port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> None:
        """Bind and serve. ConfigError (one line) when the address cannot be bound (port in use, bad host)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._collector)
        try:
            self._server, self._thread = start_http_server(self.requested_port, addr=self.host or "0.0.0.0",
                                                           registry=registry)
        except OSError as e:
            reason = e.strerror or str(e)
            raise ConfigError(f"{self._what}: cannot serve Prometheus metrics on {self.host or '0.0.0.0'}:"
                              f"{self.requested_port}: {reason}") from None
        log.info("Prometheus metrics on %s", self.url)

    def stop(self) -> None:
        """Stop serving (blocks up to the server's poll interval: call it from a thread in async code)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


async def start_exporter(host: str, port: int, snapshot: Snapshot, what: str) -> PromExporter:
    """A started PromExporter whose scrapes run `snapshot` on the running loop."""
    exporter = PromExporter(host, port, LoopCollector(asyncio.get_running_loop(), snapshot), what)
    exporter.start()
    return exporter


async def stop_exporter(exporter: PromExporter | None) -> None:
    if exporter is not None:
        await asyncio.to_thread(exporter.stop)


# ---- plain-int histograms ----------------------------------------------------------------------------------------
class Histogram:
    """Counts per bucket with inclusive upper bounds (`le`), plus the sum: observe() is a bisect and three adds."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[int]) -> None:
        self.bounds = bounds  # ascending; observations above the last one go to +Inf
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0

    def observe(self, value: int) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


def histogram_family(name: str, doc: str, labels: Sequence[str],
                     items: Iterable[tuple[Sequence[str], Histogram]], scale: float = 1.0,
                     unit_bounds: Sequence[float] | None = None) -> HistogramMetricFamily:
    """A HistogramMetricFamily from (label values, Histogram) pairs; bounds and sums are multiplied by `scale`
    (e.g. ns -> ms), or the bucket labels come from `unit_bounds` when given."""
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    for values, h in items:
        les = unit_bounds if unit_bounds is not None else [b * scale for b in h.bounds]
        cum = 0
        buckets: list[tuple[str, float]] = []
        for le, c in zip(les, h.counts, strict=False):
            cum += c
            buckets.append((_le_text(le), cum))
        cum += h.counts[-1]
        buckets.append(("+Inf", cum))
        fam.add_metric(list(values), buckets, h.total * scale)
    return fam


def _le_text(value: float) -> str:
    return floatToGoString(value)


def gauge(name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]
          ) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, v in rows:
        fam.add_metric(list(values), v)
    return fam
