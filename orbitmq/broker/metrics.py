"""Broker Prometheus metrics (metricsExporterType=PROM): RocketMQ 5's names and labels, plus OrbitMQ's own.

Hot paths keep plain ints (stats.BrokerStats per topic, group_stats.GroupGetStats per group, RpcTimer's int
histograms); this module turns them into metric families at scrape time, on the broker's loop (base/prom.py).
Gauges (lag, in-flight, storage, replication) are computed at scrape time. Every labelled family is capped at
MAX_SERIES series; a cut is counted in orbitmq_limits_hit_total{limit="metricsSeries"}. docs/operations.md lists
every metric.
"""

from __future__ import annotations

import inspect
import os
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from orbitmq.base.prom import Histogram, PromExporter, gauge, histogram_family, start_exporter, stop_exporter
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.metadata.groups import SYS_CONSUMER_GROUP_PREFIX
from orbitmq.broker.stats import OTHER_TOPIC
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.protocol.frame import EncodedResponse

MAX_SERIES = 10_000  # per labelled family; the rest of a scrape's rows are dropped (and counted)
MAX_TIMESTAMP_READS = 20_000  # store timestamp lookups per scrape for the latency gauges (one CQ + record read each)
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
# rocketmq_rpc_latency buckets (ms), as RocketMQ 5's RemotingMetricsManager view
RPC_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
_RPC_BUCKETS_NS = tuple(ms * 1_000_000 for ms in RPC_BUCKETS_MS)

_REQUEST_NAMES = {int(c): c.name.lower() for c in RequestCode}
_RESPONSE_NAMES = {int(c): c.name.lower() for c in ResponseCode}


class RpcTimer:
    """The broker's request handler when metrics are on: the router, with each answer's latency counted per
    (request code, response code) in an int histogram. Answers the handler sends later itself (a SYNC_FLUSH send
    answered by the group commit, a long-polling pull held) are not timed."""

    __slots__ = ("_inner", "table", "_now")

    def __init__(self, inner: Callable[[Any, RemotingCommand], Any],
                 table: dict[tuple[int, int], Histogram] | None = None) -> None:
        self._inner = inner
        self.table: dict[tuple[int, int], Histogram] = {} if table is None else table
        self._now = time.perf_counter_ns

    def __call__(self, conn: Any, cmd: RemotingCommand) -> Any:
        now = self._now
        t0 = now()
        r = self._inner(conn, cmd)
        if type(r) is RemotingCommand or type(r) is EncodedResponse:  # the common cases, inlined: ~0.5 us
            elapsed = now() - t0
            h = self.table.get((cmd.code, r.code))
            if h is None:
                self._record(cmd.code, r.code, elapsed)
            else:
                h.counts[bisect_left(h.bounds, elapsed)] += 1
                h.total += elapsed
        elif r is not None and inspect.isawaitable(r):
            return self._timed(r, cmd.code, t0)
        return r

    def many(self, conn: Any, cmds: list[RemotingCommand]) -> list[Any]:
        """The requests of one read through the inner handler's `many` (Router.many: the sends among them stored
        together). Every answer returned at once is counted with the latency of the whole call, which is when it
        was ready; awaitables are timed as __call__ times them."""
        inner_many = getattr(self._inner, "many", None)
        if inner_many is None:
            out: list[Any] = []
            for cmd in cmds:
                try:
                    out.append(self(conn, cmd))
                except Exception as e:
                    out.append(e)
            return out
        t0 = self._now()
        results = inner_many(conn, cmds)
        elapsed = self._now() - t0
        for i, (cmd, r) in enumerate(zip(cmds, results, strict=True)):
            if type(r) is RemotingCommand or type(r) is EncodedResponse:
                self._record(cmd.code, r.code, elapsed)
            elif r is not None and not isinstance(r, Exception) and inspect.isawaitable(r):
                results[i] = self._timed(r, cmd.code, t0)
        return results

    async def _timed(self, r: Awaitable[Any], code: int, t0: int) -> Any:
        resp = await r
        if isinstance(resp, RemotingCommand):
            self._record(code, resp.code, self._now() - t0)
        return resp

    def _record(self, code: int, resp_code: int, elapsed_ns: int) -> None:
        key = (code, resp_code)
        h = self.table.get(key)
        if h is None:
            if len(self.table) >= MAX_SERIES:
                return
            h = self.table[key] = Histogram(_RPC_BUCKETS_NS)
        h.observe(elapsed_ns)


def is_system(topic: str, group: str, ctx: BrokerContext) -> str:
    """RocketMQ's is_system label: a system topic or a CID_RMQ_SYS_ group."""
    return "true" if ctx.topics.is_system_topic(topic) or group.upper().startswith(SYS_CONSUMER_GROUP_PREFIX) \
        else "false"


