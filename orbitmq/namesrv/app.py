"""NameServer: composition root of the name server (wiring and start/stop order only)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from orbitmq.acl.cluster import cluster_guarded
from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.prom import prom_enabled
from orbitmq.namesrv.config import NamesrvConfig
from orbitmq.namesrv.handlers import NamesrvHandlers
from orbitmq.namesrv.kv_config import KvConfig
from orbitmq.namesrv.liveness import BrokerLiveness
from orbitmq.namesrv.metrics import NamesrvMetrics
from orbitmq.namesrv.route_table import RouteTable
from orbitmq.remoting import Connection, RemotingServer
from orbitmq.remoting.limits import limits_of
from orbitmq.remoting.tls import server_config_of, server_context

log = logging.getLogger(__name__)


class NameServer:
    def __init__(self, config: NamesrvConfig, *, clock: Clock = REAL_CLOCK) -> None:
        config.validate()
        self.config = config
        self.table = RouteTable(
            config.broker_channel_expired_time_ms,
            delete_topic_with_broker_registration=config.delete_topic_with_broker_registration,
        )
        self.kv = KvConfig(config.kv_config_path)
        self.handlers = NamesrvHandlers(self.table, self.kv, config, clock)
        self.liveness = BrokerLiveness(self.table, config.scan_not_active_broker_interval_ms, clock,
                                       on_change=self.handlers.after_mutation)
        self.server = RemotingServer(
            cluster_guarded(self.handlers, config.cluster_secret), config.listen_host, config.listen_port,
            name="namesrv",
            on_close=self._on_connection_closed,
            idle_timeout_s=config.server_channel_max_idle_time_seconds,
            ssl_context=server_context(server_config_of(config)), tls_mode=config.tls_server_mode,
            limits=limits_of(config),
        )
        self.metrics: NamesrvMetrics | None = None  # metricsExporterType=PROM
        self._started = False
        self._close_listeners: list[Callable[[Connection], None]] = []

    def add_close_listener(self, cb: Callable[[Connection], None]) -> None:
        """Embedding hook: `cb` also learns of every closed connection (e.g. a controller in this process)."""
        self._close_listeners.append(cb)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        host = "127.0.0.1" if self.config.listen_host in ("0.0.0.0", "", "::") else self.config.listen_host
        return f"{host}:{self.port}"

    def _on_connection_closed(self, conn: Connection) -> None:
        self.handlers.forget_connection(conn)
        self.liveness.on_channel_closed(conn)
        for cb in self._close_listeners:
            cb(conn)

    async def start(self) -> None:
        """Load the KV table (ConfigError if corrupt), listen (ConfigError if the port is taken), scan."""
        self.kv.load()
        await self.server.start()
        cfg = self.config
        if prom_enabled(cfg.metrics_exporter_type):
            self.metrics = NamesrvMetrics(self.table, cfg.metrics_prom_exporter_host or cfg.listen_host,
                                          cfg.metrics_prom_exporter_port, self.addr)
            try:
                await self.metrics.start()
            except BaseException:
                await self.server.stop()
                raise
        self.liveness.start()
        self._started = True
        log.info("name server started on port %d (kv config %s)", self.port, self.config.kv_config_path)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.liveness.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        await self.server.stop()
        log.info("name server on port %d stopped", self.port)
