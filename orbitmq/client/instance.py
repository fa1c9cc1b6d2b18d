"""ClientInstance: what producers and consumers of one process share per (event loop, name servers, instance
name): the RemotingClient, the route cache (refreshed every 30 s, on demand, and within a moment of an OrbitMQ
name server's route-change push), heartbeats to every broker every 30 s, and the handler for broker-initiated
requests (40, 220, 221, 307, 39, 309) and name-server pushes (9901).

Route push: every GET_ROUTEINFO_BY_TOPIC carries ext `orbitWatch=true`; an OrbitMQ name server then sends a
oneway ORBIT_NOTIFY_ROUTE_CHANGED with ext `topic` over that connection whenever the topic's route changes, and
the instance refetches it (debounced, one refresh per topic in flight) and triggers a rebalance of consumers
subscribed to it if the route differs. Other name servers ignore the field; the 30 s poll stays the fallback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import socket
import ssl
from collections.abc import Coroutine
from typing import Any, ClassVar, Protocol

from orbitmq.base import marks
from orbitmq.base.clock import now_ms
from orbitmq.base.errors import OrbitMQError, ProtocolError, RemotingError
from orbitmq.client import broker_api
from orbitmq.client.errors import ClientStateError, NoRouteError
from orbitmq.client.route_cache import PublishInfo, RouteCache, RouteInfo
from orbitmq.client.tasks import TaskSet, run_periodic
from orbitmq.model import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.protocol.acl_sign import SessionCredentials, sign_request
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, ProducerData, ResetOffsetBody, TopicRouteData
from orbitmq.remoting import Connection, RemotingClient
from orbitmq.remoting.tls import client_context

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC_KEY = "TBW102"
CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
_instance_seq = itertools.count(1)


class ConsumerHook(Protocol):
    """What the instance needs from a registered consumer."""

    group: str

    def consumer_data(self) -> ConsumerData: ...

    def subscribed_topics(self) -> set[str]: ...

    def trigger_rebalance(self) -> None: ...

    async def reset_offset(self, topic: str, table: dict[MessageQueue, int]) -> None: ...

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]: ...

    def running_info(self) -> dict[str, Any]: ...


class ProducerHook(Protocol):
    group: str

    async def on_check_transaction(self, addr: str, header: dict[str, str], body: bytes | None) -> None: ...


def local_ip() -> str:
    """First non-loopback IPv4 of this host (no packet is sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            if ip and not ip.startswith("127."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def session_credentials(access_key: str | None, secret_key: str | None,
                        security_token: str | None = None) -> SessionCredentials | None:
    """The credentials a client signs every request with (RocketMQ ACL), or None when neither key is given."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ClientStateError("ACL credentials need both access_key and secret_key")
    return SessionCredentials(access_key, secret_key, security_token)


def split_namesrv(namesrv: str) -> list[str]:
    addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ClientStateError("no name server address given")
    return addrs


TlsOption = bool | ssl.SSLContext | None  # True: TLS without checking the server (RocketMQ's default test mode)


def tls_context(tls: TlsOption) -> ssl.SSLContext | None:
    if tls is None or tls is False:
        return None
    return client_context() if tls is True else tls


class ClientInstance:
    _registry: ClassVar[dict[tuple[int, str, str, str], ClientInstance]] = {}

    heartbeat_interval_ms = 30_000
    route_interval_ms = 30_000
    route_watch = True  # ask name servers to push route changes (orbitWatch)
    route_push_debounce_ms = 50  # pushes for one topic within this window cause one refetch

    def __init__(self, namesrv: str, instance_name: str | None = None, client_ip: str | None = None,
                 credentials: SessionCredentials | None = None,
                 namesrv_credentials: SessionCredentials | None = None, tls: TlsOption = None) -> None:
        self.namesrv_addrs = split_namesrv(namesrv)
        self.tls = tls
        self.credentials = credentials  # set: every request is signed (RocketMQ ACL, protocol/acl_sign.py)
        # set: requests to the name servers are signed with these instead (the cluster secret, for admin writes)
        self.namesrv_credentials = namesrv_credentials
        self.client_ip = client_ip or local_ip()
        self.instance_name = instance_name or f"{os.getpid()}#{now_ms() * 1000 + next(_instance_seq)}"
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        # tls: every connection (name servers and brokers) is TLS, as RocketMQ's useTLS (remoting/tls.py)
        self.remoting = RemotingClient(self._on_request, ssl_context=tls_context(tls))
        self.routes = RouteCache()
        self.producers: dict[str, ProducerHook | None] = {}
        self.consumers: dict[str, ConsumerHook] = {}
        self.tasks = TaskSet(f"client {self.client_id}")
        self._key: tuple[int, str, str, str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refs = 0
        self._ns_index = random.randrange(len(self.namesrv_addrs))
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._started = False
        self._heartbeated: set[str] = set()
        self._pushed_topics: set[str] = set()  # route refetches scheduled by a push, not started yet

    # ---- lifecycle --------------------------------------------------------------------------------------------
    @classmethod
    async def acquire(cls, namesrv: str, instance_name: str | None = None,
                      credentials: SessionCredentials | None = None,
                      namesrv_credentials: SessionCredentials | None = None, tls: TlsOption = None) -> ClientInstance:
        """The shared instance for this loop + name servers + instance name + keys (created and started on first
        use); `credentials`: sign every request, `namesrv_credentials`: sign those to name servers with these
        instead (clients with other keys get their own instance)."""
        loop = asyncio.get_running_loop()
        key = (id(loop), ";".join(sorted(split_namesrv(namesrv))), instance_name or "",
               (credentials.access_key if credentials is not None else "")
               + ("+ns" if namesrv_credentials is not None else "") + ("" if not tls else f"+tls{id(tls)}"))
        inst = cls._registry.get(key)
        if (inst is None or inst._loop is not loop  # a dead loop's id may be reused
                or inst.credentials != credentials or inst.namesrv_credentials != namesrv_credentials):
            inst = cls(namesrv, instance_name, credentials=credentials, namesrv_credentials=namesrv_credentials,
                       tls=tls)
            inst._key = key
            inst._loop = loop
            cls._registry[key] = inst
        inst._refs += 1
        if not inst._started:
            inst._start()
        return inst

    def _start(self) -> None:
        self._started = True
        self.tasks.spawn(run_periodic("route refresh", self.route_interval_ms, self.refresh_routes),
                         name="route-refresh")
        self.tasks.spawn(run_periodic("heartbeat", self.heartbeat_interval_ms, self.send_heartbeat_to_all),
                         name="heartbeat")

    async def release(self) -> None:
        self._refs -= 1
        if self._refs > 0:
            return
        if self._key is not None and self._registry.get(self._key) is self:
            del self._registry[self._key]
        await self.tasks.close()
        await self.remoting.close()
        self._started = False

    # ---- requests ---------------------------------------------------------------------------------------------
    def sign(self, cmd: RemotingCommand, addr: str | None = None) -> RemotingCommand:
        """Add AccessKey/Signature when this instance has credentials for `addr` (None: a name server)."""
        creds = self.credentials
        if self.namesrv_credentials is not None and (addr is None or addr in self.namesrv_addrs):
            creds = self.namesrv_credentials
        if creds is not None:
            sign_request(cmd, creds)
        return cmd

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> Coroutine[Any, Any, RemotingCommand]:
        """The broker's answer (a coroutine to await: the connection's own, no coroutine of this layer between)."""
        return self.remoting.invoke(addr, self.sign(cmd, addr), timeout_ms)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self.remoting.invoke_oneway(addr, self.sign(cmd, addr))

    async def invoke_namesrv(self, cmd_factory: Any, timeout_ms: int = 3000) -> RemotingCommand:
        """Try each name server in turn (starting from the last good one); `cmd_factory()` builds a fresh request
        per attempt (each needs its own opaque)."""
        last: Exception | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            idx = (self._ns_index + i) % n
            try:
                resp = await self.remoting.invoke(self.namesrv_addrs[idx], self.sign(cmd_factory()), timeout_ms)
                self._ns_index = idx
                return resp
            except RemotingError as e:
                last = e
        assert last is not None
        raise last

    # ---- routes -----------------------------------------------------------------------------------------------
    async def fetch_route(self, topic: str, timeout_ms: int = 3000) -> RouteInfo | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the name server does not know the topic."""
        ext = {"topic": topic, "acceptStandardJsonOnly": "true"}
        if self.route_watch:
            ext["orbitWatch"] = "true"
        resp = await self.invoke_namesrv(
            lambda: RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, dict(ext)), timeout_ms)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        broker_api.check(resp, "namesrv")
        return RouteInfo.from_route_data(TopicRouteData.from_json(resp.body))

    async def update_route(self, topic: str) -> RouteInfo | None:
        """Refresh one topic now (one request in flight per topic); returns the cached route."""
        lock = self._route_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            route = await self.fetch_route(topic)
            if route is not None and route.queue_datas:
                self.routes.update(topic, route)
                # a broker gone from every route is forgotten, so when it comes back (a restarted master,
                # which lost our registration) it is heartbeated at once instead of up to 30 s later
                self._heartbeated &= self.routes.all_broker_addrs()
                if route.all_addrs() - self._heartbeated:
                    await self.send_heartbeat_to_all(only_new=True)
            return self.routes.get(topic)

    async def route(self, topic: str) -> RouteInfo:
        r = self.routes.get(topic)
        if r is None:
            r = await self.update_route(topic)
        if r is None:
            raise NoRouteError(f"no route for topic {topic}")
        return r

    async def publish_info(self, topic: str, default_topic_queue_nums: int) -> PublishInfo:
        """Producer queues of a topic; for an unknown topic, TBW102's route clamped to the default queue count
        (the broker auto-creates the topic on the first send)."""
        pi = self.routes.publish_info(topic)
        if pi is not None and pi.queues:
            return pi
        route = await self.update_route(topic)
        if route is None or not route.publish_queues(topic):
            base = await self.fetch_route(AUTO_CREATE_TOPIC_KEY)
            if base is None:
                raise NoRouteError(f"no route for topic {topic} and no {AUTO_CREATE_TOPIC_KEY} route")
            self.routes.update(topic, base.clamped(default_topic_queue_nums))
            if base.all_addrs() - self._heartbeated:  # a consumer of this instance must be known there too
                await self.send_heartbeat_to_all(only_new=True)
        pi = self.routes.publish_info(topic)
        if pi is None or not pi.queues:
            raise NoRouteError(f"no writable queue for topic {topic}")
        return pi

    async def refresh_routes(self) -> None:
        topics = set(self.routes.topics())
        for c in list(self.consumers.values()):
            topics |= c.subscribed_topics()
        for t in sorted(topics):
            try:
                await self.update_route(t)
            except (OrbitMQError, OSError) as e:
                log.debug("route refresh of %s failed: %s", t, e)

    def on_route_pushed(self, topic: str) -> None:
        """A name server says `topic`'s route changed: refetch it soon (pushes in the debounce window coalesce)."""
        if not topic or topic in self._pushed_topics or self.tasks.closed or not self._started:
            return
        self._pushed_topics.add(topic)
        marks.hit("client route push received")
        self.tasks.spawn(self._refresh_pushed(topic), name=f"route-push {topic}")

    async def _refresh_pushed(self, topic: str) -> None:
        try:
            await asyncio.sleep(self.route_push_debounce_ms / 1000)
        finally:
            self._pushed_topics.discard(topic)  # a push arriving from now on schedules another refetch
        before = self.routes.get(topic)
        try:
            after = await self.update_route(topic)
        except (OrbitMQError, OSError) as e:
            log.debug("pushed route refresh of %s failed: %s (the periodic refresh retries)", topic, e)
            return
        if after is not before:
            log.debug("route of %s changed (pushed)", topic)
            for c in list(self.consumers.values()):
                if topic in c.subscribed_topics():
                    c.trigger_rebalance()

    def broker_addr(self, broker_name: str, broker_id: int = 0) -> str:
        addr = self.routes.broker_addr(broker_name, broker_id)
        if addr is None:
            raise NoRouteError(f"no address known for broker {broker_name}")
        return addr

    async def find_broker_addr(self, mq: MessageQueue, broker_id: int = 0) -> str:
        addr = self.routes.broker_addr(mq.broker_name, broker_id)
        if addr is None:
            await self.update_route(mq.topic)
            addr = self.routes.broker_addr(mq.broker_name, broker_id)
        if addr is None:
            raise NoRouteError(f"no address known for broker {mq.broker_name}")
        return addr

    # ---- registration & heartbeat -----------------------------------------------------------------------------
    def register_producer(self, group: str, hook: ProducerHook | None = None) -> None:
        if group in self.producers and group != CLIENT_INNER_PRODUCER:
            raise ClientStateError(f"producer group {group} already registered in client {self.client_id}")
        self.producers[group] = hook

    def register_consumer(self, group: str, hook: ConsumerHook) -> None:
        if group in self.consumers:
            raise ClientStateError(f"consumer group {group} already registered in client {self.client_id}; "
                                   "use another instance_name")
        self.consumers[group] = hook

    def heartbeat_data(self) -> HeartbeatData:
        producers = [ProducerData(g) for g in sorted(set(self.producers) | {CLIENT_INNER_PRODUCER})]
        consumers = [c.consumer_data() for c in self.consumers.values()]
        return HeartbeatData(self.client_id, producers, consumers)

    async def send_heartbeat_to_all(self, only_new: bool = False) -> None:
        """HEART_BEAT to every known broker (masters only when there is no consumer); `only_new`: just to brokers
        never heartbeated yet (a route just revealed them, so consumers need not wait 30 s to be known)."""
        addrs = self.routes.all_broker_addrs(masters_only=not self.consumers)
        if only_new:
            addrs -= self._heartbeated
        if not addrs or (only_new and not self.consumers and not self.producers):
            return
        self._heartbeated |= addrs
        body = self.heartbeat_data().to_json()
        await asyncio.gather(*(self._heartbeat(a, body) for a in sorted(addrs)))

    async def _heartbeat(self, addr: str, body: bytes) -> None:
        try:
            resp = await self.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, body), 3000)
            if resp.code != ResponseCode.SUCCESS:
                log.warning("heartbeat to %s: code %d %s", addr, resp.code, resp.remark)
        except RemotingError as e:
            marks.hit("client heartbeat failed")
            log.debug("heartbeat to %s failed: %s", addr, e)

    async def unregister(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        """Drop a group locally and tell every broker (UNREGISTER_CLIENT)."""
        if producer_group:
            self.producers.pop(producer_group, None)
        if consumer_group:
            self.consumers.pop(consumer_group, None)
        h = {"clientID": self.client_id}
        if producer_group:
            h["producerGroup"] = producer_group
        if consumer_group:
            h["consumerGroup"] = consumer_group

        async def one(addr: str) -> None:
            try:
                await self.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, dict(h)), 3000)
            except RemotingError as e:
                log.debug("unregister at %s failed: %s", addr, e)

        await asyncio.gather(*(one(a) for a in sorted(self.routes.all_broker_addrs())))

    async def consumer_id_list(self, topic: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP at one (random) broker of the topic, master preferred."""
        route = await self.route(topic)
        names = sorted(route.broker_addrs)
        if not names:
            return []
        name = random.choice(names)
        addr = route.any_addr(name)
        assert addr is not None
        return await broker_api.consumer_ids(self, addr, group)

    # ---- broker-initiated requests ----------------------------------------------------------------------------
    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> Any:
        code = cmd.code
        ext = cmd.ext_fields or {}
        if code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            c = self.consumers.get(ext.get("consumerGroup", ""))
            if c is not None:
                marks.hit("client notified consumer ids changed")
                c.trigger_rebalance()
            return None if cmd.is_oneway else cmd.response()
        if code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            return self._on_reset_offset(cmd, ext)
        if code == RequestCode.ORBIT_NOTIFY_ROUTE_CHANGED:
            self.on_route_pushed(ext.get("topic", ""))
            return None if cmd.is_oneway else cmd.response()
        if code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            c = self.consumers.get(ext.get("group", ""))
            if c is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {ext.get('group')}")
            table = c.offsets_of(ext.get("topic", ""))
            return cmd.response(body=fastjson.dumps({"consumerTable": {}, "messageQueueTable": table}))
        if code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            c = self.consumers.get(ext.get("consumerGroup", ""))
            if c is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    f"The Consumer Group <{ext.get('consumerGroup')}> not exist in this consumer")
            return cmd.response(body=fastjson.dumps(c.running_info()))
        if code == RequestCode.CHECK_TRANSACTION_STATE:
            return self._on_check_transaction(conn, cmd, ext)
        if code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            c = self.consumers.get(ext.get("consumerGroup", ""))
            direct = getattr(c, "consume_directly", None)
            if direct is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, "consumer does not support direct consumption")
            return self._answer_async(cmd, direct(cmd.body))
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {code} not supported")

    async def _answer_async(self, cmd: RemotingCommand, coro: Any) -> RemotingCommand:
        try:
            return cmd.response(body=fastjson.dumps(await coro))
        except Exception as e:  # noqa: BLE001 - the broker gets the reason
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

    def _on_reset_offset(self, cmd: RemotingCommand, ext: dict[str, str]) -> RemotingCommand | None:
        c = self.consumers.get(ext.get("group", ""))
        topic = ext.get("topic", "")
        if c is not None and cmd.body:
            try:
                table = parse_reset_offset_body(cmd.body)
            except (ProtocolError, ValueError, KeyError, TypeError) as e:
                log.warning("bad RESET_CONSUMER_CLIENT_OFFSET body: %s", e)
            else:
                marks.hit("client reset offset")
                self.tasks.spawn(c.reset_offset(topic, {mq: o for mq, o in table.items() if mq.topic == topic}),
                                 name="reset-offset")
        return None if cmd.is_oneway else cmd.response()

    def _on_check_transaction(self, conn: Connection, cmd: RemotingCommand,
                              ext: dict[str, str]) -> RemotingCommand | None:
        try:
            msgs = broker_api.decode_messages(cmd.body)
        except OrbitMQError:
            msgs = []
        group = msgs[0].properties.get("PGROUP") if msgs else None
        hook = self.producers.get(group or "")
        if hook is not None:
            self.tasks.spawn(hook.on_check_transaction(conn.remote_addr, dict(ext), cmd.body), name="tx-check")
        else:
            log.info("CHECK_TRANSACTION_STATE for group %s ignored: no transactional producer here", group)
        return None if cmd.is_oneway else cmd.response()


def parse_reset_offset_body(body: bytes) -> dict[MessageQueue, int]:
    """ResetOffsetBody (fastjson MessageQueue keys) or the C++ list form."""
    return ResetOffsetBody.from_json(body).offset_table
