"""Write coalescing in Connection: frames queued by send() leave in one transport write per loop iteration, in
order; close() flushes what is queued; abort() drops it; a large queue is handed over at once (back-pressure)."""

import asyncio

import pytest
import uvloop

from orbitmq.protocol import FrameDecoder, RemotingCommand, encode_frame
from orbitmq.protocol.frame import EncodedResponse
from orbitmq.remoting import Connection, RemotingClient, RemotingServer


class FakeTransport:
    """Records writes; optional back-pressure like a real transport (pause_writing above `high`)."""

    def __init__(self, protocol: Connection | None = None, high: int = 1 << 30) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.aborted = False
        self.protocol = protocol
        self.high = high
        self.buffered = 0

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name in ("peername", "sockname") else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def write(self, data: bytes) -> None:
        assert not self.closing, "write after close"
        self.writes.append(bytes(data))
        self.buffered += len(data)
        if self.protocol is not None and self.buffered > self.high:
            self.protocol.pause_writing()

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def frames_of(writes: list[bytes]) -> list[RemotingCommand]:
    return FrameDecoder().feed(b"".join(writes))


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def runner(coro):
        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(asyncio.wait_for(coro, 20))

    return runner


def test_sends_in_one_iteration_leave_in_one_write_in_order(run):
    async def main():
        conn = Connection(None, idle_timeout_s=0)
        tr = FakeTransport()
        conn.connection_made(tr)
        cmds = [RemotingCommand.request(10, {"i": str(i)}, b"b%d" % i) for i in range(50)]
        for c in cmds:
            conn.send(c)
        assert tr.writes == []  # queued, not written yet
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(tr.writes) == 1
        assert [c.ext_fields["i"] for c in frames_of(tr.writes)] == [str(i) for i in range(50)]
        conn.send(cmds[0])  # a later iteration: a new write
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(tr.writes) == 2
        assert tr.writes[1] == encode_frame(cmds[0])

    run(main())


def test_close_flushes_queued_frames_and_abort_drops_them(run):
    async def main():
        conn = Connection(None, idle_timeout_s=0)
        tr = FakeTransport()
        conn.connection_made(tr)
        conn.send(RemotingCommand.request(1))
        conn.send(RemotingCommand.request(2))
        conn.close()
        assert tr.closing and [c.code for c in frames_of(tr.writes)] == [1, 2]
        conn.send(RemotingCommand.request(3))  # after close: dropped
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [c.code for c in frames_of(tr.writes)] == [1, 2]

        conn2 = Connection(None, idle_timeout_s=0)
        tr2 = FakeTransport()
        conn2.connection_made(tr2)
        conn2.send(RemotingCommand.request(1))
        conn2.abort()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert tr2.aborted and tr2.writes == []

    run(main())


def test_queue_above_high_water_is_handed_to_the_transport_at_once(run):
    """Back-pressure still works: the transport sees the bytes (and calls pause_writing) without waiting."""
    async def main():
        conn = Connection(None, idle_timeout_s=0, high_water=64 * 1024, low_water=16 * 1024)
        tr = FakeTransport(conn, high=64 * 1024)
        conn.connection_made(tr)
        big = b"x" * (40 * 1024)
        conn.send(RemotingCommand.request(1, body=big))
        assert tr.writes == []
        conn.send(RemotingCommand.request(2, body=big))  # queue now above high water: written synchronously
        assert len(tr.writes) == 1 and [c.code for c in frames_of(tr.writes)] == [1, 2]
        assert conn.reading_paused
        conn.resume_writing()
        assert not conn.reading_paused

    run(main())


def test_responses_of_one_chunk_leave_in_one_write(run):
    async def main():
        conn = Connection(lambda c, cmd: cmd.response(remark=str(cmd.code)), idle_timeout_s=0)
        tr = FakeTransport()
        conn.connection_made(tr)
        conn.data_received(b"".join(encode_frame(RemotingCommand.request(i)) for i in range(1, 21)))
        assert len(tr.writes) == 1  # flushed at the end of data_received, no loop iteration needed
        assert [c.remark for c in frames_of(tr.writes)] == [str(i) for i in range(1, 21)]

    run(main())


