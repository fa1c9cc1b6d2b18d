"""BrokerContext: the narrow bundle of collaborators every broker handler receives.

Built once by app.Broker (the composition root); handlers never reach the Broker itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orbitmq.broker.group_stats import GroupGetStats

if TYPE_CHECKING:
    import asyncio

    from orbitmq.broker.client_registry import ClientRegistry
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.broker.metadata.groups import SubscriptionGroupManager
    from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
    from orbitmq.broker.metadata.topics import TopicConfigManager
    from orbitmq.broker.stats import BrokerStats
    from orbitmq.store import MessageStore


def _noop() -> None:
    return None


def _noop_flag(flag: bool) -> None:
    return None


def _no_round() -> None:
    return None


def _open_fence() -> tuple[int, str] | None:
    return None


def _no_listener(group: str, topic: str, queue_id: int, offset: int) -> None:
    return None


class SendHook(Protocol):
    """A broker feature that takes part in every send (transactions, timers, de-duplication, ...).

    before_put may rewrite the prepared messages in place (topic, queue_id, properties, sys_flag) or return a
    response (or an awaitable of one) to answer the send without storing anything (e.g. a duplicate); after_put
    sees the stored result. A hook may also define after_append(conn, req, msgs, result): called when a put is in
    the CommitLog but still waits for its flush / slave (after_put follows once it is settled).

    Optional declarations the send handler uses to skip calls that would do nothing: `before_put_acts_on =
    (topics, property names)` (before_put returns None and changes nothing for a single message whose topic is not
    in `topics` and whose properties hold none of the names), `after_put_noop = True` (after_put does nothing), and
    `after_put_many(conn, items)` (after_put of every (req, msgs, result) in one call; None or per item the
    exception it raised)."""

    def before_put(self, conn: Any, req: Any, msgs: list[Any]) -> Any | None: ...

    def after_put(self, conn: Any, req: Any, msgs: list[Any], result: Any) -> None: ...


def after_put_each(after_put: Callable[..., None], conn: Any, items: list[tuple[Any, list[Any], Any]],
                   failed: list[BaseException | None] | None = None) -> list[BaseException | None] | None:
    """after_put(conn, req, msgs, result) of each item in turn, except those `failed` already marks; returns
    `failed` with the exception each call raised (None when nothing failed)."""
    for k, (req, msgs, result) in enumerate(items):
        if failed is not None and failed[k] is not None:
            continue
        try:
            after_put(conn, req, msgs, result)
        except Exception as e:
            if failed is None:
                failed = [None] * len(items)
            failed[k] = e
    return failed


def _same_id(broker_id: int) -> int:
    return broker_id


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
    # re-register soon; the future completes when that round has ended (None: nothing registers, do not wait)
    register_round: Callable[[], asyncio.Future[None] | None] = _no_round
    send_hooks: list[SendHook] = field(default_factory=list)  # broker services taking part in sends (in order)
    services: dict[str, Any] = field(default_factory=dict)  # broker services by name (services/__init__.py)
    # RIP-32 (docs/design/acting-master.md)
    acting_master: bool = False  # this slave acts as its group's master (set by services/acting_master.py)
    isolated: bool = False  # pre-online: not registered; the special services wait (set through set_isolated)
    role_listeners: list[Callable[[bool], None]] = field(default_factory=list)  # called with acting_master on change
    set_isolated: Callable[[bool], None] = _noop_flag  # True: no registration/heartbeat (pre-online); app.py wires it
    runtime_extras: list[Callable[[], dict[str, str]]] = field(default_factory=list)  # GET_BROKER_RUNTIME_INFO adds
    escape: Any = None  # escape.EscapeBridge: where special services (delay, transaction, pop revive) write
    group_stats: GroupGetStats = field(default_factory=GroupGetStats)  # per group/topic pull rate (consumeTps)
    # RIP-44 controller mode: (ResponseCode, remark) while writes must be refused (no lease, too few in-sync
    # replicas), None when they may proceed. Checked by SEND_MESSAGE* and END_TRANSACTION before anything is stored.
    write_fence: Callable[[], tuple[int, str] | None] = _open_fence
    # RIP-44 controller mode: (ResponseCode, remark) while PULL_MESSAGE / QUERY_CONSUMER_OFFSET must be refused (role
    # not known yet, or a slave whose offsets are not synced from its master yet), else None.
    read_fence: Callable[[], tuple[int, str] | None] = _open_fence
    # a consumer offset committed inside a PULL (commitOffset flag); controller mode forwards it to the replicas
    offset_committed: Callable[[str, str, int, int], None] = _no_listener
    # slave reads: the brokerId a pull answer suggests when the consumer is slow, given the group's
    # whichBrokerWhenConsumeSlowly. Raft groups (raft_mode) map it to a follower that is in the route now.
    slave_read_target: Callable[[int], int] = _same_id

    def set_role(self, broker_role: str, broker_id: int) -> None:
        """The one place a broker's role changes at runtime (controller mode): everything that reads
        ctx.config.is_slave / broker_id / serves_as_master() sees the new role, and the special services (delay,
        transaction check, pop revive, ...) are told through role_listeners."""
        cfg = self.config
        if cfg.broker_role == broker_role and cfg.broker_id == broker_id:
            return
        self.config = dataclasses.replace(cfg, broker_role=broker_role, broker_id=broker_id)
        self.notify_role_listeners()

    def notify_role_listeners(self) -> None:
        for listener in list(self.role_listeners):
            listener(self.acting_master)

    def serves_as_master(self) -> bool:
        """A master (not isolated), or a slave acting as its group's master: runs the special (scanning)
        services and master-only operations."""
        return not self.isolated and (not self.config.is_slave or self.acting_master)
