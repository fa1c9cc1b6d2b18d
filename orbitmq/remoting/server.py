"""RemotingServer: listens on host:port, one Connection per accepted socket, all sharing one handler.

Bind failures become a one-line ConfigError; stop() closes every connection and cancels handler tasks.
ServerLimits (remoting/limits.py) bound connections (in all and per remote IP: one over the cap is closed at once),
the time to finish a started frame and the bytes buffered in unfinished frames; each hit is counted via `on_limit`.
Running out of descriptors on accept (EMFILE/ENFILE) is transient: the event loop stops accepting for a moment and
then accepts again (asyncio and uvloop both do), so nothing here has to restart the listener.
TLS (remoting/tls.py): "enforcing" serves TLS only; "permissive" runs its own accept loop that peeks at each new
socket's first byte (0x16: a TLS handshake) and wraps it or not, backing off on EMFILE like the event loop does.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
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
from orbitmq.remoting.tls import HANDSHAKE_TIMEOUT_S, looks_like_tls

_ACCEPT_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_BACKOFF_S = 0.2

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


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


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
        ssl_context: ssl.SSLContext | None = None,
        tls_mode: str = "enforcing",
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
        self._ssl = ssl_context
        self.tls_mode = "disabled" if ssl_context is None else tls_mode  # "enforcing" or "permissive"
        self._listen_sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._sniffing: set[asyncio.Task[None]] = set()
        self.tls_accepted = 0
        self.plain_accepted = 0

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
        if self.tls_mode == "permissive":
            await self._start_permissive(loop)
            return
        try:
            self._server = await loop.create_server(
                self._make_connection, self.host, self.port, reuse_address=True, backlog=self._backlog,
                ssl=self._ssl, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl is not None else None,
            )
        except OSError as e:
            raise ConfigError(bind_error_text(self.host, self.port, e)) from None
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("%s listening on %s:%d%s", self.name, self.host, self.port,
                 " (TLS only)" if self._ssl is not None else "")

    # ---- permissive TLS: plain and TLS on one port --------------------------------------------------
    async def _start_permissive(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family = infos[0][0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(infos[0][4])
                sock.listen(self._backlog)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
        except OSError as e:
            raise ConfigError(bind_error_text(self.host, self.port, e)) from None
        self._listen_sock = sock
        self.port = sock.getsockname()[1]
        self._accept_task = loop.create_task(self._accept_loop(loop, sock))
        log.info("%s listening on %s:%d (TLS permissive: plain and TLS)", self.name, self.host, self.port)

    async def _accept_loop(self, loop: asyncio.AbstractEventLoop, lsock: socket.socket) -> None:
        while True:
            try:
                conn_sock, _ = await loop.sock_accept(lsock)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                if e.errno in _ACCEPT_RESOURCE_ERRNOS:  # out of descriptors/buffers: transient, back off
                    log.warning("%s: accept failed (%s), retrying in %.1f s", self.name, os.strerror(e.errno or 0),
                                ACCEPT_BACKOFF_S)
                    await asyncio.sleep(ACCEPT_BACKOFF_S)
                    continue
                log.warning("%s: accept failed: %s", self.name, e)
                continue
            cap = self.limits.max_connections
            if 0 < cap <= len(self._sniffing) + len(self._connections):  # silent sockets count too
                conn_sock.close()
                self.refused_count += 1
                self._limit_hit(LIMIT_MAX_CONNECTIONS)
                continue
            task = loop.create_task(self._sniff(loop, conn_sock))
            self._sniffing.add(task)
            task.add_done_callback(self._sniffing.discard)

    async def _sniff(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        """Wait for the first byte (bounded by the handshake timeout), then hand the socket over, wrapped in
        TLS when that byte opens a handshake record."""
        sock.setblocking(False)
        try:
            first = await asyncio.wait_for(self._peek(loop, sock), HANDSHAKE_TIMEOUT_S)
        except (TimeoutError, OSError):
            sock.close()
            return
        except asyncio.CancelledError:
            sock.close()
            raise
        if not first:
            sock.close()  # closed before saying anything
            return
        tls = looks_like_tls(first)
        try:
            if tls:
                self.tls_accepted += 1
                await loop.connect_accepted_socket(self._make_connection, sock, ssl=self._ssl,
                                                   ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
            else:
                self.plain_accepted += 1
                await loop.connect_accepted_socket(self._make_connection, sock)
        except (OSError, ssl.SSLError, TimeoutError) as e:
            log.info("%s: %s connection setup failed: %s", self.name, "TLS" if tls else "plain", e)
            sock.close()

    @staticmethod
    async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
        while True:
            try:
                return sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                pass
            fut: asyncio.Future[None] = loop.create_future()
            fd = sock.fileno()
            loop.add_reader(fd, _wake, fut)
            try:
                await fut
            finally:
                loop.remove_reader(fd)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        task, self._accept_task = self._accept_task, None
        if task is not None:
            task.cancel()
            for t in list(self._sniffing):
                t.cancel()
            await asyncio.gather(task, *self._sniffing, return_exceptions=True)
        lsock, self._listen_sock = self._listen_sock, None
        if lsock is not None:
            lsock.close()
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
