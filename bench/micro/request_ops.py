"""Per-request cost of the single-send path outside the store, split into its parts, as callgrind instruction
counts (deterministic on a loaded machine) or process CPU time.

    .venv/bin/python bench/micro/request_ops.py                # CPU µs per op
    .venv/bin/python bench/micro/request_ops.py --callgrind    # instructions per op (valgrind, ~2 min)
    .venv/bin/python bench/micro/request_ops.py --run OP N     # one op N times (what the modes above spawn)

Ops (one SEND_MESSAGE_V2 request of a 1 KiB body, as the SDK sends it):
  decode_send     FrameDecoder.feed of one request frame
  handler_glue    SendProcessor.dispatch against a store stub that answers PUT_OK at once (header reads, checks,
                  properties, MessageInner, response command, stats) — the handler without the store
  encode_resp     encode_frame of the PUT_OK response
  stats_on_put    BrokerStats.on_put
  conn_request    Connection.data_received of one frame → Router → dispatch (store stub) → response written to a
                  transport stub, then one event-loop turn (so callbacks scheduled by the request run too)
  conn_request8   the same with 8 request frames in each read (the SDK's 8 concurrent senders on one connection:
                  one data_received, one response write, one loop turn per 8 requests), per request
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

# bench/micro/callgrind.py: this folder is sys.path[0] when the script runs
from callgrind import instructions

OPS = ["decode_send", "handler_glue", "encode_resp", "stats_on_put", "conn_request", "conn_request8"]
WARMUP = int(os.environ.get("REQUEST_OPS_WARMUP", "300"))


class _Conn:
    remote_addr = "127.0.0.1:5555"
    closed = False
    attrs: dict[str, object] = {}


class _Transport:
    """Accepts writes and counts them."""

    def __init__(self) -> None:
        self.writes = 0

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.writes += 1


class _StubStore:
    """put_messages_nowait answering PUT_OK with increasing offsets (what an ASYNC_FLUSH store answers)."""

    def __init__(self) -> None:
        from orbitmq.store import PutResult, PutStatus

        self.offset = 0
        self._result = PutResult
        self._ok = PutStatus.PUT_OK

    def admission_remark(self) -> str | None:
        return None  # a disk that keeps up: admission control (store-fail, #12.4) lets every send in

    def put_messages_nowait(self, msgs: list[Any]) -> tuple[Any, int]:
        self.offset += 1
        return self._result(self._ok, self.offset * 1200, 1200, [f"7F00000100002A9F{self.offset:016X}"],
                            self.offset, 1, 1_700_000_000_000), -1


def _frames(n: int) -> list[bytes]:
    from orbitmq.model.properties import encode_properties
    from orbitmq.protocol import RemotingCommand, RequestCode, encode_frame, to_send_v2

    body = os.urandom(1024)
    out = []
    for i in range(n):
        ext = {"producerGroup": "PG", "topic": "LoadT", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": str(i & 3), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
               "properties": encode_properties({"UNIQ_KEY": f"7F0000010F3A18B4AAC2{i:012X}", "WAIT": "true",
                                                "TAGS": "TagA"}),
               "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        out.append(encode_frame(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, to_send_v2(ext), body)))
    return out


def _processor(root: str) -> Any:
    from orbitmq.broker.client_registry import ClientRegistry
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.handlers.send import SendProcessor
    from orbitmq.broker.metadata.groups import SubscriptionGroupManager
    from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
    from orbitmq.broker.metadata.topics import TopicConfigManager
    from orbitmq.broker.stats import BrokerStats

    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    cfg_dir = os.path.join(root, "config")
    ctx = BrokerContext(cfg, _StubStore(), TopicConfigManager(cfg_dir, cfg),  # type: ignore[arg-type]
                        SubscriptionGroupManager(cfg_dir, cfg), ConsumerOffsetManager(cfg_dir), ClientRegistry(),
                        BrokerStats(), "127.0.0.1:10911")
    return SendProcessor(ctx)


def run(name: str, n: int) -> float:
    """Run `name` WARMUP + n times; returns CPU seconds of the n measured runs."""
    from orbitmq.protocol import encode_frame
    from orbitmq.protocol.frame import FrameDecoder

    total = WARMUP + max(n, 300)  # same setup for n and 0 runs: callgrind subtracts the two
    with tempfile.TemporaryDirectory(prefix="orbitmq-req-") as root:
        frames = _frames(total)
        if name == "decode_send":
            decoder = FrameDecoder()

            def op() -> None:
                decoder.feed(frames.pop())
            return _timed(op, n)
        proc = _processor(root)
        conn = _Conn()
        reqs = [FrameDecoder().feed(f)[0] for f in frames]
        if name == "handler_glue":
            return _timed(lambda: proc.dispatch(conn, reqs.pop()), n)
        if name == "encode_resp":
            resps = [proc.dispatch(conn, r) for r in reqs]
            return _timed(lambda: encode_frame(resps.pop()), n)
        if name == "stats_on_put":
            on_put = proc.ctx.stats.on_put
            return _timed(lambda: on_put(1, 1200), n)
        if name == "conn_request":
            return _conn_request(proc, frames, n, 1)
        if name == "conn_request8":
            return _conn_request(proc, frames, n, 8)
    raise ValueError(name)


def _timed(op: Callable[[], object], n: int) -> float:
    for _ in range(WARMUP):
        op()
    t0 = time.process_time()
    for _ in range(n):
        op()
    return time.process_time() - t0


def _conn_request(proc: Any, frames: list[bytes], n: int, per_read: int) -> float:
    """`per_read` request frames in each read; CPU seconds scaled to n requests."""
    from orbitmq.broker.router import Router
    from orbitmq.protocol import RequestCode
    from orbitmq.remoting.connection import Connection

    router = Router({int(RequestCode.SEND_MESSAGE_V2): proc.dispatch})
    warm, reads = WARMUP // per_read, n // per_read
    chunks = [b"".join(frames[i * per_read:(i + 1) * per_read]) for i in range(warm + reads)]  # built up front
    chunks.reverse()

    async def main() -> float:
        conn = Connection(router, idle_timeout_s=0)
        transport = _Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        receive = conn.data_received
        for _ in range(warm):
            receive(chunks.pop())
            await asyncio.sleep(0)
        t0 = time.process_time()
        for _ in range(reads):
            receive(chunks.pop())
            await asyncio.sleep(0)
        spent = time.process_time() - t0
        if transport.writes != warm + reads:  # the answers of one read leave in one write
            raise AssertionError(f"{transport.writes} writes for {warm + reads} reads")
        return spent * n / (reads * per_read) if reads else 0.0

    return asyncio.run(main())


def _spawn(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONHASHSEED="0")  # same dict layouts in every run: comparable counts
    return subprocess.run([sys.executable, __file__, "--run", *args], text=True,
                          capture_output=True, check=True, env=env)


def _instructions(name: str, n: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")  # same dict layouts in every run: comparable counts
    return instructions([sys.executable, __file__, "--run", name, str(n)], env)


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "--run":
        print(f"{run(sys.argv[2], int(sys.argv[3])):.6f}")
        return
    callgrind = "--callgrind" in sys.argv
    names = [a for a in sys.argv[1:] if a in OPS] or OPS
    for name in names:
        if callgrind:
            n = 300
            cost = (_instructions(name, n) - _instructions(name, 0)) / n
            unit = "instructions/op"
        else:
            n = 5000
            cost = min(float(_spawn([name, str(n)]).stdout) for _ in range(3)) * 1e6 / n
            unit = "µs CPU/op"
        print(f"{name:16s} {cost:12.2f}  {unit}", flush=True)


if __name__ == "__main__":
    main()
