"""RemotingServer: listens on host:port, one Connection per accepted socket, all sharing one handler.

Bind failures become a one-line ConfigError; stop() closes every connection and cancels handler tasks.
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
            on_open=self._connections.add,
            on_close=self._connection_closed,
        )

    def _connection_closed(self, conn: Connection) -> None:
        self._connections.discard(conn)
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
