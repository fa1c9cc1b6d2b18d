"""Server limits on 127.0.0.1 (port 0), on asyncio and uvloop: connection caps (all / per IP) refuse and count,
a started frame must finish in time (a 1-byte trickle is closed), and the input budget pauses readers holding
unfinished frames and lets them all finish in turn."""

from __future__ import annotations

import asyncio
import socket
import struct

from orbitmq.protocol import FrameDecoder, RemotingCommand, RequestCode, encode_frame
from orbitmq.remoting import Connection, RemotingServer
from orbitmq.remoting.limits import (
    LIMIT_FRAME_DEADLINE,
    LIMIT_INPUT_BUDGET,
    LIMIT_MAX_CONNECTIONS,
    LIMIT_MAX_CONNECTIONS_PER_IP,
    InputBudget,
    ServerLimits,
)


def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(remark="ok", body=cmd.body)


async def until(cond, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def limited_server(hits: list[str], **limits) -> RemotingServer:
    server = RemotingServer(echo, "127.0.0.1", 0, limits=ServerLimits(**limits), on_limit=hits.append)
    await server.start()
    return server


async def roundtrip(port: int, body: bytes = b"x") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T"}, body)
        writer.write(encode_frame(req))
        dec = FrameDecoder()
        while True:
            chunk = await reader.read(65536)
            assert chunk, "closed before the answer"
            frames = dec.feed(chunk)
            if frames:
                return frames[0].body
    finally:
        writer.close()


async def closed_by_peer(reader: asyncio.StreamReader, timeout_s: float = 10.0) -> bool:
    try:
        data = await asyncio.wait_for(reader.read(1), timeout_s)
    except (ConnectionResetError, BrokenPipeError):
        return True
    return data == b""


def test_per_ip_cap_refuses_the_extra_connection_and_admits_again_after_a_close(run):
    async def main():
        hits: list[str] = []
        server = await limited_server(hits, max_connections_per_ip=2)
        try:
            a = await asyncio.open_connection("127.0.0.1", server.port)
            b = await asyncio.open_connection("127.0.0.1", server.port)
            await until(lambda: len(server.connections) == 2, what="two admitted")
            c = await asyncio.open_connection("127.0.0.1", server.port)
            assert await closed_by_peer(c[0]), "the third connection from one IP stays open"
            assert hits == [LIMIT_MAX_CONNECTIONS_PER_IP] and server.refused_count == 1
            assert len(server.connections) == 2
            a[1].close()
            await until(lambda: len(server.connections) == 1, what="close seen")
            assert await roundtrip(server.port, b"again") == b"again"
            b[1].close()
            c[1].close()
        finally:
            await server.stop()

    run(main())


def test_global_cap(run):
    async def main():
        hits: list[str] = []
        server = await limited_server(hits, max_connections=3, max_connections_per_ip=0)
        try:
            conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
            await until(lambda: len(server.connections) == 3, what="three admitted")
            extra = await asyncio.open_connection("127.0.0.1", server.port)
            assert await closed_by_peer(extra[0])
            assert hits == [LIMIT_MAX_CONNECTIONS]
            for _, w in conns + [extra]:
                w.close()
            await until(lambda: not server.connections, what="all closed")
            assert await roundtrip(server.port) == b"x"
        finally:
            await server.stop()

    run(main())


def test_a_trickled_frame_is_closed_at_its_deadline_and_complete_frames_are_not(run):
    async def main():
        hits: list[str] = []
        server = await limited_server(hits, frame_deadline_ms=400)
        try:
            frame = encode_frame(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T"}, b"body"))
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            loop = asyncio.get_running_loop()
            start = loop.time()
            closed = False
            for byte in frame[:-1]:  # slowloris: one byte every 50 ms, never the last one
                writer.write(bytes([byte]))
                try:
                    await writer.drain()
                except ConnectionError:
                    closed = True
                    break
                await asyncio.sleep(0.05)
                if server.connections == frozenset() or reader.at_eof():
                    closed = True
                    break
            assert closed or await closed_by_peer(reader, 5)
            elapsed = loop.time() - start
            assert 0.35 <= elapsed < 5, elapsed
            assert hits == [LIMIT_FRAME_DEADLINE]
            writer.close()
            # a client that sends whole frames and then idles past the deadline is not touched
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(frame)
            dec = FrameDecoder()
            got: list = []
            while not got:
                got = dec.feed(await reader.read(65536))
            await asyncio.sleep(0.8)  # twice the deadline with nothing pending: must stay open
            writer.write(frame)
            got = []
            while not got:
                chunk = await reader.read(65536)
                assert chunk, "an idle connection without an open frame was closed"
                got = dec.feed(chunk)
            assert hits == [LIMIT_FRAME_DEADLINE]
            writer.close()
        finally:
            await server.stop()

    run(main())


def test_input_budget_pauses_readers_over_it_and_every_frame_completes(run):
    async def main():
        hits: list[str] = []
        server = await limited_server(hits, input_buffer_budget=256 * 1024, frame_deadline_ms=0)
        n = 6
        body = b"b" * (120 * 1024)
        frames = [encode_frame(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"i": str(i)}, body))
                  for i in range(n)]
        try:
            streams = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(n)]
            await until(lambda: len(server.connections) == n, what="all admitted")
            for (_, w), f in zip(streams, frames, strict=True):  # first halves: 6 x 60 KiB+ unfinished
                w.write(f[: len(f) // 2])
                await w.drain()
            await until(lambda: server.input_budget.total > 256 * 1024 or server.input_budget.paused > 0,
                        what="budget reached")
            await until(lambda: server.input_budget.paused > 0, what="a reader paused")
            assert LIMIT_INPUT_BUDGET in hits
            for (_, w), f in zip(streams, frames, strict=True):
                w.write(f[len(f) // 2:])  # paused peers' bytes wait in the kernel until their turn
            for r, _ in streams:
                dec = FrameDecoder()
                got: list = []
                while not got:
                    chunk = await r.read(1 << 20)
                    assert chunk, "closed before the answer"
                    got = dec.feed(chunk)
                assert got[0].body == body
            await until(lambda: server.input_budget.total == 0 and server.input_budget.paused == 0,
                        what="budget drained")
            for _, w in streams:
                w.close()
        finally:
            await server.stop()

    run(main())


class FakeConn:
    def __init__(self) -> None:
        self.paused = False

    def pause_input(self) -> None:
        self.paused = True

    def resume_input(self) -> None:
        self.paused = False


def test_input_budget_keeps_one_finisher_and_resumes_in_order():
    hits: list[str] = []
    b = InputBudget(100, hits.append)
    a, c, d = FakeConn(), FakeConn(), FakeConn()
    b.update(a, 60)
    b.update(c, 60)  # over: c is the first over the budget -> the finisher, keeps reading
    assert not c.paused and not a.paused
    b.update(d, 10)
    assert d.paused and hits == [LIMIT_INPUT_BUDGET]
    b.update(a, 70)  # a grows while over: paused
    assert a.paused
    b.update(c, 0)  # the finisher's frame completed: the oldest paused resumes as the next finisher
    assert not d.paused and a.paused
    b.update(d, 0)  # total 70 > low mark 50, the finisher done: next one resumes
    assert not a.paused
    b.update(a, 0)
    assert b.total == 0 and b.paused == 0


def test_refused_socket_sees_a_close_not_a_hang():
    """Raw socket view of a refusal (what a RocketMQ client sees): EOF or reset right after connect."""

    async def main():
        hits: list[str] = []
        server = await limited_server(hits, max_connections=1, max_connections_per_ip=0)
        try:
            keep = await asyncio.open_connection("127.0.0.1", server.port)
            await until(lambda: len(server.connections) == 1)

            def probe() -> bytes:
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
                    s.settimeout(5)
                    s.sendall(struct.pack(">i", 4))
                    try:
                        return s.recv(10)
                    except ConnectionResetError:
                        return b""

            assert await asyncio.to_thread(probe) == b""
            keep[1].close()
        finally:
            await server.stop()

    asyncio.run(main())


def test_name_server_and_controller_confs_carry_the_limit_keys(tmp_path):
    from orbitmq.controller.config import load_controller_conf
    from orbitmq.namesrv import load_namesrv_conf
    from orbitmq.remoting.limits import limits_of

    ns = tmp_path / "namesrv.conf"
    ns.write_text("serverMaxConnectionsPerIp=7\nserverFrameDeadlineMs=900\ntls.server.mode=permissive\n")
    loaded = load_namesrv_conf(str(ns))
    cfg = loaded[0] if isinstance(loaded, tuple) else loaded
    assert limits_of(cfg) == ServerLimits(10_000, 7, 900, 256 * 1024 * 1024)
    assert cfg.tls_server_mode == "permissive"
    ctl = tmp_path / "controller.conf"
    ctl.write_text(f"controllerDLegerGroup=g\ncontrollerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n"
                   f"controllerStorePath={tmp_path / 'ctl'}\nserverMaxConnections=5\nserverInputBufferBudget=0\n")
    loaded = load_controller_conf(str(ctl))
    cfg = loaded[0] if isinstance(loaded, tuple) else loaded
    assert limits_of(cfg) == ServerLimits(5, 1_000, 30_000, 0)
