"""Broker: the composition root. Builds the store, metadata, client registry, handlers and the two remoting
servers (listenPort and the VIP port listenPort-2, which has no PULL_MESSAGE), and owns start/stop order and
the periodic tasks. No request logic lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from orbitmq.acl.admin import AclAdmin
from orbitmq.acl.cluster import cluster_signer
from orbitmq.acl.guard import AclGuard, resolve_acl_file
from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.errors import ConfigError
from orbitmq.base.prom import prom_enabled
from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.escape import EscapeBridge, RemotingEscapeTransport
from orbitmq.broker.handlers import consumer as consumer_handlers
from orbitmq.broker.handlers import heartbeat as heartbeat_handlers
from orbitmq.broker.handlers import pull as pull_handlers
from orbitmq.broker.handlers import send as send_handlers
from orbitmq.broker.handlers.guard import guarded
from orbitmq.broker.long_poll import HoldLimits
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.quota import AutoCreateQuota
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.metrics import BrokerMetrics
from orbitmq.broker.registration import BrokerRegistration
from orbitmq.broker.router import Router
from orbitmq.broker.services import BrokerService, ServiceEnv, create_services
from orbitmq.broker.stats import BrokerStats
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.remoting import RemotingClient, RemotingServer
from orbitmq.remoting.limits import ServerLimits
from orbitmq.remoting.tls import outgoing_context, server_config_of, server_context
from orbitmq.store import MessageStore, StoreConfig, StoreInUseError

log = logging.getLogger("orbitmq.broker")

CLIENT_SCAN_INTERVAL_MS = 10_000
LONG_POLL_CHECK_INTERVAL_MS = 5_000
ACL_RELOAD_INTERVAL_MS = 500


HANDLER_MODULES = ("offsets", "query", "admin", "admin_groups")  # besides send / pull / heartbeat / consumer imported above


def _handler_modules() -> list[Any]:
    """The other request-handler modules. One that fails to import stops start-up with a one-line ConfigError
    (the CLI prints it and exits 2): a broken module must not silently take its request codes with it."""
    mods: list[Any] = []
    for name in HANDLER_MODULES:
        path = f"orbitmq.broker.handlers.{name}"
        try:
            mods.append(importlib.import_module(path))
        except Exception as e:  # SyntaxError, ImportError, an error raised at import time...
            detail = " ".join(str(e).split())
            raise ConfigError(f"broker handler module {path} failed to import: {type(e).__name__}: {detail}") from e
    return mods


def _check_store_path(root: str) -> None:
    try:
        os.makedirs(root, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"store path {root} is not writable: {e.strerror or e}") from None


class Broker:
    def __init__(self, broker_config: BrokerConfig, store_config: StoreConfig, *, clock: Clock = REAL_CLOCK) -> None:
        broker_config.validate()
        store_config.validate()
        self.config = broker_config
        if store_config.message_delay_level != broker_config.message_delay_level:  # the store computes due times
            store_config = dataclasses.replace(store_config, message_delay_level=broker_config.message_delay_level)
        self.store_config = store_config
        self.clock = clock
        self.ctx: BrokerContext | None = None
        self.store: MessageStore | None = None
        self.server: RemotingServer | None = None
        self.vip_server: RemotingServer | None = None
        self.registration: BrokerRegistration | None = None
        self.pull: pull_handlers.PullProcessor | None = None
        self.notifier: heartbeat_handlers.ConsumerIdsNotifier | None = None
        self.task_failures: dict[str, int] = {}
        self._routers: list[Router] = []
        self.metrics: BrokerMetrics | None = None  # metricsExporterType=PROM (broker/metrics.py)
        self.services: list[BrokerService] = []
        self.service_env: ServiceEnv | None = None
        self._client: RemotingClient | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        self._offsets_write_lock = threading.Lock()  # periodic writer thread vs the final persist at stop
        self.acl: AclGuard | None = None  # aclEnable=true: checks every request (Router.check)
        # start-up progress, answered (with SERVICE_NOT_AVAILABLE) to GET_BROKER_RUNTIME_INFO until it accepts
        self.startup_phase = "init"  # init -> store (load and recovery) -> services -> ready
        self._loading_store: MessageStore | None = None

    # ----- properties -----
    @property
    def listen_port(self) -> int:
        return self.server.port if self.server is not None else self.config.listen_port

    @property
    def vip_port(self) -> int:
        return self.vip_server.port if self.vip_server is not None else self.config.vip_listen_port

    @property
    def addr(self) -> str:
        return f"{self.config.broker_ip1}:{self.listen_port}"

    # ----- wiring -----
    def _load_store(self) -> MessageStore:
        root = self.store_config.store_path_root_dir
        _check_store_path(root)
        store = MessageStore(self.store_config, clock=self.clock)
        self._loading_store = store  # its recovery progress is answered while it loads
        try:
            store.load()
        except StoreInUseError:
            raise ConfigError(f"store {root} is locked: another broker is using it") from None
        return store

    def _build(self, store: MessageStore) -> BrokerContext:
        """Metadata, registry, handlers; called once the listen ports are known (config is final)."""
        cfg = self.config
        config_dir = os.path.join(self.store_config.store_path_root_dir, "config")
        topics = TopicConfigManager(config_dir, cfg)
        groups = SubscriptionGroupManager(config_dir, cfg)
        offsets = ConsumerOffsetManager(config_dir)
        topics.load()
        groups.load()
        offsets.load()
        clients = ClientRegistry(cfg.client_channel_max_idle_time_seconds * 1000, self.clock.now_ms)
        ctx = BrokerContext(cfg, store, topics, groups, offsets, clients, BrokerStats(), cfg.broker_addr)
        topics.quota = groups.quota = AutoCreateQuota(lambda: ctx.config.auto_create_per_client_per_minute,
                                                      ctx.stats.limit_hit)
        self._client = RemotingClient(request_handler=self._on_outer_request, name="broker-outer",
                                      sign=cluster_signer(cfg.cluster_secret),
                                      ssl_context=outgoing_context(cfg))  # tlsEnable: name servers, brokers
        self.registration = BrokerRegistration(lambda: ctx.config, topics, self._client,
                                               lambda: _heartbeat_store_state(store))
        ctx.request_register = self.registration.request_soon
        ctx.register_round = self.registration.next_round
        ctx.set_isolated = lambda flag: self._set_isolated(ctx, flag)
        ctx.escape = EscapeBridge(lambda: ctx.config, lambda: ctx.acting_master, store.put_message,
                                  RemotingEscapeTransport(self._client, lambda: ctx.config), self.clock.now_ms)
        topics.on_change = ctx.request_register
        self.notifier = heartbeat_handlers.ConsumerIdsNotifier(ctx)
        clients.on_consumer_ids_changed = self.notifier.on_change
        self.pull = pull_handlers.build(ctx)
        assert self.pull.long_poll is not None
        store.add_dispatch_listener(self.pull.long_poll.on_dispatch, while_nonempty=self.pull.long_poll.held_table)
        self.pull.long_poll.set_limits(lambda: HoldLimits(ctx.config.long_polling_max_hold_ms,
                                                          ctx.config.long_polling_max_held_per_connection,
                                                          ctx.config.long_polling_max_held),
                                       ctx.stats.limit_hit)
        table: dict[int, Any] = {}
        table.update(send_handlers.handlers(ctx))
        table.update(pull_handlers.handlers(ctx, self.pull))
        table.update(heartbeat_handlers.handlers(ctx, self.notifier))
        table.update(consumer_handlers.handlers(ctx))
        if self.acl is not None:  # RocketMQ's ACL administration codes (50-53) edit the ACL file
            table.update(AclAdmin(self.acl, lambda: (ctx.config.broker_cluster_name, ctx.config.broker_name,
                                                     ctx.config.broker_addr)).handlers())
        for mod in _handler_modules():
            for code, handler in mod.handlers(ctx).items():
                table.setdefault(int(code), handler)
        env = ServiceEnv(self.clock, self._client, config_dir, self.store_config)
        self.service_env = env
        self.services = create_services(ctx, env)
        for svc in self.services:
            table.update(guarded({int(code): h for code, h in svc.handlers().items()}))  # names checked first
        main, vip = self._routers
        main.add(table)
        if self.metrics is not None:  # scrapes read GET_BROKER_RUNTIME_INFO's table from its handler
            self.metrics.runtime_handler = table.get(int(RequestCode.GET_BROKER_RUNTIME_INFO))
        vip.add({c: h for c, h in table.items() if c != RequestCode.PULL_MESSAGE})
        self.ctx = ctx
        return ctx

    def _set_isolated(self, ctx: BrokerContext, isolated: bool) -> None:
        """Pre-online switch: no registration or heartbeat and no special services while isolated."""
        was = ctx.isolated
        ctx.isolated = isolated
        assert self.registration is not None
        self.registration.set_isolated(isolated)
        if was and not isolated:
            for listener in list(ctx.role_listeners):  # wake the special services
                listener(ctx.acting_master)

    def _on_outer_request(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        """Requests a name server or controller sends over the broker's outgoing connection (RIP-32: 905;
        RIP-44: 1008)."""
        if cmd.code == RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE:
            svc = self.ctx.services.get("acting_master") if self.ctx is not None else None
            if svc is not None:
                svc.on_notify(dict(cmd.ext_fields or {}))
            return None if cmd.is_oneway else cmd.response()
        if cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:  # RIP-44: pushed by a controller
            rm = self.ctx.services.get("replicas_manager") if self.ctx is not None else None
            if rm is not None:
                rm.on_role_notify(cmd)
            return None if cmd.is_oneway else cmd.response()
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")

    def startup_info(self) -> dict[str, str]:
        """What the start-up is doing: `startupPhase` and the store's recovery progress (docs/design/restart.md)."""
        store = self.store or self._loading_store
        table = {"startupPhase": self.startup_phase, "brokerName": self.config.broker_name}
        if store is not None:
            table.update(store.recovery_progress.fields())
        return table

    def _starting_answer(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        """The answer while the routers do not accept: SERVICE_NOT_AVAILABLE (retryable) to everything; for
        GET_BROKER_RUNTIME_INFO during start-up, with the progress as a KVTable body and in the remark."""
        if cmd.code != RequestCode.GET_BROKER_RUNTIME_INFO or self.startup_phase == "ready":
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is starting or shutting down")
        if self.acl is not None:
            refused = self.acl.check(conn, cmd)
            if refused is not None:
                return refused
        info = self.startup_info()
        store = self.store or self._loading_store
        detail = store.recovery_progress.describe() if store is not None and self.startup_phase == "store" else ""
        remark = f"broker is starting: {self.startup_phase}" + (f" ({detail})" if detail else "")
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark, body=KVTable(info).to_json())

    def _on_connection_closed(self, conn: Any) -> None:
        if self.ctx is not None:
            self.ctx.clients.on_connection_closed(conn)

    def _limit_hit(self, name: str) -> None:
        """A network bound was hit (remoting/limits.py): orbitmq_limits_hit_total{limit=name}."""
        if self.ctx is not None:
            self.ctx.stats.limit_hit(name)

    async def start(self) -> None:
        """Load the store, bind both ports, build handlers, start background work, register. ConfigError on
        an unusable port, store path or locked store (one line)."""
        if self._started:
            return
        self._started = True
        cfg = self.config
        self.acl = AclGuard(resolve_acl_file(cfg.acl_file_path, cfg.rocketmq_home, os.environ.get("ROCKETMQ_HOME")),
                            cfg.cluster_secret) if cfg.acl_enable else None  # bad plain_acl.yml: ConfigError now
        self._routers = [Router({}), Router({})]
        for r in self._routers:
            r.accepting = False  # until the handlers are wired
            r.check = self.acl.check if self.acl is not None else None
            r.starting = self._starting_answer  # SERVICE_NOT_AVAILABLE; runtime info: the start-up progress
        handlers: list[Any] = list(self._routers)
        if prom_enabled(cfg.metrics_exporter_type):
            self.metrics = BrokerMetrics(cfg.metrics_prom_exporter_host or cfg.broker_ip1, cfg.metrics_prom_exporter_port)
            handlers = [self.metrics.wrap(r) for r in self._routers]  # RPC latency per request/response code
        try:
            limits = ServerLimits(cfg.server_max_connections, cfg.server_max_connections_per_ip,
                                  cfg.server_frame_deadline_ms, cfg.server_input_buffer_budget)
            tls = server_context(server_config_of(cfg))  # ConfigError (one line) on unreadable files
            self.server = RemotingServer(handlers[0], cfg.bind_address, cfg.listen_port, name="broker",
                                         on_close=self._on_connection_closed, limits=limits,
                                         on_limit=self._limit_hit, ssl_context=tls, tls_mode=cfg.tls_server_mode)
            await self.server.start()
            self.vip_server = RemotingServer(handlers[1], cfg.bind_address, cfg.vip_listen_port, name="broker-vip",
                                             on_close=self._on_connection_closed, limits=limits,
                                             on_limit=self._limit_hit, ssl_context=tls, tls_mode=cfg.tls_server_mode)
            await self.vip_server.start()
            if self.server.port != cfg.listen_port:  # port 0 (tests): the real port is known only now
                self.config = cfg = dataclasses.replace(cfg, listen_port=self.server.port)
            # off the event loop: a long crash recovery must not stall what shares the loop (a standalone's name
            # server, signals); the ports are bound and answer SERVICE_NOT_AVAILABLE (retryable) meanwhile, and
            # GET_BROKER_RUNTIME_INFO with the recovery progress
            self.startup_phase = "store"
            self.store = store = await asyncio.to_thread(self._load_store)
            self.startup_phase = "services"
            self._build(store)
            assert self.pull is not None and self.pull.long_poll is not None
            self.pull.long_poll.bind_loop()
            await store.start()
            for svc in self.services:
                await svc.start()
            if self.metrics is not None:  # last: a metrics port in use fails start-up with a one-line ConfigError
                assert self.ctx is not None
                await self.metrics.start(self.ctx)
        except BaseException:
            await self._abort_start()
            raise
        self.startup_phase = "ready"
        for r in self._routers:
            r.accepting = True
            r.starting = None  # stopping: the plain refusal
        assert self.registration is not None
        await self.registration.register_all()
        self._supervisor = asyncio.get_running_loop().create_task(self._run_periodic(), name="broker periodic")
        log.info("broker %s (%s) started on %s, VIP port %d", cfg.broker_name, cfg.broker_role, self.addr,
                 self.vip_port)

    async def _abort_start(self) -> None:
        self._stopped = True
        for srv in (self.vip_server, self.server):
            if srv is not None:
                with contextlib.suppress(Exception):
                    await srv.stop()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.shutdown()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()

    # ----- periodic tasks -----
    async def _every(self, name: str, interval_ms: Callable[[], int], fn: Callable[[], Awaitable[Any] | Any]) -> None:
        """Run fn every interval; a failure is logged with its task name, counted, and retried next period."""
        while True:
            await asyncio.sleep(interval_ms() / 1000)
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                self.task_failures[name] = self.task_failures.get(name, 0) + 1
                log.exception("periodic task %r failed (%d failures so far)", name, self.task_failures[name])

    async def _guard(self, name: str) -> None:
        """Long-running loops: a crash is logged, counted and the loop restarted after 1 s."""
        while True:
            try:
                await self._loop_factory(name)
                return
            except Exception:
                self.task_failures[name] = self.task_failures.get(name, 0) + 1
                log.exception("loop %r crashed (%d so far); restarting in 1 s", name, self.task_failures[name])
                await asyncio.sleep(1)

    def _loop_factory(self, name: str) -> Awaitable[None]:
        assert self.registration is not None and self.pull is not None and self.pull.long_poll is not None
        if name == "registration":
            return self.registration.run_loop()
        if name == "name server heartbeat":
            return self.registration.run_heartbeat_loop()
        if name.startswith("service "):
            return self.ctx.services[name[len("service "):]].run()  # type: ignore[union-attr]
        cfg = self.config
        interval = LONG_POLL_CHECK_INTERVAL_MS if cfg.long_polling_enable else cfg.short_polling_time_mills
        return self.pull.long_poll.run_check_loop(interval)

    async def _run_periodic(self) -> None:
        ctx = self.ctx
        assert ctx is not None
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._guard("registration"))
            if self.config.enable_slave_acting_master:
                tg.create_task(self._guard("name server heartbeat"))
            tg.create_task(self._guard("long-poll checker"))
            for svc in self.services:
                tg.create_task(self._guard(f"service {svc.name}"))
            if self.acl is not None:  # plain_acl.yml re-read off the loop; applied when its bytes change
                acl = self.acl
                tg.create_task(self._every("acl reload", lambda: ACL_RELOAD_INTERVAL_MS,
                                           lambda: asyncio.to_thread(acl.reload_if_changed)))
            tg.create_task(self._every("client channel scan", lambda: CLIENT_SCAN_INTERVAL_MS,
                                       ctx.clients.scan_expired))
            tg.create_task(self._every("consumer offset persist", lambda: self.config.flush_consumer_offset_interval,
                                       self._persist_offsets))

    async def _persist_offsets(self) -> None:
        assert self.ctx is not None
        offsets = self.ctx.offsets
        data = offsets.snapshot_if_dirty()
        if data is not None:
            await asyncio.to_thread(self._write_offsets, offsets, data)

    def _write_offsets(self, offsets: ConsumerOffsetManager, data: bytes) -> None:
        with self._offsets_write_lock:
            offsets.write_snapshot(data)

    def _persist_offsets_now(self) -> None:
        assert self.ctx is not None
        with self._offsets_write_lock:
            self.ctx.offsets.persist()

    # ----- stop -----
    async def stop(self) -> None:
        if not self._started or self._stopped or self.ctx is None:
            return
        self._stopped = True
        ctx = self.ctx
        assert ctx is not None and self.store is not None
        for r in self._routers:
            r.accepting = False
        if self.metrics is not None:
            await self.metrics.stop()
        if self.pull is not None and self.pull.long_poll is not None:
            answered = self.pull.long_poll.answer_all()
            if answered:
                log.info("answered %d held pull requests", answered)
        for srv in (self.vip_server, self.server):
            if srv is not None:
                await srv.stop()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
        if self.service_env is not None:  # cancelled services may have writes still running in worker threads
            await self.service_env.writes.drain()
        for svc in reversed(self.services):
            try:
                await svc.stop()
            except Exception:
                log.exception("stopping service %s failed", svc.name)
        for what, fn in (("consumer offsets", self._persist_offsets_now), ("topics", ctx.topics.persist),
                         ("subscription groups", ctx.groups.persist)):
            try:
                fn()
            except Exception:
                log.exception("persisting %s at stop failed", what)
        await self.store.shutdown()
        if self.registration is not None:
            await self.registration.unregister_all()
        if self._client is not None:
            await self._client.close()
        log.info("broker %s stopped", self.config.broker_name)

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _heartbeat_store_state(store: MessageStore) -> dict[str, str]:
    """What BROKER_HEARTBEAT (904) reports about the store."""
    return {"epoch": str(store.master_epoch), "maxOffset": str(store.max_phys_offset),
            "confirmOffset": str(store.confirm_offset)}
