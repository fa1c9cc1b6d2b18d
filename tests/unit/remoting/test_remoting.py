"""Remoting on 127.0.0.1 (port 0): request/response, oneway, timeouts, server->client requests,
malformed frames, idle close, back-pressure, bind errors and clean shutdown."""

import asyncio
import socket
import struct

import pytest

from orbitmq.base.errors import ConfigError, RemotingConnectError, RemotingTimeoutError
from orbitmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, encode_frame
from orbitmq.remoting import Connection, RemotingClient, RemotingServer


def echo(conn: Connection, cmd: RemotingCommand):
    return cmd.response(remark="ok", ext_fields={"got": str(cmd.code)}, body=cmd.body)


async def started(handler=echo, **kw) -> RemotingServer:
    server = RemotingServer(handler, "127.0.0.1", 0, **kw)
    await server.start()
    return server


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_request_response_json_and_binary(run):
    async def main():
        server = await started()
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            for stype in (0, 1):
                req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T"}, b"body",
                                              serialize_type=stype)
                resp = await client.invoke(addr, req)
                assert resp.is_response and resp.opaque == req.opaque
                assert resp.remark == "ok" and resp.ext_fields == {"got": "30"} and resp.body == b"body"
                assert resp.serialize_type == stype  # replies in the request's serialization
            results = await asyncio.gather(*[
                client.invoke(addr, RemotingCommand.request(i, body=str(i).encode())) for i in range(200)])
            assert [r.body for r in results] == [str(i).encode() for i in range(200)]
            assert len(client.connections) == 1
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_async_handler_and_handler_errors_become_system_error(run):
    def handler(conn, cmd):
        if cmd.code == 2:
            async def fail():
                await asyncio.sleep(0.01)
                raise RuntimeError("boom later")
            return fail()

        async def later():
            await asyncio.sleep(0.01)
            return cmd.response(remark="async")
        return later()

    def sync_handler(conn, cmd):
        if cmd.code == 1:
            raise ValueError("the custom field <topic> is null")
        return handler(conn, cmd)

    async def main():
        server = await started(sync_handler)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            r1 = await client.invoke(addr, RemotingCommand.request(1))
            assert r1.code == ResponseCode.SYSTEM_ERROR and r1.remark == "the custom field <topic> is null"
            r2 = await client.invoke(addr, RemotingCommand.request(2))
            assert r2.code == ResponseCode.SYSTEM_ERROR and r2.remark == "boom later"
            r3 = await client.invoke(addr, RemotingCommand.request(3))
            assert r3.code == 0 and r3.remark == "async"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_oneway_gets_no_response_even_on_error(run):
    seen = []

    def handler(conn, cmd):
        seen.append(cmd)
        if cmd.code == 1:
            raise RuntimeError("ignored for oneway")
        return cmd.response()  # a response to a oneway request must not be sent

    async def main():
        server = await started(handler)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            await client.invoke_oneway(addr, RemotingCommand.request(1))
            await client.invoke_oneway(addr, RemotingCommand.request(15, {"commitOffset": "3"}))
            resp = await client.invoke(addr, RemotingCommand.request(99))  # ordered after the oneways
            assert resp.code == 0
            assert [c.code for c in seen] == [1, 15, 99]
            assert seen[0].is_oneway and seen[1].ext_fields == {"commitOffset": "3"}
            conn = client.connections[addr]
            assert conn.pending_count == 0
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_timeout_then_late_response_is_dropped(run):
    held = []

    def handler(conn, cmd):
        if cmd.code == RequestCode.PULL_MESSAGE:
            held.append((conn, cmd))
            return None  # long-poll style: answered later
        return cmd.response()

    async def main():
        server = await started(handler)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE), timeout_ms=100)
            conn, cmd = held[0]
            conn.send(cmd.response(ResponseCode.PULL_NOT_FOUND))  # nobody waits any more
            resp = await client.invoke(addr, RemotingCommand.request(30))
            assert resp.code == 0
            assert client.connections[addr].pending_count == 0
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_held_request_answered_later_with_send(run):
    held = []

    def handler(conn, cmd):
        held.append((conn, cmd))
        return None

    async def main():
        server = await started(handler)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            fut = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(11), timeout_ms=5000))
            while not held:
                await asyncio.sleep(0.005)
            conn, cmd = held[0]
            conn.send(cmd.response(remark="FOUND", body=b"msgs"))
            resp = await fut
            assert resp.remark == "FOUND" and resp.body == b"msgs"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_server_to_client_request_on_the_same_connection(run):
    server_conns = []

    def server_handler(conn, cmd):
        server_conns.append(conn)
        return cmd.response()

    def client_handler(conn, cmd):
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return cmd.response(body=b'{"running":true}')
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            notified.set()
            return None
        return None

    notified = None

    async def main():
        nonlocal notified
        notified = asyncio.Event()
        server = await started(server_handler)
        client = RemotingClient(client_handler)
        bare = RemotingClient()  # no handler: answers REQUEST_CODE_NOT_SUPPORTED
        addr = f"127.0.0.1:{server.port}"
        try:
            await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}"))
            sconn = server_conns[0]
            assert len(server.connections) == 1
            resp = await sconn.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                                              {"consumerGroup": "G"}))
            assert resp.is_response and resp.body == b'{"running":true}'
            sconn.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                        {"consumerGroup": "G"}))
            await asyncio.wait_for(notified.wait(), 5)
            assert len(server.connections) == 1  # still the client's one connection
            assert sconn.remote_addr == client.connections[addr].local_addr

            await bare.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}"))
            bconn = server_conns[-1]
            r = await bconn.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert r.remark == " request type 307 not supported"
        finally:
            await client.close()
            await bare.close()
            await server.stop()

    run(main())


