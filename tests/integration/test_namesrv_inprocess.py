"""NameServer in-process on 127.0.0.1 port 0, driven by a real RemotingClient with real frames."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from orbitmq.model.topic import TopicConfig
from orbitmq.namesrv import NameServer, NamesrvConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from orbitmq.remoting import RemotingClient

pytestmark = pytest.mark.integration


def cfg(tmp_path, **kw) -> NamesrvConfig:
    return NamesrvConfig(listen_port=0, listen_host="127.0.0.1", kv_config_path=str(tmp_path / "kvConfig.json"), **kw)


def register_request(broker_addr: str, *, name="broker-a", bid=0, topics=("TopicTest",), counter=1,
                     compressed=False) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper(
        {t: TopicConfig(t, read_queue_nums=4, write_queue_nums=4) for t in topics}, DataVersion(1700000000000, counter))
    body = RegisterBrokerBody(wrapper, []).encode(compressed=compressed)
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": name, "brokerAddr": broker_addr, "clusterName": "DefaultCluster",
        "haServerAddr": broker_addr.rsplit(":", 1)[0] + ":10912", "brokerId": str(bid),
        "compressed": "true" if compressed else "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
    }, body)


def route_request(topic: str, *, version: int, accept_std: bool = False) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                  {"topic": topic, "acceptStandardJsonOnly": "true" if accept_std else "false"})
    cmd.version = version
    return cmd


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_register_and_route_in_both_json_forms(tmp_path):
    async def main():
        ns = NameServer(cfg(tmp_path))
        await ns.start()
        broker, client = RemotingClient(), RemotingClient()
        try:
            assert ns.port > 0
            addr = f"127.0.0.1:{ns.port}"
            resp = await broker.invoke(addr, register_request("127.0.0.1:10911", compressed=True))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            std = await client.invoke(addr, route_request("TopicTest", version=409))
            assert std.code == 0 and b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in std.body
            old = await client.invoke(addr, route_request("TopicTest", version=317))
            assert old.code == 0 and b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body
            asked = await client.invoke(addr, route_request("TopicTest", version=317, accept_std=True))
            assert b'{"0":"127.0.0.1:10911"}' in asked.body
            for body in (std.body, old.body):
                route = TopicRouteData.from_json(body)
                assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] \
                    == [("broker-a", 4, 4, 6)]
                assert route.broker_datas[0].cluster == "DefaultCluster"
            miss = await client.invoke(addr, route_request("Nope", version=409))
            assert miss.code == ResponseCode.TOPIC_NOT_EXIST
            unknown = await client.invoke(addr, RemotingCommand.request(4242))
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert ClusterInfo.from_json(info.body).cluster_addr_table == {"DefaultCluster": ["broker-a"]}
        finally:
            await broker.close()
            await client.close()
            await ns.stop()

    run(main())


def test_silent_broker_expires_and_its_connection_is_closed(tmp_path):
    async def main():
        ns = NameServer(cfg(tmp_path, scan_not_active_broker_interval_ms=50, broker_channel_expired_time_ms=300))
        await ns.start()
        broker, client = RemotingClient(), RemotingClient()
        addr = f"127.0.0.1:{ns.port}"
        try:
            assert (await broker.invoke(addr, register_request("127.0.0.1:10911"))).code == 0
            broker_conn = broker.connections[addr]
            # re-registering keeps it alive past the expiry time
            for _ in range(4):
                await asyncio.sleep(0.12)
                assert (await broker.invoke(addr, register_request("127.0.0.1:10911"))).code == 0
            assert (await client.invoke(addr, route_request("TopicTest", version=409))).code == 0
            deadline = asyncio.get_running_loop().time() + 5
            while True:
                resp = await client.invoke(addr, route_request("TopicTest", version=409))
                if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                    break
                assert asyncio.get_running_loop().time() < deadline, "broker never expired"
                await asyncio.sleep(0.05)
            await asyncio.wait_for(broker_conn.wait_closed(), 2)
            assert ns.table.live_brokers() == {}
            ns.table.check_invariants()
        finally:
            await broker.close()
            await client.close()
            await ns.stop()

    run(main())


def test_broker_connection_close_removes_it_immediately(tmp_path):
    async def main():
        ns = NameServer(cfg(tmp_path))
        await ns.start()
        broker_a, broker_b, client = RemotingClient(), RemotingClient(), RemotingClient()
        addr = f"127.0.0.1:{ns.port}"
        try:
            await broker_a.invoke(addr, register_request("127.0.0.1:10911", name="broker-a"))
            await broker_b.invoke(addr, register_request("127.0.0.1:20911", name="broker-b"))
            await client.invoke(addr, route_request("TopicTest", version=409))  # a client conn is not a broker
            await broker_a.close()
            for _ in range(100):
                if "127.0.0.1:10911" not in ns.table.live_brokers():
                    break
                await asyncio.sleep(0.02)
            route = TopicRouteData.from_json((await client.invoke(addr, route_request("TopicTest", version=409))).body)
            assert [b.broker_name for b in route.broker_datas] == ["broker-b"]
        finally:
            await broker_b.close()
            await client.close()
            await ns.stop()

    run(main())


def test_two_name_servers_are_independent(tmp_path):
    async def main():
        ns1 = NameServer(cfg(tmp_path / "1"))
        ns2 = NameServer(cfg(tmp_path / "2"))
        await ns1.start()
        await ns2.start()
        c = RemotingClient()
        try:
            a1, a2 = f"127.0.0.1:{ns1.port}", f"127.0.0.1:{ns2.port}"
            await c.invoke(a1, register_request("127.0.0.1:10911", name="broker-a", topics=("T",)))
            await c.invoke(a2, register_request("127.0.0.1:20911", name="broker-b", topics=("T",)))
            r1 = TopicRouteData.from_json((await c.invoke(a1, route_request("T", version=409))).body)
            r2 = TopicRouteData.from_json((await c.invoke(a2, route_request("T", version=409))).body)
            assert [b.broker_name for b in r1.broker_datas] == ["broker-a"]
            assert [b.broker_name for b in r2.broker_datas] == ["broker-b"]
            # KV config persists per name server
            put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"})
            assert (await c.invoke(a1, put)).code == 0
            assert (tmp_path / "1" / "kvConfig.json").exists() and not (tmp_path / "2" / "kvConfig.json").exists()
        finally:
            await c.close()
            await ns1.stop()
            await ns2.stop()

    run(main())


def test_port_in_use_is_config_error(tmp_path):
    from orbitmq.base.errors import ConfigError

    async def main():
        ns1 = NameServer(cfg(tmp_path))
        await ns1.start()
        try:
            ns2 = NameServer(NamesrvConfig(listen_port=ns1.port, listen_host="127.0.0.1",
                                           kv_config_path=str(tmp_path / "kv2.json")))
            with pytest.raises(ConfigError):
                await ns2.start()
        finally:
            await ns1.stop()

    run(main())
