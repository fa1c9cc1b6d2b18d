"""Malformed frames against a real broker process: each gets an error response or a closed connection, never a
hang; the broker keeps serving a well-behaved client throughout and loses none of its messages."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from pathlib import Path

import orjson
import pytest

from orbitmq.client import Producer, SendStatus
from orbitmq.model import Message
from orbitmq.protocol import FrameDecoder, RemotingCommand, encode_frame
from orbitmq.testing.procs import Standalone
from orbitmq.testing.readback import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _json_frame(header: dict | bytes, body: bytes = b"", declared: int | None = None, hlen: int | None = None) -> bytes:
    h = header if isinstance(header, bytes) else orjson.dumps(header)
    length = 4 + len(h) + len(body) if declared is None else declared
    return struct.pack(">ii", length, len(h) if hlen is None else hlen) + h + body


def _request(code: int, ext: dict | None = None, opaque: int = 7) -> dict:
    return {"code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0, "extFields": ext or {}}


CASES: dict[str, bytes] = {
    "negative length": struct.pack(">ii", -5, 0),
    "length below header word": struct.pack(">i", 2) + b"\0\0",
    "header longer than frame": _json_frame(_request(30), hlen=1000, declared=40) + b"x" * 36,
    "huge declared size": struct.pack(">ii", 0x7FFFFFF0, 20) + b"{" * 64,
    "garbage json header": _json_frame(b"{not json at all" + bytes(range(256))),
    "json header not an object": _json_frame(b"[1,2,3]"),
    "binary header too short": struct.pack(">ii", 8, (1 << 24) | 4) + b"\0\0\0\0",
    "binary remark length lies": struct.pack(">ii", 4 + 25, (1 << 24) | 25)
    + struct.pack(">hbhiii", 30, 0, 409, 1, 0, 10_000) + b"\0" * 8,
    "unknown serialize type": struct.pack(">ii", 4 + 2, (7 << 24) | 2) + b"{}",
    "unknown request code": _json_frame(_request(31999)),
    "send without topic": _json_frame(_request(310, {"a": "G", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                                                    "g": "0", "h": "0"}), b"body"),
    "send with bad queueId": _json_frame(_request(10, {"producerGroup": "G", "topic": "FuzzT", "defaultTopic": "TBW102",
                                                      "defaultTopicQueueNums": "4", "queueId": "abc", "sysFlag": "0",
                                                      "bornTimestamp": "0", "flag": "0"}), b"body"),
    "pull with bad offset": _json_frame(_request(11, {"consumerGroup": "G", "topic": "FuzzT", "queueId": "0",
                                                     "queueOffset": "x", "maxMsgNums": "32", "sysFlag": "0",
                                                     "commitOffset": "0", "suspendTimeoutMillis": "0",
                                                     "subVersion": "0"})),
    "batch with corrupt body": _json_frame(_request(320, {"a": "G", "b": "FuzzT", "c": "TBW102", "d": "4", "e": "0",
                                                         "f": "0", "g": "0", "h": "0", "m": "true"}),
                                           b"\0\0\0\x30" + b"\xff" * 20),
    "heartbeat with garbage body": _json_frame(_request(34), b"\x00\x01garbage{"),
    "register broker with bad crc": _json_frame(_request(103, {"brokerName": "x", "brokerAddr": "1.2.3.4:1",
                                                              "clusterName": "c", "haServerAddr": "h",
                                                              "brokerId": "0", "bodyCrc32": "12345"}), b"{}"),
}


def _probe(port: int, payload: bytes, timeout_s: float = 5.0, name: str = "") -> str:
    """Send payload; return 'response:<code>' or 'closed'. Fails the test on a hang."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        # A valid request follows the payload: a payload the broker took as a oneway request (no answer by
        # design) still leads to an answer on a live connection.
        follow_cmd = RemotingCommand.request(30, {"topic": "FuzzT", "queueId": "0"})
        follow_opaque = follow_cmd.opaque
        follow = encode_frame(follow_cmd)
        try:
            s.sendall(payload + follow)
        except OSError:
            return "closed"
        dec = FrameDecoder()
        others: list[int] = []
        follow_seen = False
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except TimeoutError:
                if follow_seen:  # the payload was taken as a oneway request: nothing more will come
                    return "oneway"
                raise AssertionError(f"{name}: broker neither answered nor closed the connection") from None
            if not chunk:
                return f"response:{others[0]}" if others else "closed"
            for f in dec.feed(chunk):
                assert f.is_response
                if f.opaque == follow_opaque:
                    follow_seen = True
                    s.settimeout(0.3)
                else:
                    others.append(f.code)
            if others and follow_seen:
                return f"response:{others[0]}"


async def _steady_sender(sa: Standalone, stop: asyncio.Event, acked: list[str]) -> None:
    async with Producer("fuzz_good", namesrv=sa.namesrv_addr) as p:
        i = 0
        while not stop.is_set():
            key = f"good-{i}"
            i += 1
            m = Message("FuzzGood", key.encode(), {})
            m.keys = key
            r = await p.send(m)
            assert r.status == SendStatus.SEND_OK
            acked.append(key)
            await asyncio.sleep(0.005)


def test_malformed_frames_get_errors_or_close_and_nothing_is_lost(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa").start()
    port = int(sa.broker_addr.rsplit(":", 1)[1])
    rng = random.Random(20261122)
    try:
        async def main() -> dict[str, str]:
            stop = asyncio.Event()
            acked: list[str] = []
            sender = asyncio.create_task(_steady_sender(sa, stop, acked))
            outcomes: dict[str, str] = {}
            for name, payload in CASES.items():
                outcomes[name] = await asyncio.to_thread(_probe, port, payload, 5.0, name)
            for n in range(150):  # random garbage, and random mutations of a valid frame
                if n % 2:  # a complete frame of random bytes (the length word is right, the rest is noise)
                    rest = rng.randbytes(rng.randint(4, 300))
                    payload = struct.pack(">i", len(rest)) + rest
                else:
                    good = bytearray(encode_frame(RemotingCommand.request(30, {"topic": "FuzzT", "queueId": "0"})))
                    for _ in range(rng.randint(1, 6)):
                        good[rng.randrange(4, len(good))] = rng.randrange(256)
                    payload = bytes(good[: rng.randint(8, len(good))]) if n % 4 == 0 else bytes(good)
                    if n % 4 == 0:  # truncated frames wait for more bytes: close our side and move on
                        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                            s.sendall(payload)
                        continue
                outcomes[f"random-{n}"] = await asyncio.to_thread(_probe, port, payload, 5.0, f"random-{n}")
            while len(acked) < 30 and not sender.done():
                await asyncio.sleep(0.05)
            stop.set()
            await sender
            per_queue = await read_topic(sa.namesrv_addr, "FuzzGood")
            stored = {m.keys[0] for ms in per_queue.values() for m in ms}
            assert len(acked) >= 30 and set(acked) <= stored
            return outcomes

        outcomes = asyncio.run(main())
        assert sa.proc.running, "the broker died"
        assert outcomes["unknown request code"] == "response:3"
        assert outcomes["send without topic"] == "response:1"
        assert outcomes["send with bad queueId"].startswith("response:")
        assert outcomes["pull with bad offset"].startswith("response:")
        assert outcomes["batch with corrupt body"] == "response:13"
        assert outcomes["negative length"] == "closed"
        assert outcomes["huge declared size"] == "closed"
        assert outcomes["garbage json header"] == "closed"
    finally:
        sa.close()
