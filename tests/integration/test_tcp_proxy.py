"""orbitmq.testing.tcp_proxy against an in-process remoting server on 127.0.0.1: frames pass both ways, a chosen
request's response is lost (the request is served), frames can be rewritten, block() refuses connections until
unblock(), cut() resets live connections, delay_ms holds traffic back."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from orbitmq.base.errors import RemotingConnectError, RemotingTimeoutError
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.remoting import RemotingClient, RemotingServer
from orbitmq.testing.tcp_proxy import TcpProxy, rewrite_addresses

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


class _Echo:
    def __init__(self) -> None:
        self.served: list[int] = []

    def __call__(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        self.served.append(cmd.code)
        return cmd.response(0, remark=f"served {cmd.code}", body=cmd.body)


async def _server() -> tuple[RemotingServer, _Echo]:
    echo = _Echo()
    srv = RemotingServer(echo, "127.0.0.1", 0, name="echo")
    await srv.start()
    return srv, echo


def test_a_lost_response_times_out_but_the_request_was_served() -> None:
    async def main() -> None:
        srv, echo = await _server()
        client = RemotingClient()
        try:
            async with TcpProxy(f"127.0.0.1:{srv.port}") as proxy:
                ok = await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.HEART_BEAT), 3000)
                assert ok.code == 0 and ok.remark == f"served {RequestCode.HEART_BEAT}"
                proxy.lose_responses(RequestCode.SEND_MESSAGE_V2)
                with pytest.raises(RemotingTimeoutError):
                    await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {}), 300)
                assert echo.served == [RequestCode.HEART_BEAT, RequestCode.SEND_MESSAGE_V2]
                assert len(proxy.lost) == 1 and proxy.lost[0].is_response
                again = await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {}))
                assert again.code == 0  # only one response was lost, on the same connection
        finally:
            await client.close()
            await srv.stop()

    _run(main())


def test_hook_rewrites_addresses_in_bodies_coming_back() -> None:
    async def main() -> None:
        srv, _ = await _server()
        client = RemotingClient()
        try:
            hook = rewrite_addresses({"127.0.0.1:1": "127.0.0.1:2"})
            async with TcpProxy(f"127.0.0.1:{srv.port}", hook=hook) as proxy:
                req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, body=b'{"0":"127.0.0.1:1"}')
                resp = await client.invoke(proxy.addr, req)
                assert resp.body == b'{"0":"127.0.0.1:2"}'
        finally:
            await client.close()
            await srv.stop()

    _run(main())


def test_block_refuses_until_unblock_and_cut_resets_live_connections() -> None:
    async def main() -> None:
        srv, _ = await _server()
        client = RemotingClient(connect_timeout_ms=1000)
        try:
            async with TcpProxy(f"127.0.0.1:{srv.port}") as proxy:
                await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.HEART_BEAT))
                assert proxy.connections == 1
                await proxy.block()
                with pytest.raises(RemotingConnectError):
                    await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.HEART_BEAT), 1000)
                await proxy.unblock()
                await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.HEART_BEAT))
                conn = client.connections[proxy.addr]
                assert proxy.cut() == 1
                await asyncio.wait_for(conn.wait_closed(), 5)
                proxy.delay_ms = 200
                t0 = time.monotonic()
                await client.invoke(proxy.addr, RemotingCommand.request(RequestCode.HEART_BEAT), 5000)
                assert time.monotonic() - t0 >= 0.35  # held back once each way
        finally:
            await client.close()
            await srv.stop()

    _run(main())