def test_malformed_frame_closes_only_that_connection(run):
    closed = []

    async def main():
        server = await started(on_close=closed.append)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            assert (await client.invoke(addr, RemotingCommand.request(1))).code == 0
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            # a valid request first, then a frame whose header length exceeds the frame
            writer.write(encode_frame(RemotingCommand.request(7)) + struct.pack(">iI", 6, 100) + b"xx")
            await writer.drain()
            got = await asyncio.wait_for(reader.read(), 5)  # read until EOF: the server closed it
            frames = FrameDecoder().feed(got)
            assert [f.code for f in frames] == [0]  # the valid request was still answered
            writer.close()
            for _ in range(100):
                if closed:
                    break
                await asyncio.sleep(0.01)
            assert len(closed) == 1
            assert (await client.invoke(addr, RemotingCommand.request(2))).code == 0
            assert len(server.connections) == 1
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_bind_error_is_one_line_config_error(run):
    async def main():
        first = await started()
        try:
            second = RemotingServer(echo, "127.0.0.1", first.port)
            with pytest.raises(ConfigError) as ei:
                await second.start()
            assert str(ei.value) == f"cannot listen on 127.0.0.1:{first.port}: address already in use"
        finally:
            await first.stop()

    run(main())


def test_connect_error_and_bad_address(run):
    async def main():
        client = RemotingClient(connect_timeout_ms=1000)
        try:
            with pytest.raises(RemotingConnectError):
                await client.invoke(f"127.0.0.1:{free_port()}", RemotingCommand.request(1))
            with pytest.raises(RemotingConnectError):
                await client.invoke("no-port", RemotingCommand.request(1))
        finally:
            await client.close()

    run(main())


def test_pending_futures_fail_when_connection_drops_and_client_reconnects(run):
    def handler(conn, cmd):
        if cmd.code == 11:
            return None
        return cmd.response()

    async def main():
        server = await started(handler)
        port = server.port
        client = RemotingClient()
        addr = f"127.0.0.1:{port}"
        try:
            fut = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(11), timeout_ms=10_000))
            await asyncio.sleep(0.05)
            for c in server.connections:
                c.close()
            with pytest.raises(RemotingConnectError):
                await fut
            resp = await client.invoke(addr, RemotingCommand.request(1))  # reconnects on demand
            assert resp.code == 0
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_idle_connections_are_closed(run):
    async def main():
        server = await started(idle_timeout_s=0.2)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            await client.invoke(addr, RemotingCommand.request(1))
            conn = client.connections[addr]
            await asyncio.sleep(0.1)
            await client.invoke(addr, RemotingCommand.request(1))  # activity postpones the close
            await asyncio.sleep(0.15)
            assert not conn.closed
            await asyncio.wait_for(conn.wait_closed(), 2)
            assert not server.connections
            assert (await client.invoke(addr, RemotingCommand.request(1))).code == 0
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_back_pressure_pauses_reading_until_peer_drains(run):
    big = b"x" * (1024 * 1024)

    def handler(conn, cmd):
        return cmd.response(body=big)

    async def main():
        server = await started(handler, high_water=64 * 1024, low_water=16 * 1024)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            n = 64
            writer.write(b"".join(encode_frame(RemotingCommand.request(1)) for _ in range(n)))
            await writer.drain()
            (sconn,) = await _wait_for_connections(server, 1)
            for _ in range(200):
                if sconn.reading_paused:
                    break
                await asyncio.sleep(0.01)
            assert sconn.reading_paused
            dec = FrameDecoder(max_frame_size=32 * 1024 * 1024)
            frames = []
            while len(frames) < n:
                frames += dec.feed(await reader.read(1 << 20))
            assert all(f.body == big for f in frames)
            assert not sconn.reading_paused
        finally:
            writer.close()
            await server.stop()

    run(main())


