"""Broker in-process on 127.0.0.1 port 0 (no name server), driven by a real RemotingClient with real frames:
V1/V2/batch sends, pulls with and without long polling, heartbeat + consumer list + notifications, VIP port."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator

import pytest

from orbitmq.broker import Broker, BrokerConfig
from orbitmq.model import iter_records
from orbitmq.model.properties import encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, to_send_v2
from orbitmq.protocol.bodies import (
    ConsumerData,
    ConsumerListBody,
    HeartbeatData,
    ProducerData,
    SubscriptionData,
)
from orbitmq.remoting import RemotingClient
from orbitmq.store import StoreConfig

pytestmark = pytest.mark.integration


def store_cfg(tmp_path) -> StoreConfig:
    return StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                       mapped_file_size_consume_queue=20 * 1000, max_message_size=1024 * 1024,
                       max_hash_slot_num=1000, max_index_num=4000)


def broker_cfg(**kw) -> BrokerConfig:
    kw.setdefault("listen_port", 0)
    return BrokerConfig(broker_ip1="127.0.0.1", **kw)


def send_header(topic: str, *, queue_id: int = 0, props: dict[str, str] | None = None,
                batch: bool = False) -> dict[str, str]:
    return {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": encode_properties(props or {}), "reconsumeTimes": "0", "unitMode": "false",
        "batch": "true" if batch else "false",
    }


def batch_body(messages: list[tuple[bytes, dict[str, str]]]) -> bytes:
    out = bytearray()
    for body, props in messages:
        p = encode_properties(props).encode()
        total = 20 + len(body) + 2 + len(p)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(p)) + p
    return bytes(out)


def pull_request(topic: str, offset: int, *, group: str = "CG", sys_flag: int = 0x4, expression: str = "*",
                 suspend_ms: int = 1000, queue_id: int = 0, commit: int = 0) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(sys_flag), "commitOffset": str(commit), "suspendTimeoutMillis": str(suspend_ms),
        "subscription": expression, "subVersion": "0", "expressionType": "TAG",
    })


def heartbeat(client_id: str, group: str, topic: str, expression: str = "*") -> RemotingCommand:
    data = HeartbeatData(client_id, [ProducerData("CLIENT_INNER_PRODUCER")], [ConsumerData(
        group, subscription_data_set=[SubscriptionData.of_expression(topic, expression, 1)])])
    cmd = RemotingCommand.request(RequestCode.HEART_BEAT, body=data.to_json())
    cmd.version = 317
    return cmd


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_send_v1_v2_batch_and_pull(tmp_path):
    async def main() -> None:
        broker = Broker(broker_cfg(), store_cfg(tmp_path))
        await broker.start()
        client = RemotingClient()
        addr = f"127.0.0.1:{broker.listen_port}"
        try:
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, send_header("TopicA", props={"TAGS": "A", "UNIQ_KEY": "U1"}), b"m0"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["queueOffset"] == "0" and r.ext_fields["queueId"] == "0"
            assert r.ext_fields["MSG_REGION"] == "DefaultRegion" and r.ext_fields["TRACE_ON"] == "true"
            assert len(r.ext_fields["msgId"]) == 32
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, to_send_v2(send_header("TopicA", props={"TAGS": "B"})), b"m1"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["queueOffset"] == "1"
            body = batch_body([(b"b0", {"TAGS": "A"}), (b"b1", {"TAGS": "A"}), (b"b2", {"KEYS": "k"})])
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_BATCH_MESSAGE, to_send_v2(send_header("TopicA", batch=True)), body))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["queueOffset"] == "2" and len(r.ext_fields["msgId"].split(",")) == 3

            r = await client.invoke(addr, pull_request("TopicA", 0))
            assert r.code == ResponseCode.SUCCESS and r.remark == "FOUND"
            msgs = list(iter_records(r.body))
            assert [m.body for m in msgs] == [b"m0", b"m1", b"b0", b"b1", b"b2"]
            assert [m.queue_offset for m in msgs] == [0, 1, 2, 3, 4]
            assert msgs[0].properties["CLUSTER"] == "DefaultCluster"
            assert msgs[0].born_host.startswith("127.0.0.1:")
            assert r.ext_fields["nextBeginOffset"] == "5" and r.ext_fields["maxOffset"] == "5"

            # tag filter by hash: only TAGS=A messages
            r = await client.invoke(addr, pull_request("TopicA", 0, expression="A"))
            assert [m.body for m in iter_records(r.body)] == [b"m0", b"b0", b"b1"]

            # offset past the end -> moved; unknown topic -> 17; unknown code -> 3
            r = await client.invoke(addr, pull_request("TopicA", 9))
            assert r.code == ResponseCode.PULL_OFFSET_MOVED
            r = await client.invoke(addr, pull_request("NoSuchTopic", 0))
            assert r.code == ResponseCode.TOPIC_NOT_EXIST
            r = await client.invoke(addr, RemotingCommand.request(9999))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert r.remark == " request type 9999 not supported"

            # system topics refuse sends
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, send_header("SCHEDULE_TOPIC_XXXX"), b"x"))
            assert r.code == ResponseCode.SYSTEM_ERROR

            # VIP port: sends yes, pulls no
            vip = f"127.0.0.1:{broker.vip_port}"
            r = await client.invoke(vip, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, send_header("TopicA"), b"vip"))
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "5"
            r = await client.invoke(vip, pull_request("TopicA", 0))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        finally:
            await client.close()
            await broker.stop()

    run(main())


def test_long_poll_wakes_on_arrival_and_times_out(tmp_path):
    async def main() -> None:
        broker = Broker(broker_cfg(), store_cfg(tmp_path))
        await broker.start()
        client = RemotingClient()
        addr = f"127.0.0.1:{broker.listen_port}"
        try:
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, send_header("TopicL"), b"first"))
            assert r.code == ResponseCode.SUCCESS
            # suspended pull at the end of the queue, woken by a new message
            t0 = time.monotonic()
            held = asyncio.ensure_future(client.invoke(addr, pull_request("TopicL", 1, sys_flag=0x6,
                                                                          suspend_ms=10_000), 15_000))
            await asyncio.sleep(0.2)
            assert not held.done()
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, send_header("TopicL"), b"second"))
            assert r.code == ResponseCode.SUCCESS
            resp = await held
            assert time.monotonic() - t0 < 5
            assert resp.code == ResponseCode.SUCCESS
            assert [m.body for m in iter_records(resp.body)] == [b"second"]
            # suspended pull with a short hold and no message -> PULL_NOT_FOUND, next offset = requested
            t0 = time.monotonic()
            resp = await client.invoke(addr, pull_request("TopicL", 2, sys_flag=0x6, suspend_ms=300), 5000)
            elapsed = time.monotonic() - t0
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert resp.ext_fields["nextBeginOffset"] == "2"
            assert 0.25 <= elapsed < 3
            # a held request is answered when the broker stops
            held = asyncio.ensure_future(client.invoke(addr, pull_request("TopicL", 2, sys_flag=0x6,
                                                                          suspend_ms=20_000), 15_000))
            await asyncio.sleep(0.2)
            await broker.stop()
            resp = await held
            assert resp.code == ResponseCode.PULL_NOT_FOUND
        finally:
            await client.close()
            await broker.stop()

    run(main())


def test_heartbeat_consumer_list_and_notify(tmp_path):
    async def main() -> None:
        broker = Broker(broker_cfg(), store_cfg(tmp_path))
        await broker.start()
        notified: list[str] = []

        def on_request(conn, cmd):
            if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                notified.append(cmd.ext_fields["consumerGroup"])
            return None

        c1 = RemotingClient(on_request)
        c2 = RemotingClient(on_request)
        addr = f"127.0.0.1:{broker.listen_port}"
        try:
            r = await c1.invoke(addr, heartbeat("10.0.0.1@1", "CG1", "TopicH", "A"))
            assert r.code == ResponseCode.SUCCESS and r.version == 409
            assert broker.ctx.topics.get("%RETRY%CG1") is not None
            r = await c1.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                              {"consumerGroup": "CG1"}))
            assert r.code == ResponseCode.SUCCESS
            assert ConsumerListBody.from_json(r.body).consumer_id_list == ["10.0.0.1@1"]
            r = await c2.invoke(addr, heartbeat("10.0.0.2@2", "CG1", "TopicH", "A"))
            assert r.code == ResponseCode.SUCCESS
            for _ in range(50):
                if notified:
                    break
                await asyncio.sleep(0.02)
            assert "CG1" in notified
            r = await c1.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                              {"consumerGroup": "CG1"}))
            assert sorted(ConsumerListBody.from_json(r.body).consumer_id_list) == ["10.0.0.1@1", "10.0.0.2@2"]

            # pull without the subscription flag uses the heartbeat subscription (tag A)
            for tag in ("A", "B", "A"):
                r = await c1.invoke(addr, RemotingCommand.request(
                    RequestCode.SEND_MESSAGE, send_header("TopicH", props={"TAGS": tag}), tag.encode()))
                assert r.code == ResponseCode.SUCCESS
            r = await c1.invoke(addr, pull_request("TopicH", 0, group="CG1", sys_flag=0x1))
            assert r.code == ResponseCode.SUCCESS
            assert len(list(iter_records(r.body))) == 2
            r = await c1.invoke(addr, pull_request("TopicH", 0, group="NoHeartbeat", sys_flag=0))
            assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST

            # unregister: the remaining consumer is notified, the list shrinks
            notified.clear()
            r = await c2.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {
                "clientID": "10.0.0.2@2", "consumerGroup": "CG1"}))
            assert r.code == ResponseCode.SUCCESS
            r = await c1.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                              {"consumerGroup": "CG1"}))
            assert ConsumerListBody.from_json(r.body).consumer_id_list == ["10.0.0.1@1"]
            # connection close removes the channel
            await c1.close()
            for _ in range(50):
                if not broker.ctx.clients.consumer_ids("CG1"):
                    break
                await asyncio.sleep(0.02)
            r = await c2.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                              {"consumerGroup": "CG1"}))
            assert r.code == ResponseCode.SYSTEM_ERROR and "no consumer" in r.remark
        finally:
            await c1.close()
            await c2.close()
            await broker.stop()

    run(main())


@contextlib.asynccontextmanager
async def broker_with_namesrv(tmp_path) -> AsyncIterator[tuple[str, Broker, RemotingClient]]:
    """An in-process name server and a broker registered with it, plus a client: (name server addr, broker,
    client); the broker is started by the caller (a test may look at the name server before)."""
    from orbitmq.namesrv import NameServer, NamesrvConfig

    namesrv = NameServer(NamesrvConfig(listen_port=0, listen_host="127.0.0.1",
                                       kv_config_path=str(tmp_path / "kv.json")))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    broker = Broker(broker_cfg(namesrv_addr=ns), store_cfg(tmp_path))
    client = RemotingClient()
    try:
        yield ns, broker, client
    finally:
        await client.close()
        await broker.stop()
        await namesrv.stop()


def test_registers_with_name_server_reregisters_on_new_topic_and_unregisters(tmp_path):
    async def route(client: RemotingClient, ns: str, topic: str) -> RemotingCommand:
        return await client.invoke(ns, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))

    async def main() -> None:
        async with broker_with_namesrv(tmp_path) as (ns, broker, client):
            await broker.start()
            r = await route(client, ns, "TBW102")
            assert r.code == ResponseCode.SUCCESS and f"127.0.0.1:{broker.listen_port}".encode() in r.body
            assert (await route(client, ns, "AutoT")).code == ResponseCode.TOPIC_NOT_EXIST
            r = await client.invoke(f"127.0.0.1:{broker.listen_port}", RemotingCommand.request(
                RequestCode.SEND_MESSAGE, send_header("AutoT"), b"x"))
            assert r.code == ResponseCode.SUCCESS
            assert (await route(client, ns, "AutoT")).code == ResponseCode.SUCCESS  # registered before the answer
            await broker.stop()
            assert (await route(client, ns, "TBW102")).code == ResponseCode.TOPIC_NOT_EXIST

    run(main())


def test_created_topics_are_routable_when_the_creation_is_answered(tmp_path):
    """UPDATE_AND_CREATE_TOPIC, and a send that auto-creates its topic, answer after a registration round that
    started after the change, as Java registers inside the change: a client may use the route right away. Topics
    created back to back fall inside the rounds' 100 ms spacing, so an answer that did not wait would find none."""

    async def main() -> None:
        async with broker_with_namesrv(tmp_path) as (ns, broker, client):
            await broker.start()
            addr = f"127.0.0.1:{broker.listen_port}"

            async def ok(code: RequestCode, ext: dict[str, str], body: bytes | None = None) -> None:
                r = await client.invoke(addr, RemotingCommand.request(code, ext, body))
                assert r.code == ResponseCode.SUCCESS, r.remark

            async def routed(topic: str) -> bool:
                return (await client.invoke(ns, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))).code == ResponseCode.SUCCESS

            for i in range(5):
                await ok(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": f"Made{i}", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
                assert await routed(f"Made{i}"), f"Made{i} not routable when answered"
            # auto-created by a send: a single, a batch, two concurrent singles (usually in one read)
            await ok(RequestCode.SEND_MESSAGE, send_header("Auto0"), b"x")
            assert await routed("Auto0"), "Auto0 not routable when answered"
            await ok(RequestCode.SEND_BATCH_MESSAGE, send_header("Auto1"), batch_body([(b"a", {}), (b"b", {})]))
            assert await routed("Auto1"), "Auto1 not routable when answered"
            await asyncio.gather(*(ok(RequestCode.SEND_MESSAGE, send_header("Auto2"), b"x") for _ in range(2)))
            assert await routed("Auto2"), "Auto2 not routable when answered"

    run(main())


def test_startup_failures_are_one_line_config_errors(tmp_path):
    import socket

    from orbitmq.base.errors import ConfigError

    async def main() -> None:
        first = Broker(broker_cfg(), store_cfg(tmp_path))
        await first.start()
        try:
            with pytest.raises(ConfigError, match="locked"):
                await Broker(broker_cfg(), store_cfg(tmp_path)).start()
        finally:
            await first.stop()
        blocker = socket.socket()
        blocker.bind(("0.0.0.0", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        try:
            with pytest.raises(ConfigError, match=f":{port}: address already in use"):
                await Broker(broker_cfg(listen_port=port), store_cfg(tmp_path / "b")).start()
        finally:
            blocker.close()
        # the failed start released the store: it can be used again
        again = Broker(broker_cfg(), store_cfg(tmp_path / "b"))
        await again.start()
        await again.stop()
        (tmp_path / "file").write_text("x")
        with pytest.raises(ConfigError, match="is not writable") as e:
            await Broker(broker_cfg(), store_cfg(tmp_path / "file")).start()
        assert "\n" not in str(e.value)

    run(main())


def test_restart_keeps_messages_topics_and_committed_offsets(tmp_path):
    async def main() -> None:
        client = RemotingClient()
        broker = Broker(broker_cfg(), store_cfg(tmp_path))
        await broker.start()
        addr = f"127.0.0.1:{broker.listen_port}"
        try:
            for i in range(3):
                r = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.SEND_MESSAGE, send_header("TopicR", queue_id=1), b"r%d" % i))
                assert r.code == ResponseCode.SUCCESS
            r = await client.invoke(addr, pull_request("TopicR", 2, queue_id=1, sys_flag=0x5, commit=2))
            assert r.code == ResponseCode.SUCCESS and [m.body for m in iter_records(r.body)] == [b"r2"]
        finally:
            await client.close()
            await broker.stop()
        client = RemotingClient()
        broker = Broker(broker_cfg(), store_cfg(tmp_path))
        await broker.start()
        addr = f"127.0.0.1:{broker.listen_port}"
        try:
            assert broker.ctx.topics.get("TopicR").write_queue_nums == 4
            assert broker.ctx.offsets.query("CG", "TopicR", 1) == 2
            r = await client.invoke(addr, pull_request("TopicR", 0, queue_id=1))
            assert [m.body for m in iter_records(r.body)] == [b"r0", b"r1", b"r2"]
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": "CG", "topic": "TopicR", "queueId": "1"}))
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "2"
        finally:
            await client.close()
            await broker.stop()

    run(main())
