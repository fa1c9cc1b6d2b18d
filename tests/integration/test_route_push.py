"""Route push with real processes: a name server and two broker groups; an SDK ClientInstance caching a topic's
route sees a broker's kill -9 and its return within 1 s (its own poll runs every 30 s, so only the name
server's ORBIT_NOTIFY_ROUTE_CHANGED push can explain that)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.base import marks
from orbitmq.client import Admin
from orbitmq.client.instance import ClientInstance
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import ConsumerData, TopicRouteData
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import LOCALHOST, start_broker, start_namesrv

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPIC = "RoutePushTopic"
PUSH_DEADLINE_S = 1.0


async def ns_route_groups(client: RemotingClient, ns_addr: str) -> set[str]:
    """Broker names the name server lists for TOPIC right now (plain request: no watch)."""
    resp = await client.invoke(ns_addr, RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC, "acceptStandardJsonOnly": "true"}), 3000)
    if resp.code != 0:
        return set()
    return {bd.broker_name for bd in TopicRouteData.from_json(resp.body).broker_datas}


def cached_groups(inst: ClientInstance) -> set[str]:
    route = inst.routes.get(TOPIC)
    return set() if route is None else set(route.broker_addrs)


async def first_times(inst: ClientInstance, probe: RemotingClient, ns_addr: str, want: set[str],
                      timeout_s: float) -> tuple[float, float]:
    """Poll until both the name server and the SDK cache list exactly `want`; the monotonic time each first did."""
    ns_at = cache_at = 0.0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (ns_at and cache_at):
        if not ns_at and await ns_route_groups(probe, ns_addr) == want:
            ns_at = time.monotonic()
        if not cache_at and cached_groups(inst) == want:
            cache_at = time.monotonic()
        await asyncio.sleep(0.02)
    assert ns_at and cache_at, f"name server / cache never listed {want} (cache: {cached_groups(inst)})"
    return ns_at, cache_at


def test_sdk_route_cache_follows_kill9_and_return_within_a_second(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path / "ns", use_cli=False)
    ns_addr = f"{LOCALHOST}:{ns.ports[0]}"
    brokers = {name: start_broker(tmp_path / name, ns_addr, brokerName=name) for name in ("broker-a", "broker-b")}

    async def main() -> None:
        probe = RemotingClient(name="probe")
        async with Admin(ns_addr) as admin:
            for proc in brokers.values():
                await admin.update_topic(TOPIC, broker_addr=f"{LOCALHOST}:{proc.ports[0]}",
                                         read_queue_nums=2, write_queue_nums=2)
        inst = await ClientInstance.acquire(ns_addr, "route-push-test")
        try:
            assert inst.route_interval_ms >= 30_000  # the periodic poll cannot be what we observe below
            deadline = time.monotonic() + 20
            while await ns_route_groups(probe, ns_addr) != {"broker-a", "broker-b"}:
                assert time.monotonic() < deadline, "topic never registered on both brokers"
                await asyncio.sleep(0.1)
            await inst.update_route(TOPIC)  # caches the route and registers the watch
            assert cached_groups(inst) == {"broker-a", "broker-b"}

            await asyncio.to_thread(brokers["broker-b"].kill9)
            killed_at = time.monotonic()
            _, cache_at = await first_times(inst, probe, ns_addr, {"broker-a"}, timeout_s=10)
            assert cache_at - killed_at < PUSH_DEADLINE_S, f"cache updated {cache_at - killed_at:.2f}s after kill"

            await asyncio.to_thread(brokers["broker-b"].start)  # back on the same port and store
            ns_at, cache_at = await first_times(inst, probe, ns_addr, {"broker-a", "broker-b"}, timeout_s=30)
            assert cache_at - ns_at < PUSH_DEADLINE_S, f"cache updated {cache_at - ns_at:.2f}s after registration"
        finally:
            await inst.release()
            await probe.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 80))
    finally:
        for proc in brokers.values():
            proc.close()
        ns.close()


class FakeConsumer:
    """Just enough of a consumer for ClientInstance: counts the rebalances a route push triggers."""

    group = "push-test-group"

    def __init__(self, topics: set[str]) -> None:
        self.topics = topics
        self.rebalances = 0

    def subscribed_topics(self) -> set[str]:
        return self.topics

    def trigger_rebalance(self) -> None:
        self.rebalances += 1

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group)


def test_pushes_are_debounced_and_a_changed_route_rebalances_subscribers(tmp_path: Path) -> None:
    from orbitmq.model.topic import TopicConfig
    from orbitmq.namesrv import NameServer, NamesrvConfig
    from orbitmq.protocol.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper

    def register(name: str, addr: str) -> RemotingCommand:
        wrapper = TopicConfigSerializeWrapper({TOPIC: TopicConfig(TOPIC, read_queue_nums=2, write_queue_nums=2)},
                                              DataVersion(1, 1))
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": name, "brokerAddr": addr, "clusterName": "C", "haServerAddr": "", "brokerId": "0"},
            RegisterBrokerBody(wrapper).encode())

    async def main() -> None:
        ns = NameServer(NamesrvConfig(listen_port=0, listen_host=LOCALHOST,
                                      kv_config_path=str(tmp_path / "kv.json")))
        await ns.start()
        broker_a, broker_b = RemotingClient(name="a"), RemotingClient(name="b")
        inst = await ClientInstance.acquire(ns.addr, "route-push-debounce")
        try:
            assert (await broker_a.invoke(ns.addr, register("broker-a", "127.0.0.1:1"))).code == 0
            assert (await broker_b.invoke(ns.addr, register("broker-b", "127.0.0.1:2"))).code == 0
            fetches: list[str] = []
            real_fetch = inst.fetch_route

            async def counting_fetch(topic: str, timeout_ms: int = 3000):  # type: ignore[no-untyped-def]
                fetches.append(topic)
                return await real_fetch(topic, timeout_ms)

            inst.fetch_route = counting_fetch  # type: ignore[method-assign]
            await inst.update_route(TOPIC)
            assert cached_groups(inst) == {"broker-a", "broker-b"} and fetches == [TOPIC]
            consumer = FakeConsumer({TOPIC})
            inst.consumers[consumer.group] = consumer  # type: ignore[assignment]
            crashed_before = marks.count("client task crashed")
            pushes_before = marks.count("client route push received")

            for _ in range(5):  # a burst of pushes: one refetch; the route did not change, so no rebalance
                inst.on_route_pushed(TOPIC)
            await asyncio.sleep(0.3)
            assert fetches == [TOPIC, TOPIC] and consumer.rebalances == 0

            await broker_b.close()  # broker-b's registration connection closes: the name server pushes
            deadline = time.monotonic() + PUSH_DEADLINE_S
            while cached_groups(inst) != {"broker-a"}:
                assert time.monotonic() < deadline, "push did not update the cache within 1 s"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            assert consumer.rebalances == 1 and len(fetches) == 3
            assert len(inst.tasks) == 2  # only the periodic loops: no push task left behind
            assert marks.count("client task crashed") == crashed_before
            assert marks.count("client route push received") >= pushes_before + 2
            assert ns.handlers.watchers.count == 1
        finally:
            inst.consumers.clear()
            await inst.release()
            await broker_a.close()
            await ns.stop()
        assert ns.handlers.watchers.count == 0  # the SDK's connection closed: its watch is gone

    asyncio.run(asyncio.wait_for(main(), 30))
