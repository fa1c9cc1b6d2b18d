"""RemotingServer: listens on host:port, one Connection per accepted socket, all sharing one handler.

Bind failures become a one-line ConfigError; stop() closes every connection and cancels handler tasks.
ServerLimits (remoting/limits.py) bound connections (in all and per remote IP: one over the cap is closed at once),
the time to finish a started frame and the bytes buffered in unfinished frames; each hit is counted via `on_limit`.
Running out of descriptors on accept (EMFILE/ENFILE) is transient: the event loop stops accepting for a moment and
then accepts again (asyncio and uvloop both do), so nothing here has to restart the listener.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Callable

from orbitmq.base.errors import ConfigError
from orbitmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE
from orbitmq.remoting.connection import (
    DEFAULT_HIGH_WATER,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_LOW_WATER,
    Connection,
    Handler,
)
from orbitmq.remoting.limits import (
    LIMIT_MAX_CONNECTIONS,
    LIMIT_MAX_CONNECTIONS_PER_IP,
    InputBudget,
    ServerLimits,
)

log = logging.getLogger("orbitmq.remoting")


def bind_error_text(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use"
    elif isinstance(exc, socket.gaierror):
        reason = f"cannot resolve host ({(exc.strerror or str(exc)).lower()})"
    elif exc.errno and exc.errno > 0:
        reason = os.strerror(exc.errno).lower()
    else:
        reason = str(exc) or type(exc).__name__
    return f"cannot listen on {host}:{port}: {reason}"


class RemotingServer:
    def __init__(
        self,
        handler: Handler,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        name: str = "server",
        on_close: Callable[[Connection], None] | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        high_water: int = DEFAULT_HIGH_WATER,
        low_water: int = DEFAULT_LOW_WATER,
        backlog: int = 1024,
        limits: ServerLimits | None = None,
        on_limit: Callable[[str], None] | None = None,
    ) -> None:
        self._handler = handler
        self.host = host
        self.port = port
        self.name = name
        self._on_close = on_close
        self._idle_timeout_s = idle_timeout_s
        self._max_frame_size = max_frame_size
        self._high_water = high_water
        self._low_water = low_water
        self._backlog = backlog
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self.limits = limits or ServerLimits()
        self._on_limit = on_limit
        self._per_ip: dict[str, int] = {}
        self.refused_count = 0
        self.input_budget = InputBudget(self.limits.input_buffer_budget, self._limit_hit)

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

    def _make_connection(self) -> Connection:
        return Connection(
            self._handler,
            name=self.name,
            max_frame_size=self._max_frame_size,
            idle_timeout_s=self._idle_timeout_s,
            high_water=self._high_water,
            low_water=self._low_water,
            on_open=self._admit,
            on_close=self._connection_closed,
            frame_deadline_ms=self.limits.frame_deadline_ms,
            input_budget=self.input_budget,
            on_limit=self._limit_hit,
        )

    def _limit_hit(self, name: str) -> None:
        if self._on_limit is not None:
            try:
                self._on_limit(name)
            except Exception:
                log.exception("%s: limit counter failed", self.name)

    def _admit(self, conn: Connection) -> bool:
        """A new connection counts against the caps, or is refused (the connection then closes itself)."""
        lim = self.limits
        ip = conn.remote_addr.rpartition(":")[0] or conn.remote_addr
        refused = ""
        if 0 < lim.max_connections <= len(self._connections):
            refused = LIMIT_MAX_CONNECTIONS
        elif 0 < lim.max_connections_per_ip <= self._per_ip.get(ip, 0):
            refused = LIMIT_MAX_CONNECTIONS_PER_IP
        if refused:
            self.refused_count += 1
            self._limit_hit(refused)
            if self.refused_count & (self.refused_count - 1) == 0:  # 1st, 2nd, 4th, ... refusal: log, no flood
                log.warning("%s: refused connection from %s: %s reached (%d refused so far)", self.name,
                            conn.remote_addr, refused, self.refused_count)
            return False
        conn.attrs["remote_ip"] = ip
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self._connections.add(conn)
        return True

    def _connection_closed(self, conn: Connection) -> None:
        if conn not in self._connections:
            return  # refused at open: never counted, never reported
        self._connections.discard(conn)
        ip = conn.attrs.get("remote_ip", "")
        left = self._per_ip.get(ip, 0) - 1
        if left > 0:
            self._per_ip[ip] = left
        else:
            self._per_ip.pop(ip, None)
        if self._on_close is not None:
            self._on_close(conn)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._make_connection, self.host, self.port, reuse_address=True, backlog=self._backlog
            )
        except OSError as e:
            raise ConfigError(bind_error_text(self.host, self.port, e)) from None
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("%s listening on %s:%d", self.name, self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        conns = list(self._connections)
        for conn in conns:
            conn.close()
        if conns:
            done, not_done = await asyncio.wait([asyncio.ensure_future(c.wait_closed()) for c in conns],
                                                timeout=2.0)
            for conn in conns:  # anything still open after the grace period is aborted
                if not conn.closed:
                    conn.abort()
            for fut in not_done:
                fut.cancel()
            if not_done:
                await asyncio.wait(not_done, timeout=1.0)
        if server is not None:
            await server.wait_closed()
