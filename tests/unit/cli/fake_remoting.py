"""A RemotingServer on 127.0.0.1 in a background thread with a scripted handler, for CLI command tests: the
command runs on its own event loop (run_async) in the test thread, the server on another."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from click.testing import CliRunner, Result

from orbitmq.protocol import RemotingCommand, ResponseCode
from orbitmq.remoting import RemotingServer

Reply = Callable[[RemotingCommand], RemotingCommand]


class FakeServer:
    """Answers each request code with `replies[code](cmd)` (REQUEST_CODE_NOT_SUPPORTED otherwise) and records
    every request it receives."""

    def __init__(self) -> None:
        self.replies: dict[int, Reply] = {}
        self.requests: list[RemotingCommand] = []
        self._loop = asyncio.new_event_loop()
        self._server = RemotingServer(self._handle, "127.0.0.1", 0, name="fake")
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-remoting", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._server.start(), self._loop).result(5)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self._server.port}"

    def codes(self) -> list[int]:
        return [c.code for c in self.requests]

    def _handle(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd)
        reply = self.replies.get(cmd.code)
        if reply is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {cmd.code} not supported")
        return reply(cmd)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def run(*args: str) -> Result:
    """`orbitmq ARGS...` in-process (stdout and stderr kept apart)."""
    from orbitmq.cli.main import main

    return CliRunner().invoke(main, list(args))
