"""Where a send's retry goes (issue 18 item 1), against a scripted two-broker client instance: with dedup a retry
after an unknown outcome (timeout, connection lost after sending) goes to the same broker and queue with the same
UNIQ_KEY, each attempt but the last waits at most half of the time left; an unreachable broker (connect fails) or
a retriable response code moves the send to the other broker; dedup=False moves on with fresh keys."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orbitmq.base.errors import RemotingConnectError, RemotingTimeoutError
from orbitmq.client.producer import Producer, SendStatus
from orbitmq.client.route_cache import PublishInfo, QueueInfo, RouteInfo
from orbitmq.model import Message, Prop, UniqIdGenerator, decode_properties
from orbitmq.protocol import RemotingCommand, ResponseCode, normalize_send_header

A, B = "10.0.0.1:10911", "10.0.0.2:10911"
ROUTE = RouteInfo([QueueInfo("broker-a", 4, 4, 6), QueueInfo("broker-b", 4, 4, 6)],
                  {"broker-a": {0: A}, "broker-b": {0: B}})


class Routes:
    def __init__(self) -> None:
        self.pi = PublishInfo("T", ROUTE, seed=0)  # the first pick is broker-a, queue 1

    def publish_info(self, topic: str) -> PublishInfo:
        return self.pi

    def remove(self, topic: str) -> None:
        pass


class Remoting:
    """Connections: `down` addresses refuse to connect; the others connect on demand."""

    def __init__(self) -> None:
        self.connected: set[str] = set()
        self.down: set[str] = set()
        self.connects: list[str] = []

    def is_connected(self, addr: str) -> bool:
        return addr in self.connected

    async def get_connection(self, addr: str, timeout_ms: int | None = None) -> object:
        self.connects.append(addr)
        if addr in self.down:
            raise RemotingConnectError(f"connect to {addr} failed: Connection refused")
        self.connected.add(addr)
        return object()


class Instance:
    """Answers sends with SUCCESS unless the script (one entry per request, popped) says otherwise."""

    def __init__(self, script: list[Any]) -> None:
        self.routes = Routes()
        self.remoting = Remoting()
        self.script = script
        self.sent: list[tuple[str, int, str, int]] = []  # (addr, queueId, UNIQ_KEY, timeout_ms)

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        h = normalize_send_header(cmd.ext_fields)
        self.sent.append((addr, int(h["queueId"]), decode_properties(h["properties"])[Prop.UNIQ_KEY], timeout_ms))
        step = self.script.pop(0) if self.script else None
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, int):
            return cmd.response(step, "refused (test)")
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.ext_fields = {"msgId": f"{addr}/1", "queueId": h["queueId"], "queueOffset": "0"}
        return resp


def _send(inst: Instance, **kw: Any) -> Any:
    p = Producer("PG", "127.0.0.1:1", **kw)
    p._inst = inst  # type: ignore[assignment]
    p._ids = UniqIdGenerator("10.0.0.9", seed=1)
    return asyncio.run(asyncio.wait_for(p.send(Message("T", b"x", {})), 10))


def test_a_lost_response_is_retried_on_the_same_broker_and_queue_within_the_timeout() -> None:
    inst = Instance([RemotingTimeoutError("response lost (test)")])
    r = _send(inst, send_timeout_ms=3000)
    assert r.status is SendStatus.SEND_OK
    (a1, q1, k1, t1), (a2, q2, k2, t2) = inst.sent
    assert (a2, q2, k2) == (a1, q1, k1)  # same broker, same queue, same UNIQ_KEY: that broker's dedup answers
    assert t1 <= 1500 and 0 < t2 <= 3000 - t1  # the first attempt left room for the retry


def test_a_connection_lost_after_sending_is_retried_on_the_same_broker() -> None:
    inst = Instance([RemotingConnectError("connection to 10.0.0.1:10911 closed")])
    inst.remoting.connected = {A, B}
    _send(inst)
    assert [s[0] for s in inst.sent] == [A, A]


def test_an_unreachable_broker_is_left_for_the_other_one() -> None:
    inst = Instance([])
    inst.remoting.down = {A}
    r = _send(inst)
    assert r.status is SendStatus.SEND_OK
    assert inst.remoting.connects == [A, B]
    assert [s[0] for s in inst.sent] == [B]  # nothing was ever sent to the unreachable broker


def test_same_broker_until_its_reconnect_fails_then_the_other_one() -> None:
    inst = Instance([RemotingConnectError("connection to 10.0.0.1:10911 closed")])
    inst.remoting.connected = {A}

    async def drop_then_refuse(addr: str, timeout_ms: int | None = None) -> object:
        inst.remoting.connects.append(addr)
        if addr == A:
            raise RemotingConnectError("connect to 10.0.0.1:10911 failed: Connection refused")
        inst.remoting.connected.add(addr)
        return object()

    real_invoke = inst.invoke

    async def invoke(addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        try:
            return await real_invoke(addr, cmd, timeout_ms)
        finally:
            inst.remoting.connected.discard(A)  # the broker went away with our request

    inst.invoke = invoke  # type: ignore[method-assign]
    inst.remoting.get_connection = drop_then_refuse  # type: ignore[method-assign]
    _send(inst, retry_times=2)
    assert [s[0] for s in inst.sent] == [A, B] and inst.remoting.connects == [A, B]


def test_a_retriable_response_code_moves_to_the_other_broker() -> None:
    inst = Instance([int(ResponseCode.SYSTEM_ERROR)])  # the broker answered: nothing stored
    _send(inst)
    assert [s[0] for s in inst.sent] == [A, B]
    assert inst.sent[0][2] == inst.sent[1][2]


@pytest.mark.parametrize("retry_times", [0, 2])
def test_the_last_attempt_gets_all_the_time_left(retry_times: int) -> None:
    inst = Instance([RemotingTimeoutError("lost")] * retry_times)
    _send(inst, send_timeout_ms=2000, retry_times=retry_times)
    timeouts = [s[3] for s in inst.sent]
    assert len(timeouts) == retry_times + 1
    assert timeouts[-1] >= (timeouts[-2] if retry_times else 2000) - 50
    assert all(t <= 1000 for t in timeouts[:-1])


def test_dedup_off_moves_on_with_a_fresh_key_and_the_whole_time() -> None:
    inst = Instance([RemotingTimeoutError("lost")])
    _send(inst, dedup=False, send_timeout_ms=3000)
    (a1, _q1, k1, t1), (a2, _q2, k2, _t2) = inst.sent
    assert a1 != a2 and k1 != k2 and t1 > 2900
