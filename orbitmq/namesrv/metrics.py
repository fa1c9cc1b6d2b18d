"""Name server Prometheus metrics (metricsExporterType=PROM in namesrv.conf): routes and brokers, read from the
route table at scrape time on the name server's loop (base/prom.py). Labels cluster/node_type/node_id as RocketMQ
5 (node_type "nameserver", node_id the listen address)."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from orbitmq.base.prom import PromExporter, start_exporter, stop_exporter
from orbitmq.namesrv.route_table import RouteTable


class NamesrvMetrics:
    def __init__(self, table: RouteTable, host: str, port: int, node_id: str) -> None:
        self.table = table
        self.host = host
        self.port = port
        self.node_id = node_id
        self.exporter: PromExporter | None = None

    async def start(self) -> None:
        self.exporter = await start_exporter(self.host, self.port, self.snapshot, "namesrv metricsPromExporterPort")

    async def stop(self) -> None:
        await stop_exporter(self.exporter)
        self.exporter = None

    def snapshot(self) -> list[Metric]:
        common = ["node_type", "node_id"]
        node = ["nameserver", self.node_id]
        groups, clusters = self.table.cluster_info()
        live = self.table.live_brokers()
        out: list[Metric] = []
        brokers = GaugeMetricFamily("orbitmq_namesrv_brokers", "Live broker addresses registered", labels=common)
        brokers.add_metric(node, len(live))
        out.append(brokers)
        topics = GaugeMetricFamily("orbitmq_namesrv_topics", "Topics with a route", labels=common)
        topics.add_metric(node, len(self.table.topics()))
        out.append(topics)
        per_cluster = GaugeMetricFamily("orbitmq_namesrv_broker_groups", "Broker groups (brokerName) per cluster",
                                        labels=[*common, "cluster"])
        masters = GaugeMetricFamily("orbitmq_namesrv_masters", "Broker groups with a registered master (brokerId 0)",
                                    labels=[*common, "cluster"])
        for cluster, names in sorted(clusters.items()):
            per_cluster.add_metric([*node, cluster], len(names))
            masters.add_metric([*node, cluster],
                               sum(1 for n in names if n in groups and groups[n].master_addr() is not None))
        out += [per_cluster, masters]
        return out
