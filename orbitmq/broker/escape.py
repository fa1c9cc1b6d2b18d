"""Escape bridge (RIP-32): where the special services (delay delivery, transaction commit/discard, pop revive) put
what they produce.

A master writes to its own store. A slave acting as master never writes to its own CommitLog (it is a byte-exact
replica of its master's); with enableRemoteEscape it sends the message to the live master of ANOTHER broker group
serving the topic (route from the name servers, a writable queue picked round-robin, SEND_MESSAGE_V2 with WAIT=true
and every property kept). Any other case, and every failure, answers a non-stored PutResult: the caller keeps its
progress and retries later, so nothing is dropped.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from orbitmq.base.errors import OrbitMQError, ProtocolError
from orbitmq.model.enums import Perm
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import TopicRouteData
from orbitmq.protocol.ext import to_send_v2
from orbitmq.store import MessageInner, PutResult, PutStatus

if TYPE_CHECKING:
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)

MASTER_ID = 0
ESCAPE_PRODUCER_GROUP = "PID_RMQ_SYS_ESCAPE_BRIDGE"  # when the message carries no PGROUP
ROUTE_TTL_MS = 3000
SEND_TIMEOUT_MS = 3000

_CODE_TO_STATUS = {
    ResponseCode.SUCCESS: PutStatus.PUT_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: PutStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: PutStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: PutStatus.SLAVE_NOT_AVAILABLE,
}


class EscapeTransport(Protocol):
    """The bridge's I/O: a topic's route from the name servers, and one send to a broker."""

    async def route(self, topic: str) -> TopicRouteData | None: ...

    async def send(self, addr: str, cmd: RemotingCommand) -> RemotingCommand: ...


class RemotingEscapeTransport:
    """EscapeTransport over the broker's outgoing RemotingClient."""

    def __init__(self, client: RemotingClient, config_fn: Callable[[], BrokerConfig]) -> None:
        self._client = client
        self._config_fn = config_fn

    async def route(self, topic: str) -> TopicRouteData | None:
        for ns in self._config_fn().namesrv_addrs:
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": topic, "acceptStandardJsonOnly": "true"})
            try:
                resp = await self._client.invoke(ns, cmd, SEND_TIMEOUT_MS)
            except OrbitMQError as e:
                log.debug("route of %s from %s failed: %r", topic, ns, e)
                continue
            if resp.code == ResponseCode.SUCCESS and resp.body:
                try:
                    return TopicRouteData.from_json(resp.body)
                except ProtocolError as e:
                    log.warning("unreadable route of %s from %s: %s", topic, ns, e)
        return None

    async def send(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return await self._client.invoke(addr, cmd, SEND_TIMEOUT_MS)


@dataclass(frozen=True, slots=True)
class Target:
    broker_name: str
    addr: str
    queue_id: int


def escape_targets(route: TopicRouteData, own_broker_name: str) -> list[Target]:
    """Writable queues of the topic on other groups that have a live master, in route order."""
    masters = {bd.broker_name: bd.broker_addrs.get(MASTER_ID) for bd in route.broker_datas}
    out: list[Target] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(qd.broker_name)
        if qd.broker_name == own_broker_name or not addr or not qd.perm & Perm.WRITE:
            continue
        out.extend(Target(qd.broker_name, addr, q) for q in range(qd.write_queue_nums))
    return out


def send_request(msg: MessageInner, target: Target) -> RemotingCommand:
    """SEND_MESSAGE_V2 carrying `msg` to one queue of the target broker (WAIT=true, other properties kept)."""
    props = dict(msg.properties)
    props[Prop.WAIT] = "true"
    header = {
        "producerGroup": props.get(Prop.PGROUP) or ESCAPE_PRODUCER_GROUP,
        "topic": msg.topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(target.queue_id), "sysFlag": str(msg.sys_flag), "bornTimestamp": str(msg.born_timestamp),
        "flag": str(msg.flag), "properties": encode_properties(props), "reconsumeTimes": str(msg.reconsume_times),
        "unitMode": "false", "batch": "false", "bname": target.broker_name,
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, to_send_v2(header), msg.body)


def put_result_of(resp: RemotingCommand) -> PutResult:
    status = _CODE_TO_STATUS.get(resp.code, PutStatus.UNKNOWN_ERROR)
    if status is not PutStatus.PUT_OK and resp.code not in _CODE_TO_STATUS:
        return PutResult(status)
    ext = resp.ext_fields or {}
    try:
        queue_offset = int(ext.get("queueOffset", "-1"))
    except ValueError:
        queue_offset = -1
    msg_id = ext.get("msgId")
    return PutResult(status, msg_ids=[msg_id] if msg_id else [], queue_offset=queue_offset, msg_count=1)


class EscapeBridge:
    """put(msg) for the special services; see the module docstring for where the message goes."""

    def __init__(self, config_fn: Callable[[], BrokerConfig], is_acting: Callable[[], bool],
                 local_put: Callable[[MessageInner], Awaitable[PutResult]], transport: EscapeTransport,
                 now_ms: Callable[[], int]) -> None:
        self._config_fn = config_fn
        self._is_acting = is_acting
        self._local_put = local_put
        self._transport = transport
        self._now_ms = now_ms
        self._routes: dict[str, tuple[int, list[Target]]] = {}
        self._rr = itertools.count()
        self.escaped = 0
        self.failures = 0

    async def put(self, msg: MessageInner) -> PutResult:
        cfg = self._config_fn()
        if not cfg.is_slave:
            return await self._local_put(msg)
        if not self._is_acting() or not cfg.enable_remote_escape:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        return await self.put_remote(msg)

    async def _targets(self, topic: str) -> list[Target]:
        now = self._now_ms()
        cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL_MS and cached[1]:
            return cached[1]
        route = await self._transport.route(topic)
        targets = escape_targets(route, self._config_fn().broker_name) if route is not None else []
        self._routes[topic] = (now, targets)
        return targets

    async def put_remote(self, msg: MessageInner) -> PutResult:
        """Send to another group's master; on a failed broker try the next group's queue (each group once)."""
        targets = await self._targets(msg.topic)
        if not targets:
            self.failures += 1
            log.warning("escape of a %s message: no writable queue on another group's master", msg.topic)
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        start = next(self._rr)
        tried: set[str] = set()
        result = PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        for i in range(len(targets)):
            target = targets[(start + i) % len(targets)]
            if target.broker_name in tried:
                continue
            tried.add(target.broker_name)
            try:
                resp = await self._transport.send(target.addr, send_request(msg, target))
            except OrbitMQError as e:
                log.warning("escape of a %s message to %s (%s) failed: %r", msg.topic, target.broker_name,
                            target.addr, e)
                self._routes.pop(msg.topic, None)
                continue
            result = put_result_of(resp)
            if result.status is PutStatus.PUT_OK or resp.code in _CODE_TO_STATUS:
                self.escaped += 1
                return result
            log.warning("escape of a %s message to %s refused: code %d %s", msg.topic, target.broker_name,
                        resp.code, resp.remark)
        self.failures += 1
        return result