def test_synchronous_responses_schedule_no_extra_flush_and_later_sends_still_leave(run):
    """The write at the end of data_received is the only flush for that chunk (no callback left for the loop);
    a send() outside data_received is still flushed on the next loop iteration."""
    async def main():
        conn = Connection(lambda c, cmd: cmd.response(remark=str(cmd.code)), idle_timeout_s=0)
        tr = FakeTransport()
        conn.connection_made(tr)
        flushes = []
        flush = conn._flush_writes

        def counting_flush(*args: bool) -> None:
            flushes.append(len(conn._wbuf))
            flush(*args)

        conn._flush_writes = counting_flush  # type: ignore[method-assign]
        conn.data_received(b"".join(encode_frame(RemotingCommand.request(i)) for i in range(1, 4)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert flushes == [3] and len(tr.writes) == 1
        conn.send(RemotingCommand.request(9))
        assert len(tr.writes) == 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert flushes == [3, 1] and [c.code for c in frames_of(tr.writes[1:])] == [9]
        conn.data_received(encode_frame(RemotingCommand.request(5)))  # a chunk after that: one write again
        assert len(tr.writes) == 3

    run(main())


def test_concurrent_invokes_over_tcp_all_answered_in_order(run):
    async def main():
        seen: list[int] = []

        def handler(conn, cmd):
            seen.append(int(cmd.ext_fields["n"]))
            return cmd.response(ext_fields={"n": cmd.ext_fields["n"]})

        server = RemotingServer(handler, "127.0.0.1", 0)
        await server.start()
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        try:
            await client.invoke(addr, RemotingCommand.request(7, {"n": "-1"}))  # connect first: sends start in order
            seen.clear()
            resps = await asyncio.gather(*(client.invoke(addr, RemotingCommand.request(7, {"n": str(i)}))
                                           for i in range(200)))
            assert [r.ext_fields["n"] for r in resps] == [str(i) for i in range(200)]
            assert seen == list(range(200))  # the server saw the requests in send order
        finally:
            await client.close()
            await server.stop()

    run(main())


class _ManyHandler:
    """A handler with a `many` form (as the broker's Router): records how the requests of each read arrive."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def __call__(self, conn, cmd):
        self.calls.append(("one", [cmd.opaque]))
        return cmd.response(0, "one")

    def many(self, conn, cmds):
        self.calls.append(("many", [c.opaque for c in cmds]))
        out = []
        for c in cmds:
            if c.opaque == 2:
                out.append(ValueError("request 2 failed"))
            elif c.opaque == 3:
                out.append(None)  # nothing to send (a oneway's answer, a request answered later)
            elif c.opaque == 5:  # an answer the handler encoded itself: written as is
                out.append(EncodedResponse(0, encode_frame(c.response(0, "encoded 5"))))
            else:
                out.append(c.response(0, f"many {c.opaque}"))
        return out


def test_the_requests_of_one_read_go_to_the_handlers_many_form_and_are_answered_in_one_write(run):
    async def main():
        handler = _ManyHandler()
        conn = Connection(handler, idle_timeout_s=0)
        tr = FakeTransport()
        conn.connection_made(tr)
        reqs = []
        for i in (1, 2, 3, 4, 5):
            r = RemotingCommand.request(10, {})
            r.opaque = i
            reqs.append(r)
        conn.data_received(b"".join(encode_frame(r) for r in reqs))
        assert handler.calls == [("many", [1, 2, 3, 4, 5])]
        assert len(tr.writes) == 1
        answers = frames_of(tr.writes)
        # 2: SYSTEM_ERROR, 3: none, 5: its own frame
        assert [(a.opaque, a.code) for a in answers] == [(1, 0), (2, 1), (4, 0), (5, 0)]
        assert "request 2 failed" in (answers[1].remark or "")
        assert answers[3].remark == "encoded 5"
        oneway = RemotingCommand.request(10, {})
        oneway.opaque, oneway.flag = 5, oneway.flag | 2
        conn.data_received(encode_frame(reqs[0]) + encode_frame(oneway))  # an encoded answer to a oneway: dropped
        assert [a.opaque for a in frames_of(tr.writes[1:])] == [1]
        conn.data_received(encode_frame(reqs[0]))  # one request in a read: the plain call
        assert handler.calls[-1] == ("one", [1])
        conn.abort()

    run(main())
