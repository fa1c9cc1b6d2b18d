"""TcpProxy: a test-only TCP proxy on 127.0.0.1 between clients and one target address, with fault controls: lose
the responses to chosen requests, rewrite or drop RocketMQ remoting frames, hold traffic back, cut the live
connections, refuse new ones (a partition) and heal. Integration tests and simulations only; nothing under
orbitmq/ imports it. `frames=False` forwards raw bytes (for protocols that are not remoting frames, such as HA).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Literal

from orbitmq.protocol import FrameDecoder, RemotingCommand, encode_frame

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"
UP: Literal["up"] = "up"  # client -> target
DOWN: Literal["down"] = "down"  # target -> client
Direction = Literal["up", "down"]
# (direction, command) -> the command to forward (the same or a changed one) or None to drop it
FrameHook = Callable[[Direction, RemotingCommand], "RemotingCommand | None"]
_CHUNK = 256 * 1024


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or LOCALHOST, int(port)


class _Link:
    """One proxied connection: the client side, the target side, and the requests whose response is to be lost."""

    __slots__ = ("client", "target", "lose", "tasks")

    def __init__(self, client: asyncio.StreamWriter, target: asyncio.StreamWriter) -> None:
        self.client = client
        self.target = target
        self.lose: set[int] = set()  # opaques of requests whose response is dropped
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for w in (self.client, self.target):
            w.transport.abort()
        for t in self.tasks:
            t.cancel()


class TcpProxy:
    """`async with TcpProxy("127.0.0.1:10911") as p:` then point a client at `p.addr`.

    Controls (call from the proxy's event loop): `lose_responses(code, n)` drops the responses to the next n
    requests with that request code (they reach the target, their answers never come back; see `lost`);
    `hook` sees every frame and may change or drop it; `delay_ms` holds each chunk back in both directions;
    `cut()` aborts the live connections; `await block()` also refuses new ones (connect fails) until
    `await unblock()`.
    """

    def __init__(self, target: str, *, frames: bool = True, port: int = 0, hook: FrameHook | None = None,
                 name: str = "proxy") -> None:
        self.target = target
        self.frames = frames
        self.hook = hook
        self.name = name
        self.delay_ms = 0.0
        self.port = port
        self.lost: list[RemotingCommand] = []  # responses dropped by lose_responses
        self.accepted = 0
        self._lose: dict[int, int] = {}  # request code -> responses still to lose
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def addr(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def connections(self) -> int:
        return len(self._links)

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, LOCALHOST, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        await self.block()
        for t in list(self._handlers):
            t.cancel()
        for t in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- fault controls ------------------------------------------------------------------------------------
    def lose_responses(self, request_code: int, count: int = 1) -> None:
        """The responses to the next `count` requests with this code are dropped (the requests are delivered)."""
        if not self.frames:
            raise ValueError("lose_responses needs frames=True")
        self._lose[int(request_code)] = self._lose.get(int(request_code), 0) + count

    def cut(self) -> int:
        """Abort every live connection (both sides see a reset); returns how many there were."""
        links = list(self._links)
        for link in links:
            link.abort()
        self._links.clear()
        return len(links)

    async def block(self) -> None:
        """Partition: stop listening (a connect is refused) and cut the live connections."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.cut()

    async def unblock(self) -> None:
        """Heal a block(): listen again on the same port."""
        if self._server is None:
            await self.start()

    # ---- forwarding ----------------------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # blocked after the connection was accepted
            writer.transport.abort()
            return
        try:
            t_reader, t_writer = await asyncio.open_connection(*_split(self.target))
        except OSError as e:
            log.debug("%s: target %s unreachable: %s", self.name, self.target, e)
            writer.transport.abort()
            return
        self.accepted += 1
        link = _Link(writer, t_writer)
        self._links.add(link)
        link.tasks = [asyncio.ensure_future(self._pump(reader, t_writer, UP, link)),
                      asyncio.ensure_future(self._pump(t_reader, writer, DOWN, link))]
        try:
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            link.abort()  # one side closed: close the other (a half-open link helps no test)
            self._links.discard(link)
            for t in link.tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction,
                    link: _Link) -> None:
        decoder = FrameDecoder() if self.frames else None
        while True:
            data = await reader.read(_CHUNK)
            if not data:
                return
            if self.delay_ms > 0:
                await asyncio.sleep(self.delay_ms / 1000)
            if decoder is not None:
                out = [encode_frame(c) for cmd in decoder.feed(data) if (c := self._pass(direction, cmd, link))]
                data = b"".join(out)
            if data:
                writer.write(data)
                await writer.drain()

    def _pass(self, direction: Direction, cmd: RemotingCommand, link: _Link) -> RemotingCommand | None:
        if direction == UP and not cmd.is_response and not cmd.is_oneway:
            left = self._lose.get(cmd.code, 0)
            if left > 0:
                self._lose[cmd.code] = left - 1
                link.lose.add(cmd.opaque)
        elif direction == DOWN and cmd.is_response and cmd.opaque in link.lose:
            link.lose.discard(cmd.opaque)
            self.lost.append(cmd)
            return None
        hook = self.hook
        return cmd if hook is None else hook(direction, cmd)


def rewrite_addresses(mapping: dict[str, str]) -> FrameHook:
    """A hook that replaces broker addresses in the bodies of frames the target sends (route answers of a name
    server, pushed route changes), so that a client reaches those brokers through proxies."""
    pairs = [(f"\"{a}\"".encode(), f"\"{b}\"".encode()) for a, b in mapping.items()]  # JSON strings only

    def hook(direction: Direction, cmd: RemotingCommand) -> RemotingCommand:
        if direction == DOWN and cmd.body:
            body = bytes(cmd.body)
            for a, b in pairs:
                body = body.replace(a, b)
            cmd.body = body
        return cmd

    return hook
