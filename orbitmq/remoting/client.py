"""RemotingClient: one Connection per "ip:port", opened on demand and reopened after a drop.

invoke() raises RemotingTimeoutError / RemotingConnectError; close() closes every connection, which fails
their pending futures and cancels handler tasks (no orphans).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from orbitmq.base.errors import RemotingConnectError, RemotingTimeoutError
from orbitmq.protocol import RemotingCommand
from orbitmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE
from orbitmq.remoting.connection import (
    DEFAULT_HIGH_WATER,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_LOW_WATER,
    Connection,
    Handler,
)

log = logging.getLogger("orbitmq.remoting")


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {addr!r} (expected ip:port)")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(
        self,
        request_handler: Handler | None = None,
        *,
        connect_timeout_ms: int = 3000,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        name: str = "client",
        sign: Callable[[RemotingCommand], object] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._handler = request_handler
        self._sign = sign  # applied to every request sent (e.g. the cluster secret's signature)
        self.connect_timeout_ms = connect_timeout_ms
        self._idle_timeout_s = idle_timeout_s
        self._max_frame_size = max_frame_size
        self.name = name
        self._ssl = ssl_context  # every connection is TLS when set (remoting/tls.py client_context)
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._closed = False

    @property
    def connections(self) -> dict[str, Connection]:
        return {a: c for a, c in self._conns.items() if not c.closed}

    def is_connected(self, addr: str) -> bool:
        """An open connection to addr exists now (a request sent on it needs no connect)."""
        conn = self._conns.get(addr)
        return conn is not None and not conn.closed and not self._closed

    async def get_connection(self, addr: str, timeout_ms: int | None = None) -> Connection:
        if self._closed:
            raise RemotingConnectError("client is closed")
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            conn = await self._connect(addr, timeout_ms)
        except BaseException as e:
            err = e if isinstance(e, Exception) else RemotingConnectError(f"connect to {addr} cancelled")
            fut.set_exception(err)
            fut.exception()  # mark retrieved: waiters (if any) get it through shield()
            raise
        finally:
            if self._connecting.get(addr) is fut:
                del self._connecting[addr]
        if self._closed:
            conn.abort()
            fut.set_exception(RemotingConnectError("client is closed"))
            fut.exception()
            raise RemotingConnectError("client is closed")
        self._conns[addr] = conn
        fut.set_result(conn)
        return conn

    async def _connect(self, addr: str, timeout_ms: int | None) -> Connection:
        host, port = split_addr(addr)
        loop = asyncio.get_running_loop()
        timeout = self.connect_timeout_ms if timeout_ms is None else min(timeout_ms, self.connect_timeout_ms)

        def factory() -> Connection:
            return Connection(self._handler, name=f"{self.name}->{addr}", max_frame_size=self._max_frame_size,
                              idle_timeout_s=self._idle_timeout_s, high_water=DEFAULT_HIGH_WATER,
                              low_water=DEFAULT_LOW_WATER, on_close=lambda c: self._forget(addr, c))

        try:
            async with asyncio.timeout(timeout / 1000.0):
                if self._ssl is None:
                    _, conn = await loop.create_connection(factory, host, port)
                else:
                    _, conn = await loop.create_connection(factory, host, port, ssl=self._ssl, server_hostname=host)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {timeout} ms") from None
        except ssl.SSLError as e:
            raise RemotingConnectError(f"TLS handshake with {addr} failed: {e.reason or e}") from None
        except OSError as e:
            raise RemotingConnectError(f"connect to {addr} failed: {e.strerror or e}") from None
        return conn

    def _forget(self, addr: str, conn: Connection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> Coroutine[Any, Any, RemotingCommand]:
        """The request's answer (a coroutine to await). Connected already: the connection's own invoke() (no
        coroutine of this layer in between), else connect first."""
        if self._sign is not None:
            self._sign(cmd)
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed and not self._closed:  # hot path: connected already
            return conn.invoke(cmd, timeout_ms)
        return self._connect_and_invoke(addr, cmd, timeout_ms)

    async def _connect_and_invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        loop = asyncio.get_running_loop()
        start = loop.time()
        conn = await self.get_connection(addr, timeout_ms)
        remaining_ms = timeout_ms - (loop.time() - start) * 1000.0
        if remaining_ms <= 0:
            raise RemotingTimeoutError(f"wait response on {addr} timeout, {timeout_ms} ms (spent connecting)")
        return await conn.invoke(cmd, remaining_ms)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        if self._sign is not None:
            self._sign(cmd)
        conn = await self.get_connection(addr)
        conn.invoke_oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()  # graceful: flush frames already written (e.g. a final oneway)
        if conns:
            waits = [asyncio.ensure_future(c.wait_closed()) for c in conns]
            _, not_done = await asyncio.wait(waits, timeout=1.0)
            for conn in conns:
                if not conn.closed:
                    conn.abort()
            if not_done:
                await asyncio.wait(not_done, timeout=1.0)
                for fut in not_done:
                    fut.cancel()

