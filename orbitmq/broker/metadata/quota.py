"""A cap on topics and subscription groups auto-created per client per minute (issue 12.2).

Auto-creation (a send naming an unknown topic, a heartbeat or pull naming an unknown group) grows tables that are
persisted and announced to the name server, so one client must not be able to create them without bound. The
client is the remote IP of the connection whose request is being handled: the broker's Router records the
connection in the context variable REQUESTER before calling a handler (a handler's task inherits it); work the
broker does on its own (services, start-up, admin tools calling the managers directly) has no requester and is
never limited. Explicit admin creation (UPDATE_AND_CREATE_TOPIC / _SUBSCRIPTIONGROUP) does not go through here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

WINDOW_S = 60.0
MAX_TRACKED = 100_000  # distinct client addresses remembered at once (expired windows are dropped first)
LIMIT_NAME = "autoCreatePerClientPerMinute"  # the label in orbitmq_limits_hit_total (the key, as the network limits)

REQUESTER: ContextVar[Any] = ContextVar("orbitmq_requester", default=None)


class AutoCreateRefused(Exception):
    """Over the per-client auto-create cap; str() is the remark sent to the client."""


def client_key(conn: Any) -> str | None:
    """The remote IP of a connection (its remote_addr without the port); None if it has none."""
    addr = getattr(conn, "remote_addr", None)
    if not addr:
        return None
    host = str(addr).rsplit(":", 1)[0] if ":" in str(addr) else str(addr)
    return host.strip("[]")


class AutoCreateQuota:
    """Fixed one-minute windows per client: `admit(what)` counts one creation for the current requester, or raises
    AutoCreateRefused once the client has made `limit()` creations in its window (0 = unlimited)."""

    def __init__(self, limit: Callable[[], int], on_refused: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._on_refused = on_refused
        self._clock = clock
        self._windows: dict[str, list[float]] = {}  # client -> [window start, count]
        self.refused = 0

    def admit(self, what: str) -> None:
        limit = self._limit()
        if limit <= 0:
            return
        client = client_key(REQUESTER.get())
        if client is None:
            return
        now = self._clock()
        w = self._windows.get(client)
        if w is None or now - w[0] >= WINDOW_S:
            if w is None and len(self._windows) >= MAX_TRACKED:
                self._prune(now)
            w = self._windows[client] = [now, 0]
        if w[1] >= limit:
            self.refused += 1
            if self._on_refused is not None:
                self._on_refused(LIMIT_NAME)
            wait = max(1, int(WINDOW_S - (now - w[0]) + 0.999))
            raise AutoCreateRefused(f"{what} not created: client {client} auto-created {int(w[1])} topics/groups "
                                    f"in the last minute (autoCreatePerClientPerMinute={limit}); retry in {wait}s "
                                    f"or create it with the admin tool")
        w[1] += 1

    def _prune(self, now: float) -> None:
        expired = [c for c, w in self._windows.items() if now - w[0] >= WINDOW_S]
        for c in expired:
            del self._windows[c]
        if len(self._windows) >= MAX_TRACKED:  # all live: forget the oldest windows (they restart at zero)
            for c, _ in sorted(self._windows.items(), key=lambda kv: kv[1][0])[: len(self._windows) // 10 or 1]:
                del self._windows[c]

    def __len__(self) -> int:
        return len(self._windows)
