"""Escape bridge (RIP-32): local put on a master, remote send to another group's master when acting, failures
reported as not stored (the caller retries)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orbitmq.base.errors import RemotingConnectError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.escape import EscapeBridge, Target, escape_targets, put_result_of, send_request
from orbitmq.model.enums import Perm
from orbitmq.model.properties import Prop, decode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, normalize_send_header
from orbitmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from orbitmq.store import MessageInner, PutResult, PutStatus

pytestmark = pytest.mark.timeout(20)

A_SLAVE, B_MASTER, C_MASTER = "127.0.0.1:2000", "127.0.0.1:4000", "127.0.0.1:5000"
RW = int(Perm.READ | Perm.WRITE)


def _route() -> TopicRouteData:
    return TopicRouteData(
        [QueueData("broker-a", 4, 4, int(Perm.READ)), QueueData("broker-b", 2, 2, RW),
         QueueData("broker-c", 1, 1, RW), QueueData("broker-d", 1, 1, int(Perm.READ))],
        [BrokerData("c", "broker-a", {0: A_SLAVE}), BrokerData("c", "broker-b", {0: B_MASTER, 1: "x:1"}),
         BrokerData("c", "broker-c", {0: C_MASTER}), BrokerData("c", "broker-d", {1: "y:1"})])


def _msg() -> MessageInner:
    return MessageInner("T", 3, b"body", {Prop.TAGS: "tg", Prop.KEYS: "k1", Prop.UNIQ_KEY: "U1",
                                          Prop.REAL_TOPIC: "T", Prop.WAIT: "false", Prop.PGROUP: "PG"},
                        flag=5, sys_flag=0, born_timestamp=1234, reconsume_times=2)


class FakeTransport:
    def __init__(self, route: TopicRouteData | None, answers: dict[str, list[Any]] | None = None) -> None:
        self._route = route
        self.answers = answers or {}
        self.routes = 0
        self.sent: list[tuple[str, RemotingCommand]] = []

    async def route(self, topic: str) -> TopicRouteData | None:
        self.routes += 1
        return self._route

    async def send(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        self.sent.append((addr, cmd))
        queue = self.answers.get(addr) or [0]
        a = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(a, Exception):
            raise a
        return cmd.response(a, None if a == 0 else "refused",
                            ext_fields={"msgId": "M1", "queueId": "0", "queueOffset": "7"} if a == 0 else None)


class Bridge:
    def __init__(self, transport: FakeTransport, *, slave: bool = True, acting: bool = True,
                 remote: bool = True) -> None:
        self.cfg = BrokerConfig(broker_name="broker-a", broker_id=1 if slave else 0,
                                broker_role="SLAVE" if slave else "ASYNC_MASTER", enable_remote_escape=remote)
        self.acting = acting
        self.local: list[MessageInner] = []
        self.now = 0
        self.bridge = EscapeBridge(lambda: self.cfg, lambda: self.acting, self._local, transport,
                                   lambda: self.now)

    async def _local(self, msg: MessageInner) -> PutResult:
        self.local.append(msg)
        return PutResult(PutStatus.PUT_OK, 100, 10, ["L"], 0, 1, 1)


def test_targets_skip_own_group_read_only_queues_and_groups_without_master() -> None:
    targets = escape_targets(_route(), "broker-a")
    assert targets == [Target("broker-b", B_MASTER, 0), Target("broker-b", B_MASTER, 1),
                       Target("broker-c", C_MASTER, 0)]


def test_master_puts_locally() -> None:
    t = FakeTransport(_route())
    b = Bridge(t, slave=False, acting=False)
    r = asyncio.run(b.bridge.put(_msg()))
    assert r.status is PutStatus.PUT_OK and len(b.local) == 1 and t.sent == []


@pytest.mark.parametrize(("acting", "remote"), [(False, True), (True, False)])
def test_slave_not_acting_or_without_remote_escape_stores_nothing(acting: bool, remote: bool) -> None:
    t = FakeTransport(_route())
    b = Bridge(t, acting=acting, remote=remote)
    r = asyncio.run(b.bridge.put(_msg()))
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and b.local == [] and t.sent == []


def test_acting_slave_sends_to_another_group_keeping_properties() -> None:
    t = FakeTransport(_route())
    b = Bridge(t)

    async def go() -> list[PutResult]:
        return [await b.bridge.put(_msg()) for _ in range(3)]

    results = asyncio.run(go())
    assert all(r.status is PutStatus.PUT_OK and r.msg_ids == ["M1"] and r.queue_offset == 7 for r in results)
    assert b.local == []
    assert t.routes == 1  # route cached
    targets = [(addr, normalize_send_header(cmd.ext_fields)["queueId"]) for addr, cmd in t.sent]
    assert targets == [(B_MASTER, "0"), (B_MASTER, "1"), (C_MASTER, "0")]  # round-robin over writable queues
    addr, cmd = t.sent[0]
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.body == b"body"
    h = normalize_send_header(cmd.ext_fields)
    assert (h["topic"], h["producerGroup"], h["flag"], h["bornTimestamp"], h["reconsumeTimes"], h["bname"]) == \
        ("T", "PG", "5", "1234", "2", "broker-b")
    props = decode_properties(h["properties"])
    assert props[Prop.WAIT] == "true"
    assert {k: props[k] for k in (Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY, Prop.REAL_TOPIC)} == \
        {Prop.TAGS: "tg", Prop.KEYS: "k1", Prop.UNIQ_KEY: "U1", Prop.REAL_TOPIC: "T"}


def test_failed_broker_is_skipped_and_the_next_group_tried() -> None:
    t = FakeTransport(_route(), {B_MASTER: [RemotingConnectError("down")]})
    b = Bridge(t)
    r = asyncio.run(b.bridge.put(_msg()))
    assert r.status is PutStatus.PUT_OK
    assert [a for a, _ in t.sent] == [B_MASTER, C_MASTER]


def test_every_group_failing_reports_not_stored() -> None:
    t = FakeTransport(_route(), {B_MASTER: [ResponseCode.SYSTEM_ERROR], C_MASTER: [ResponseCode.NO_PERMISSION]})
    b = Bridge(t)
    r = asyncio.run(b.bridge.put(_msg()))
    assert r.status is PutStatus.UNKNOWN_ERROR and b.bridge.failures == 1
    assert [a for a, _ in t.sent] == [B_MASTER, C_MASTER]


def test_no_route_or_no_other_group_reports_not_stored_and_retries_the_route() -> None:
    t = FakeTransport(None)
    b = Bridge(t)
    assert asyncio.run(b.bridge.put(_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert asyncio.run(b.bridge.put(_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert t.routes == 2  # an empty answer is not cached
    only_own = TopicRouteData([QueueData("broker-a", 1, 1, RW)], [BrokerData("c", "broker-a", {0: A_SLAVE})])
    t2 = FakeTransport(only_own)
    assert asyncio.run(Bridge(t2).bridge.put(_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert t2.sent == []


def test_answer_mapping() -> None:
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2)
    assert put_result_of(req.response(ResponseCode.FLUSH_SLAVE_TIMEOUT)).status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert put_result_of(req.response(ResponseCode.FLUSH_DISK_TIMEOUT)).status is PutStatus.FLUSH_DISK_TIMEOUT
    assert put_result_of(req.response(ResponseCode.SLAVE_NOT_AVAILABLE)).status is PutStatus.SLAVE_NOT_AVAILABLE
    assert put_result_of(req.response(ResponseCode.SERVICE_NOT_AVAILABLE)).status is PutStatus.UNKNOWN_ERROR
    ok = put_result_of(req.response(ext_fields={"msgId": "X", "queueOffset": "bad"}))
    assert ok.status is PutStatus.PUT_OK and ok.queue_offset == -1 and ok.msg_ids == ["X"]


def test_send_request_without_pgroup_uses_the_bridge_group() -> None:
    m = _msg()
    m.properties.pop(Prop.PGROUP)
    h = normalize_send_header(send_request(m, Target("broker-b", B_MASTER, 1)).ext_fields)
    assert h["producerGroup"] == "PID_RMQ_SYS_ESCAPE_BRIDGE" and h["queueId"] == "1"