async def _wait_for_connections(server, n):
    for _ in range(200):
        if len(server.connections) >= n:
            return list(server.connections)
        await asyncio.sleep(0.01)
    raise AssertionError("no connection")


def test_close_and_stop_leave_no_tasks_behind(run):
    cancelled = asyncio.Event

    async def main():
        was_cancelled = cancelled()

        async def slow():
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                was_cancelled.set()
                raise

        server = await started(lambda conn, cmd: slow())
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        fut = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(1), timeout_ms=30_000))
        await asyncio.sleep(0.05)
        await client.close()
        with pytest.raises(RemotingConnectError):
            await fut
        await asyncio.wait_for(was_cancelled.wait(), 5)
        await server.stop()
        with pytest.raises(RemotingConnectError):
            await client.invoke(addr, RemotingCommand.request(1))
        me = asyncio.current_task()
        assert {t for t in asyncio.all_tasks() if t is not me and t.get_coro().__name__ != "bounded"} == set()

    run(main())


@pytest.mark.parametrize("host,reason", [("203.0.113.7", "cannot assign requested address")])
def test_bind_error_for_foreign_address(run, host, reason):
    async def main():
        server = RemotingServer(echo, host, 0)
        with pytest.raises(ConfigError) as ei:
            await server.start()
        msg = str(ei.value)
        assert msg.startswith(f"cannot listen on {host}:0: {reason}") and "\n" not in msg

    run(main())


def test_handler_may_answer_then_close_the_connection(run):
    def handler(conn, cmd):
        conn.send(cmd.response(remark="bye"))
        conn.close()
        return None

    async def main():
        server = await started(handler)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            resp = await client.invoke(addr, RemotingCommand.request(35))
            assert resp.remark == "bye"
            conn = client.connections.get(addr)
            if conn is not None:
                await asyncio.wait_for(conn.wait_closed(), 5)
            assert (await client.invoke(addr, RemotingCommand.request(35))).remark == "bye"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_each_request_times_out_at_its_own_deadline_with_one_timer(run):
    """invoke()'s deadlines share one timer per connection, armed for the earliest: a later request with a shorter
    timeout re-arms it, and after a timeout it is armed again for the next one. Answered requests leave nothing."""
    held = []

    def handler(conn, cmd):
        if cmd.code == RequestCode.PULL_MESSAGE:
            held.append((conn, cmd))
            return None  # never answered
        return cmd.response()

    async def main():
        server = await started(handler)
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        loop = asyncio.get_running_loop()
        try:
            await client.invoke(addr, RemotingCommand.request(30))  # connected
            conn = client.connections[addr]
            t0 = loop.time()
            done: dict[str, float] = {}

            async def call(name: str, timeout_ms: int) -> None:
                with pytest.raises(RemotingTimeoutError, match=f"{timeout_ms} ms"):
                    await conn.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE), timeout_ms=timeout_ms)
                done[name] = loop.time() - t0

            slow = asyncio.create_task(call("slow", 1500))
            await asyncio.sleep(0)
            fast = asyncio.create_task(call("fast", 200))  # shorter than the armed timer: re-arms it
            middle = asyncio.create_task(call("middle", 700))
            await asyncio.wait_for(asyncio.gather(slow, fast, middle), 30)
            assert list(done) == ["fast", "middle", "slow"]
            assert done["fast"] >= 0.19 and done["middle"] >= 0.69 and done["slow"] >= 1.49
            assert done["fast"] < done["slow"] - 0.5  # not held until the first-armed deadline
            assert conn.pending_count == 0 and not conn._deadlines
            for _ in range(50):  # answered requests: no deadline left behind
                await conn.invoke(RemotingCommand.request(30), timeout_ms=60_000)
            assert not conn._deadlines
        finally:
            await client.close()
            await server.stop()

    run(main())
