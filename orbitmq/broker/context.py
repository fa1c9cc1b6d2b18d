"""BrokerContext: the narrow bundle of collaborators every broker handler receives.

Built once by app.Broker (the composition root); handlers never reach the Broker itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from orbitmq.broker.client_registry import ClientRegistry
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.broker.metadata.groups import SubscriptionGroupManager
    from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
    from orbitmq.broker.metadata.topics import TopicConfigManager
    from orbitmq.broker.stats import BrokerStats
    from orbitmq.store import MessageStore


def _noop() -> None:
    return None


class SendHook(Protocol):
    """A broker feature that takes part in every send (transactions, timers, de-duplication, ...).

    before_put may rewrite the prepared messages in place (topic, queue_id, properties, sys_flag) or return a
    response to answer the send without storing anything (e.g. a duplicate); after_put sees the stored result."""

    def before_put(self, conn: Any, req: Any, msgs: list[Any]) -> Any | None: ...

    def after_put(self, conn: Any, req: Any, msgs: list[Any], result: Any) -> None: ...


@dataclass
class BrokerContext:
    config: BrokerConfig
    store: MessageStore  # orbitmq.store facade
    topics: TopicConfigManager  # metadata/topics.py (broker-meta)
    groups: SubscriptionGroupManager  # metadata/groups.py (broker-meta)
    offsets: ConsumerOffsetManager  # metadata/offsets.py (broker-meta)
    clients: ClientRegistry  # client_registry.py: consumer/producer groups -> channels
    stats: BrokerStats  # stats.py: put/get counters, tps, for runtime info
    store_host: str  # "brokerIP1:listenPort"
    request_register: Callable[[], None] = _noop  # ask registration.py to re-register with every name server soon
    send_hooks: list[SendHook] = field(default_factory=list)  # broker services taking part in sends (in order)
    services: dict[str, Any] = field(default_factory=dict)  # broker services by name (services/__init__.py)
