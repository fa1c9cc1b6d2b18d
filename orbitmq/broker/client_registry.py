"""ClientRegistry: which client channels (connections) belong to which consumer / producer group.

Fed by HEART_BEAT / UNREGISTER_CLIENT, connection close and the expiry scan. It never writes to the wire:
membership changes are reported through on_consumer_ids_changed(group, by_client), which the heartbeat
module turns into NOTIFY_CONSUMER_IDS_CHANGED.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orbitmq.base.clock import now_ms

log = logging.getLogger("orbitmq.broker.clients")


@dataclass(slots=True)
class ClientChannelInfo:
    conn: Any  # orbitmq.remoting.Connection
    client_id: str
    language: str
    version: int
    last_update_ms: int

    @property
    def remote_addr(self) -> str:
        return getattr(self.conn, "remote_addr", "")


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Any, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, Any] = field(default_factory=dict)  # topic -> protocol.bodies.SubscriptionData
    last_update_ms: int = 0

    def client_ids(self) -> list[str]:
        return [ch.client_id for ch in self.channels.values()]


def _sub_string(sub: Any) -> str:
    return str(getattr(sub, "sub_string", "*"))


class ClientRegistry:
    def __init__(self, channel_max_idle_ms: int = 120_000, clock_ms: Callable[[], int] = now_ms) -> None:
        self._consumers: dict[str, ConsumerGroupInfo] = {}
        self._producers: dict[str, dict[Any, ClientChannelInfo]] = {}
        self._max_idle_ms = channel_max_idle_ms
        self._clock = clock_ms
        # (group, by_client): by_client=True for heartbeat/unregister (the group flag applies), False for
        # connection close / expiry.
        self.on_consumer_ids_changed: Callable[[str, bool], None] | None = None

    # ----- registration -----
    def register_consumer(self, conn: Any, client_id: str, group: str, consume_type: str, message_model: str,
                          consume_from_where: str, subscriptions: dict[str, Any], language: str,
                          version: int) -> bool:
        """Add/refresh a consumer channel; True if a new channel joined or the subscription set changed."""
        now = self._clock()
        info = self._consumers.get(group)
        if info is None:
            info = self._consumers[group] = ConsumerGroupInfo(group)
        info.consume_type = consume_type
        info.message_model = message_model
        info.consume_from_where = consume_from_where
        info.last_update_ms = now
        changed = False
        ch = info.channels.get(conn)
        if ch is None:
            info.channels[conn] = ClientChannelInfo(conn, client_id, language, version, now)
            changed = True
        else:
            if ch.client_id != client_id:
                log.warning("consumer channel %s changed client id %s -> %s", ch.remote_addr, ch.client_id,
                            client_id)
                ch.client_id = client_id
                changed = True
            ch.last_update_ms = now
            ch.language = language
            ch.version = version
        old = info.subscriptions
        if old.keys() != subscriptions.keys() or any(
            _sub_string(old[t]) != _sub_string(s) for t, s in subscriptions.items()
        ):
            changed = True
        # keep the newer version of an unchanged subscription (as Java does)
        merged: dict[str, Any] = {}
        for topic, sub in subscriptions.items():
            prev = old.get(topic)
            if prev is not None and getattr(prev, "sub_version", 0) > getattr(sub, "sub_version", 0) \
                    and _sub_string(prev) == _sub_string(sub):
                merged[topic] = prev
            else:
                merged[topic] = sub
        info.subscriptions = merged
        return changed

    def register_producer(self, conn: Any, client_id: str, group: str, language: str, version: int) -> None:
        now = self._clock()
        chans = self._producers.setdefault(group, {})
        ch = chans.get(conn)
        if ch is None:
            chans[conn] = ClientChannelInfo(conn, client_id, language, version, now)
        else:
            ch.last_update_ms = now
            ch.client_id = client_id

    def unregister(self, conn: Any, client_id: str, producer_group: str | None = None,
                   consumer_group: str | None = None) -> None:
        if producer_group:
            chans = self._producers.get(producer_group)
            if chans is not None and chans.pop(conn, None) is not None and not chans:
                del self._producers[producer_group]
        if consumer_group:
            self._remove_consumer_channel(consumer_group, conn, by_client=True)

    def _remove_consumer_channel(self, group: str, conn: Any, *, by_client: bool) -> bool:
        info = self._consumers.get(group)
        if info is None or info.channels.pop(conn, None) is None:
            return False
        if not info.channels:
            del self._consumers[group]
        cb = self.on_consumer_ids_changed
        if cb is not None:
            try:
                cb(group, by_client)
            except Exception:  # a notification failure must not break the registry
                log.exception("consumer ids change notification failed for group %s", group)
        return True

    # ----- queries -----
    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self._consumers.get(group)

    def consumer_groups(self) -> list[str]:
        return list(self._consumers)

    def consumer_ids(self, group: str) -> list[str]:
        info = self._consumers.get(group)
        return info.client_ids() if info else []

    def consumer_channels(self, group: str) -> list[Any]:
        info = self._consumers.get(group)
        return list(info.channels) if info else []

    def find_consumer_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        info = self._consumers.get(group)
        if info is None:
            return None
        for ch in info.channels.values():
            if ch.client_id == client_id:
                return ch
        return None

    def subscription(self, group: str, topic: str) -> Any | None:
        info = self._consumers.get(group)
        return info.subscriptions.get(topic) if info else None

    def groups_subscribing(self, topic: str) -> set[str]:
        return {g for g, info in self._consumers.items() if topic in info.subscriptions}

    def producer_channels(self, group: str) -> list[Any]:
        return list(self._producers.get(group, {}))

    def producer_group(self, group: str) -> dict[Any, ClientChannelInfo]:
        return dict(self._producers.get(group, {}))

    def producer_groups(self) -> list[str]:
        return list(self._producers)

    # ----- liveness -----
    def on_connection_closed(self, conn: Any) -> None:
        """Drop every registration of a closed connection (consumer groups are notified)."""
        for group in [g for g, chans in self._producers.items() if conn in chans]:
            chans = self._producers[group]
            chans.pop(conn, None)
            if not chans:
                del self._producers[group]
        for group in [g for g, info in self._consumers.items() if conn in info.channels]:
            self._remove_consumer_channel(group, conn, by_client=False)

    def scan_expired(self, now: int | None = None) -> int:
        """Remove (and close) channels without a heartbeat for channel_max_idle_ms; returns how many."""
        now = self._clock() if now is None else now
        limit = now - self._max_idle_ms
        removed = 0
        for group, chans in list(self._producers.items()):
            for conn, ch in list(chans.items()):
                if ch.last_update_ms < limit:
                    log.warning("producer channel %s of group %s expired (no heartbeat)", ch.remote_addr, group)
                    del chans[conn]
                    _close(conn)
                    removed += 1
            if not chans:
                del self._producers[group]
        for group, info in list(self._consumers.items()):
            for conn, ch in list(info.channels.items()):
                if ch.last_update_ms < limit:
                    log.warning("consumer channel %s of group %s expired (no heartbeat)", ch.remote_addr, group)
                    self._remove_consumer_channel(group, conn, by_client=False)
                    _close(conn)
                    removed += 1
        return removed


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        log.debug("closing expired channel failed", exc_info=True)
