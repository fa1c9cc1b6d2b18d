"""Broker services: optional features (delay, timer, retry, transactions, pop, de-duplication, ...) plugged into
the broker without touching its wiring. Each service module exposes a factory `create(ctx, env) -> BrokerService |
None` and is listed once in FACTORIES; app.Broker builds, starts, supervises and stops them.

Lifecycle: factory (after metadata and handlers exist) → handlers() merged into the router (a service's codes win)
→ start() after the store started → run() under the broker's supervisor (restarted after a crash) → stop() before
the store shuts down. A service that takes part in sends appends a SendHook to ctx.send_hooks in its factory.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orbitmq.base.clock import Clock

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.remoting import RemotingClient
    from orbitmq.store import StoreConfig

log = logging.getLogger(__name__)


class BackgroundWrites:
    """The services' file writes in worker threads (asyncio.to_thread). Cancelling the task that awaits one does not
    stop its thread, so Broker.stop cancels the services, then drain()s what is still writing, and only then lets
    each service write its final state to the same files."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Future[Any]] = set()

    def __len__(self) -> int:
        return len(self._pending)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) in a worker thread; a cancelled caller leaves it running until drain() collects it."""
        fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        return await asyncio.shield(fut)

    async def drain(self) -> None:
        """Wait for every write in flight (their errors were the callers' to handle: here they are only logged)."""
        while self._pending:
            for r in await asyncio.gather(*self._pending, return_exceptions=True):
                if isinstance(r, Exception):
                    log.warning("a background write failed while the broker stopped: %s", r)


@dataclass
class ServiceEnv:
    """Capabilities a service may need beyond BrokerContext."""

    clock: Clock
    client: RemotingClient  # outgoing connections (other brokers, name servers)
    config_dir: str  # <storePathRootDir>/config: where services persist their progress (atomic_write)
    store_config: StoreConfig
    writes: BackgroundWrites = field(default_factory=BackgroundWrites)  # off-loop writes, drained at stop


class BrokerService(Protocol):
    name: str

    def handlers(self) -> dict[int, Callable[..., Any]]: ...

    async def start(self) -> None: ...

    async def run(self) -> None: ...  # long-running loop; return at once if the service has none

    async def stop(self) -> None: ...


# "module:function" of every service factory, in start order. Append one line per service.
FACTORIES: list[str] = [
    "orbitmq.broker.raft_mode.service:create",  # enableDLegerCommitLog: ctx.store becomes the Raft proposal proxy
    "orbitmq.broker.services.dedup:create",  # first: sees every send before other hooks rewrite or answer it
    # RIP-44 controller mode (enableControllerMode; replaces "ha"): before the services that read the role
    "orbitmq.broker.controller_mode.replicas_manager:create",
    "orbitmq.broker.services.acting_master:create",  # RIP-32 member group; before the services that listen to it
    "orbitmq.broker.services.delay:create",
    "orbitmq.broker.services.retry:create",
    "orbitmq.broker.services.transaction:create",
    "orbitmq.broker.services.pop:create",
    "orbitmq.broker.raft_mode.local_delivery:create",  # localDeliveryGroups in a Raft group; after pop (wraps it)
    "orbitmq.broker.services.ha:create",  # replication: HA server/client, SYNC_MASTER waits, slave metadata sync
    "orbitmq.broker.services.timer:create",  # after transaction: half messages keep their own path
    "orbitmq.broker.services.strict_lock:create",  # lockInStrictMode: LOCK/UNLOCK_BATCH_MQ by quorum
    "orbitmq.broker.services.preonline:create",  # LAST: a restarting master takes back its slaves' offsets (C)
]


def create_services(ctx: BrokerContext, env: ServiceEnv) -> list[BrokerService]:
    services: list[BrokerService] = []
    for path in FACTORIES:
        mod_name, _, fn_name = path.partition(":")
        factory = getattr(importlib.import_module(mod_name), fn_name)
        svc = factory(ctx, env)
        if svc is None:
            log.debug("service %s disabled by configuration", path)
            continue
        ctx.services[svc.name] = svc
        services.append(svc)
    return services
