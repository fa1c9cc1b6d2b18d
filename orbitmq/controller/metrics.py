"""Controller Prometheus metrics (metricsExporterType=PROM in controller.conf): Raft leadership and term, live
brokers, and per broker group the master, its epoch (one per master election), the SyncStateSet size and epoch,
read at scrape time on the controller's loop (base/prom.py). node_type "controller", node_id the self id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from orbitmq.base.prom import PromExporter, start_exporter, stop_exporter

if TYPE_CHECKING:
    from orbitmq.controller.service import ControllerService


class ControllerMetrics:
    def __init__(self, service: ControllerService, host: str, port: int) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.exporter: PromExporter | None = None

    async def start(self) -> None:
        self.exporter = await start_exporter(self.host, self.port, self.snapshot,
                                             "controller metricsPromExporterPort")

    async def stop(self) -> None:
        await stop_exporter(self.exporter)
        self.exporter = None

    def snapshot(self) -> list[Metric]:
        svc = self.service
        common = ["node_type", "node_id"]
        node = ["controller", svc.config.controller_dleger_self_id]
        out: list[Metric] = []

        def gauge(name: str, doc: str, v: float) -> None:
            fam = GaugeMetricFamily(name, doc, labels=common)
            fam.add_metric(node, v)
            out.append(fam)

        gauge("orbitmq_controller_is_leader", "1 while this controller leads and serves (its term's entry "
              "committed)", 1 if svc.is_serving else 0)
        gauge("orbitmq_controller_raft_term", "Current Raft term (one per controller election)", svc.driver.term)
        gauge("orbitmq_controller_active_brokers", "Brokers whose heartbeat is current", len(svc.live))
        leader = GaugeMetricFamily("orbitmq_controller_leader", "1 for the controller this node believes leads",
                                   labels=[*common, "leader_id"])
        leader.add_metric([*node, svc.leader_id], 1)
        out.append(leader)
        labels = [*common, "cluster", "broker_set"]
        master = GaugeMetricFamily("orbitmq_controller_master_broker_id",
                                   "brokerId of the group's master (-1: none)", labels=labels)
        epoch = CounterMetricFamily("orbitmq_controller_elections",
                                    "Master elections of the broker group (its master epoch)", labels=labels)
        sss = GaugeMetricFamily("orbitmq_sync_state_set_size", "Brokers in the group's SyncStateSet", labels=labels)
        sss_epoch = GaugeMetricFamily("orbitmq_sync_state_set_epoch", "SyncStateSet epoch of the group",
                                      labels=labels)
        for name, info in sorted(svc.state.sync_state_info.items()):
            values = [*node, info.cluster_name, name]
            master.add_metric(values, info.master_broker_id if info.master_broker_id is not None else -1)
            epoch.add_metric(values, info.master_epoch)
            sss.add_metric(values, len(info.sync_state_set))
            sss_epoch.add_metric(values, info.sync_state_set_epoch)
        out += [master, epoch, sss, sss_epoch]
        return out
