"""Broker services: optional features (delay, timer, retry, transactions, pop, de-duplication, ...) plugged into
the broker without touching its wiring. Each service module exposes a factory `create(ctx, env) -> BrokerService |
None` and is listed once in FACTORIES; app.Broker builds, starts, supervises and stops them.

Lifecycle: factory (after metadata and handlers exist) → handlers() merged into the router (a service's codes win)
→ start() after the store started → run() under the broker's supervisor (restarted after a crash) → stop() before
the store shuts down. A service that takes part in sends appends a SendHook to ctx.send_hooks in its factory.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orbitmq.base.clock import Clock

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.remoting import RemotingClient
    from orbitmq.store import StoreConfig

log = logging.getLogger(__name__)


@dataclass
class ServiceEnv:
    """Capabilities a service may need beyond BrokerContext."""

    clock: Clock
    client: RemotingClient  # outgoing connections (other brokers, name servers)
    config_dir: str  # <storePathRootDir>/config: where services persist their progress (atomic_write)
    store_config: StoreConfig


class BrokerService(Protocol):
    name: str

    def handlers(self) -> dict[int, Callable[..., Any]]: ...

    async def start(self) -> None: ...

    async def run(self) -> None: ...  # long-running loop; return at once if the service has none

    async def stop(self) -> None: ...


# "module:function" of every service factory, in start order. Append one line per service.
FACTORIES: list[str] = [
    "orbitmq.broker.services.dedup:create",  # first: sees every send before other hooks rewrite or answer it
    "orbitmq.broker.services.acting_master:create",  # RIP-32 member group; before the services that listen to it
    "orbitmq.broker.services.delay:create",
    "orbitmq.broker.services.retry:create",
    "orbitmq.broker.services.transaction:create",
    "orbitmq.broker.services.pop:create",
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