def _is_retry(topic: str) -> str:
    return "true" if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX) else "false"


def _split_offset_key(key: str) -> tuple[str, str] | None:
    topic, sep, group = key.partition("@")
    return (topic, group) if sep else None


class BrokerMetrics:
    """Owns the exporter and the RPC timer of one broker; snapshot() builds every family."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.ctx: BrokerContext | None = None
        self.rpc_table: dict[tuple[int, int], Histogram] = {}  # shared by the timers of both ports
        self.exporter: PromExporter | None = None
        # the GET_BROKER_RUNTIME_INFO handler (classic, HA or controller mode; set by app.py once wired)
        self.runtime_handler: Callable[[Any, RemotingCommand], Any] | None = None

    def wrap(self, router: Callable[[Any, RemotingCommand], Any]) -> RpcTimer:
        """The handler to give a remoting server (main or VIP port): `router`, timed."""
        return RpcTimer(router, self.rpc_table)

    async def start(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.exporter = await start_exporter(self.host, self.port, self.snapshot, "metricsPromExporterPort")

    async def stop(self) -> None:
        await stop_exporter(self.exporter)
        self.exporter = None

    # ---- scrape ------------------------------------------------------------------------------------------------
    def snapshot(self) -> list[Metric]:
        ctx = self.ctx
        assert ctx is not None
        cfg = ctx.config
        common = (cfg.broker_cluster_name, "broker", cfg.broker_name)
        fams = _Families(common, ctx.stats.limit_hit)
        self._traffic(ctx, fams)
        self._consumers(ctx, fams)
        self._connections(ctx, fams)
        self._rpc(fams)
        runtime = self._runtime_table()
        self._storage(ctx, fams, runtime)
        self._ours(ctx, fams, runtime)
        # limits last: the caps hit while building this scrape are in it
        fams.counter("orbitmq_limits_hit_total", "Requests or tables that hit an OrbitMQ bound, by bound",
                     ("limit",), (((k,), v) for k, v in sorted(ctx.stats.limits_hit.items())))
        return fams.out

    def _traffic(self, ctx: BrokerContext, fams: _Families) -> None:
        stats = ctx.stats
        rows_in: list[tuple[tuple[str, str, str], list[int]]] = []
        for topic, tot in stats.topic_in.items():
            rows_in.append(((topic, "normal", "false" if topic == OTHER_TOPIC else is_system(topic, "", ctx)), tot))
        for (topic, mtype), tot in stats.special_in.items():
            rows_in.append(((topic, mtype, is_system(topic, "", ctx)), tot))
        labels_in = ("topic", "message_type", "is_system")
        fams.counter("rocketmq_messages_in_total", "Messages stored by sends, per topic", labels_in,
                     ((k, t[0]) for k, t in rows_in))
        fams.counter("rocketmq_throughput_in_total", "Bytes stored by sends, per topic", labels_in,
                     ((k, t[1]) for k, t in rows_in))
        rows_out = [((topic, group, _is_retry(topic), is_system(topic, group, ctx)), tot)
                    for (group, topic), tot in ctx.group_stats.out.items()]
        labels_out = ("topic", "consumer_group", "is_retry", "is_system")
        fams.counter("rocketmq_messages_out_total", "Messages pulled by consumers, per topic and group", labels_out,
                     ((k, t[0]) for k, t in rows_out))
        fams.counter("rocketmq_throughput_out_total", "Bytes pulled by consumers, per topic and group", labels_out,
                     ((k, t[1]) for k, t in rows_out))
        fams.counter("rocketmq_send_to_dlq_messages_total", "Messages moved to the group's DLQ (retries used up)",
                     ("topic", "consumer_group", "is_retry", "is_system"),
                     (((topic, group, _is_retry(topic), is_system(topic, group, ctx)), n)
                      for (topic, group), n in stats.dlq.items()))

    def _consumers(self, ctx: BrokerContext, fams: _Families) -> None:
        """Lag as consumerProgress computes it (sum over the topic's read queues of broker max offset - committed
        offset), in-flight (pulled - committed) and ready (max - max(pulled, committed)) per (topic, group)."""
        store = ctx.store
        pulled = ctx.group_stats.pulled
        lag_rows: list[tuple[tuple[str, ...], float]] = []
        inflight_rows: list[tuple[tuple[str, ...], float]] = []
        ready_rows: list[tuple[tuple[str, ...], float]] = []
        lag_ms_rows: list[tuple[tuple[str, ...], float]] = []
        queueing_ms_rows: list[tuple[tuple[str, ...], float]] = []
        now = int(time.time() * 1000)
        reads = 0  # store timestamp lookups this scrape (bounded: MAX_TIMESTAMP_READS)
        for key, queues in ctx.offsets.table().items():
            split = _split_offset_key(key)
            if split is None:
                continue
            topic, group = split
            tc = ctx.topics.get(topic)
            if tc is None:
                continue
            lag = inflight = ready = 0
            oldest_unacked = oldest_ready = 0  # store timestamps (ms) of the first uncommitted / unpulled message
            for qid in range(tc.read_queue_nums):
                broker_offset = max(0, store.get_max_offset_in_queue(topic, qid))
                committed = max(0, queues.get(qid, -1))
                lag += broker_offset - committed
                got = max(pulled.get((group, topic, qid), committed), committed)
                inflight += got - committed
                ready += max(0, broker_offset - got)
                if broker_offset <= committed or reads >= MAX_TIMESTAMP_READS:
                    continue
                reads += 1
                ts = store.get_message_store_timestamp(topic, qid, committed)
                if ts > 0 and (not oldest_unacked or ts < oldest_unacked):
                    oldest_unacked = ts
                if broker_offset <= got:
                    continue  # everything stored was pulled: nothing queueing here
                if got != committed:
                    if reads >= MAX_TIMESTAMP_READS:
                        continue
                    reads += 1
                    ts = store.get_message_store_timestamp(topic, qid, got)
                if ts > 0 and (not oldest_ready or ts < oldest_ready):
                    oldest_ready = ts
            labels = (topic, group, _is_retry(topic), is_system(topic, group, ctx))
            lag_rows.append((labels, lag))
            inflight_rows.append((labels, inflight))
            ready_rows.append((labels, ready))
            lag_ms_rows.append((labels, max(0, now - oldest_unacked) if oldest_unacked else 0))
            queueing_ms_rows.append((labels, max(0, now - oldest_ready) if oldest_ready else 0))
        if reads >= MAX_TIMESTAMP_READS:
            ctx.stats.limit_hit("metricsTimestampReads")
        names = ("topic", "consumer_group", "is_retry", "is_system")
        fams.gauge("rocketmq_consumer_lag_messages", "Messages stored but not yet committed by the group", names,
                   lag_rows)
        fams.gauge("rocketmq_consumer_inflight_messages", "Messages pulled but not yet committed by the group",
                   names, inflight_rows)
        fams.gauge("rocketmq_consumer_ready_messages", "Messages stored and not yet pulled by the group", names,
                   ready_rows)
        fams.gauge("rocketmq_consumer_lag_latency", "Milliseconds since the oldest uncommitted message was stored",
                   names, lag_ms_rows)
        fams.gauge("rocketmq_consumer_queueing_latency", "Milliseconds since the oldest not yet pulled message was "
                   "stored", names, queueing_ms_rows)

    def _connections(self, ctx: BrokerContext, fams: _Families) -> None:
        clients = ctx.clients
        prod: dict[tuple[str, str], int] = {}
        for group in clients.producer_groups():
            for ch in clients.producer_group(group).values():
                k = (ch.language, str(ch.version))
                prod[k] = prod.get(k, 0) + 1
        fams.gauge("rocketmq_producer_connections", "Producer connections", ("language", "version"),
                   sorted(prod.items()))
        cons: dict[tuple[str, str, str, str], int] = {}
        for group in clients.consumer_groups():
            info = clients.consumer_group(group)
            if info is None:
                continue
            mode = "push" if info.consume_type == "CONSUME_PASSIVELY" else "pull"
            for ch in info.channels.values():
                k = (group, ch.language, str(ch.version), mode)
                cons[k] = cons.get(k, 0) + 1
        fams.gauge("rocketmq_consumer_connections", "Consumer connections",
                   ("consumer_group", "language", "version", "consume_mode"), sorted(cons.items()))

    def _rpc(self, fams: _Families) -> None:
        table = self.rpc_table
        items = [(("remoting", _REQUEST_NAMES.get(code, str(code)), _RESPONSE_NAMES.get(rc, str(rc)), "false"), h)
                 for (code, rc), h in sorted(table.items())]
        fams.histogram("rocketmq_rpc_latency", "Request handling latency in milliseconds",
                       ("protocol_type", "request_code", "response_code", "is_long_polling"), items)

    def _runtime_table(self) -> dict[str, str]:
        """The GET_BROKER_RUNTIME_INFO table, from the handler registered for it (classic, HA or controller mode):
        role, epoch, SyncStateSet, replication lag and acting master come from the same place as mqadmin's."""
        handler = self.runtime_handler
        if handler is None:
            return {}
        resp = handler(None, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        if not isinstance(resp, RemotingCommand) or resp.code != ResponseCode.SUCCESS or not resp.body:
            return {}
        return dict(KVTable.from_json(resp.body).table)

    def _storage(self, ctx: BrokerContext, fams: _Families, runtime: dict[str, str]) -> None:
        store = ctx.store
        root = store.config.store_path_root_dir
        labels = ("storage_type", "storage_medium")
        local = ("local", "disk")
        fams.gauge("rocketmq_storage_size", "Bytes of the store's files on disk", labels,
                   [(local, _dir_size(root))])
        fams.gauge("rocketmq_storage_flush_behind_bytes", "CommitLog bytes written but not yet flushed", labels,
                   [(local, max(0, store.max_phys_offset - store.flushed_offset))])
        # records are dispatched (made visible in their queues) up to the confirm offset
        fams.gauge("rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not yet dispatched to the queues",
                   labels, [(local, max(0, store.max_phys_offset - store.confirm_offset))])
        earliest = _int(runtime.get("earliestMessageTimeStamp"), -1)
        reserve = max(0, int(time.time() * 1000) - earliest) if earliest > 0 else 0
        fams.gauge("rocketmq_storage_message_reserve_time", "Milliseconds since the oldest stored message",
                   labels, [(local, reserve)])
        fams.gauge("orbitmq_storage_disk_ratio", "Used fraction of the CommitLog's disk partition (-1: unknown)",
                   (), [((), float(runtime.get("commitLogDiskRatio", "-1")))])

    def _ours(self, ctx: BrokerContext, fams: _Families, runtime: dict[str, str]) -> None:
        cfg = ctx.config
        role = runtime.get("brokerRole", cfg.broker_role)
        fams.gauge("rocketmq_broker_permission", "Broker permission bits (4 read, 2 write)", (),
                   [((), cfg.broker_permission)])
        fams.gauge("orbitmq_role", "1 for the broker's current role", ("role",), [((role,), 1)])
        fams.gauge("orbitmq_broker_id", "The broker's current brokerId", (),
                   [((), _int(runtime.get("brokerId"), cfg.broker_id))])
        fams.gauge("orbitmq_epoch", "Master epoch of the broker's CommitLog", (),
                   [((), _int(runtime.get("masterEpoch"), ctx.store.master_epoch))])
        sss = runtime.get("syncStateSet")
        if sss is not None:
            fams.gauge("orbitmq_sync_state_set_size", "Brokers in the SyncStateSet (controller mode)", (),
                       [((), len([x for x in sss.split(",") if x]))])
        fams.gauge("orbitmq_acting_master", "1 while this slave acts as its group's master (RIP-32)", (),
                   [((), 1 if ctx.acting_master else 0)])
        lags = [((k[len("haSlaveLag["):-1],), float(v)) for k, v in runtime.items()
                if k.startswith("haSlaveLag[") and k.endswith("]") and _int(v, -1) >= 0]
        fams.gauge("orbitmq_replication_lag_bytes", "Master: CommitLog bytes each slave has not acknowledged yet",
                   ("slave",), lags)
        fams.gauge("orbitmq_ha_connected_slaves", "Slaves connected to this master's HA port", (),
                   [((), _int(runtime.get("haConnectedSlaves"), 0))])
        fams.counter("orbitmq_dedup_hits_total", "Sends answered from the de-duplication table (not stored again)",
                     (), [((), ctx.stats.counters.get("dedupHits", 0))])


class _Families:
    """Builds families with the common labels (cluster, node_type, node_id) first, capping each at MAX_SERIES."""

    def __init__(self, common: tuple[str, str, str], limit_hit: Callable[[str], None]) -> None:
        self.common = common
        self.out: list[Metric] = []
        self._limit_hit = limit_hit

    def _capped(self, rows: Iterable[tuple[Sequence[str], Any]]) -> Iterator[tuple[list[str], Any]]:
        for n, (values, v) in enumerate(rows):
            if n >= MAX_SERIES:
                self._limit_hit("metricsSeries")
                return
            yield [*self.common, *values], v

    def counter(self, name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], Any]]) -> None:
        fam = CounterMetricFamily(name, doc, labels=["cluster", "node_type", "node_id", *labels])
        for values, v in self._capped(rows):
            fam.add_metric(values, v)
        self.out.append(fam)

    def gauge(self, name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], Any]]) -> None:
        fam: GaugeMetricFamily = gauge(name, doc, ["cluster", "node_type", "node_id", *labels],
                                       self._capped(rows))
        self.out.append(fam)

    def histogram(self, name: str, doc: str, labels: Sequence[str],
                  items: Iterable[tuple[Sequence[str], Histogram]]) -> None:
        self.out.append(histogram_family(name, doc, ["cluster", "node_type", "node_id", *labels],
                                         self._capped(items), unit_bounds=RPC_BUCKETS_MS, scale=1e-6))


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _dir_size(root: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total

