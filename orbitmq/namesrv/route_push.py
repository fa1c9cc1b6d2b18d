"""Route push to OrbitMQ SDKs: remembers (connection, topic) watchers and tells them when a route changed.

A GET_ROUTEINFO_BY_TOPIC carrying ext `orbitWatch=true` registers its connection as a watcher of that topic.
After a RouteTable mutation the name server calls `schedule()`; once per event-loop turn the routes of the
watched topics are recomputed, and for each that differs from the last one seen every watcher gets a oneway
ORBIT_NOTIFY_ROUTE_CHANGED (9901) with ext `topic` (no body: the client refetches). Watchers go when their
connection closes. Bounded: at most `max_per_conn` topics per connection and `max_watches` pairs in all;
requests beyond that are answered normally but not watched (the client's periodic poll still works).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from orbitmq.namesrv.notify import send_oneway
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import TopicRouteData

log = logging.getLogger(__name__)

WATCH_KEY = "orbitWatch"  # request ext field of GET_ROUTEINFO_BY_TOPIC; echoed "true" in the response if watched
RouteOf = Callable[[str], TopicRouteData | None]


class RouteWatchers:
    def __init__(self, route_of: RouteOf, *, max_watches: int = 65_536, max_per_conn: int = 4_096) -> None:
        self._route_of = route_of
        self.max_watches = max_watches
        self.max_per_conn = max_per_conn
        self._by_topic: dict[str, dict[object, None]] = {}  # topic -> watching connections (ordered set)
        self._by_conn: dict[object, set[str]] = {}
        self._last: dict[str, TopicRouteData | None] = {}  # topic -> route as of the last recompute
        self._count = 0
        self._scheduled = False

    # ---- watchers -----------------------------------------------------------------------------------
    def watch(self, conn: object, topic: str, current: TopicRouteData | None) -> bool:
        """Register `conn` for `topic` (whose route was just answered as `current`); False if over a bound."""
        topics = self._by_conn.get(conn)
        if topics is not None and topic in topics:
            return True
        if self._count >= self.max_watches or (topics is not None and len(topics) >= self.max_per_conn):
            return False
        if getattr(conn, "closed", False):
            return False
        if topic not in self._by_topic:
            self._by_topic[topic] = {}
            self._last[topic] = current  # a recompute still pending compares against this, not a newer one
        self._by_topic[topic][conn] = None
        self._by_conn.setdefault(conn, set()).add(topic)
        self._count += 1
        return True

    def forget(self, conn: object) -> int:
        """Drop every watch of a closed connection; returns how many."""
        topics = self._by_conn.pop(conn, set())
        for topic in topics:
            conns = self._by_topic.get(topic)
            if conns is None:
                continue
            conns.pop(conn, None)
            if not conns:
                del self._by_topic[topic]
                self._last.pop(topic, None)
        self._count -= len(topics)
        return len(topics)

    def watchers(self, topic: str) -> list[object]:
        return list(self._by_topic.get(topic, ()))

    @property
    def count(self) -> int:
        return self._count

    # ---- change detection -----------------------------------------------------------------------------
    def changed(self) -> list[str]:
        """Recompute every watched topic's route; the topics whose route differs from the last one seen."""
        out = []
        for topic in list(self._by_topic):
            now = self._route_of(topic)
            if now != self._last.get(topic):
                self._last[topic] = now
                out.append(topic)
        return out

    def push_changes(self) -> int:
        """Send 9901 to the watchers of every changed topic; returns how many requests left."""
        self._scheduled = False
        sent = 0
        for topic in self.changed():
            conns = self.watchers(topic)
            log.debug("route of %s changed; pushing to %d watcher(s)", topic, len(conns))
            for conn in conns:
                cmd = RemotingCommand.request(RequestCode.ORBIT_NOTIFY_ROUTE_CHANGED, {"topic": topic}, oneway=True)
                sent += send_oneway(conn, cmd, getattr(conn, "remote_addr", "?"))
        return sent

    def schedule(self) -> None:
        """A mutation happened: push once at the end of this event-loop turn (at once if no loop runs)."""
        if not self._by_topic or self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.push_changes()
            return
        self._scheduled = True
        loop.call_soon(self._run_scheduled)

    def _run_scheduled(self) -> None:
        try:
            self.push_changes()
        except Exception:  # a bug here must not kill the event loop callback chain silently
            self._scheduled = False
            log.exception("route push failed")
