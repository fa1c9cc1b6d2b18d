"""RIP-32 special services on an acting slave, with real processes.

One name server (supportActingMaster), group A = master + slave (enableSlaveActingMaster, enableRemoteEscape),
group B = master; topic T on both. Before A's master is killed (-9): a level-2 (5 s) delay message, a transaction
half whose producer answers UNKNOWN, and a popped-but-unacked message are on A and replicated. Then A's slave becomes
acting master and: delivers the delay message on time through B, checks the half (the producer now answers COMMIT)
and delivers the real message through B, revives the popped message (its %RETRY% copy lands on B). A's master
comes back, the slave steps down and hands its transaction decision over (the master then knows the half finished).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, LocalTransactionState
from orbitmq.client.broker_api import decode_messages
from orbitmq.client.instance import ClientInstance
from orbitmq.client.transaction_producer import TransactionProducer
from orbitmq.model import Message, MessageExt
from orbitmq.model.msg_id import decode_offset_msg_id
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.protocol.ext import to_send_v2
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import BrokerCluster, ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

TOPIC = "TActing"
POP_GROUP = "GP_acting"
TX_GROUP = "PG_acting_tx"
COMMON = {"slaveSyncInterval": 500, "registerNameServerPeriod": 2000, "enableSlaveActingMaster": True,
          "enableRemoteEscape": True, "compatibleWithOldNameSrv": False, "brokerHeartbeatInterval": 500,
          "brokerNotActiveTimeoutMillis": 3000, "syncBrokerMemberGroupPeriod": 500,
          "transactionCheckInterval": 1000, "transactionTimeOut": 1000}


async def invoke(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
                 body: bytes | None = None) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, ext or {}, body), 5000)


async def runtime(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await invoke(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return KVTable.from_json(resp.body).table


async def wait_for(pred: Callable[[], Awaitable[Any]], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = await pred()
        except OSError:
            value = None
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


async def pull_all(client: RemotingClient, addr: str, topic: str, queues: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    for q in range(queues):
        offset = 0
        while True:
            ext = {"consumerGroup": "G_check", "topic": topic, "queueId": str(q), "queueOffset": str(offset),
                   "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                   "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
            resp = await invoke(client, addr, RequestCode.PULL_MESSAGE, ext)
            if resp.code != ResponseCode.SUCCESS:
                nxt = int((resp.ext_fields or {}).get("nextBeginOffset", offset))
                if nxt <= offset:
                    break
                offset = nxt
                continue
            msgs = decode_messages(resp.body)
            out += msgs
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def find_uniq(client: RemotingClient, addr: str, topic: str, uniq: str, queues: int = 4) -> MessageExt | None:
    for m in await pull_all(client, addr, topic, queues):
        if m.properties.get(Prop.UNIQ_KEY) == uniq:
            return m
    return None


def send_header(topic: str, queue_id: int, props: dict[str, str], group: str = "PG_raw") -> dict[str, str]:
    return to_send_v2({"producerGroup": group, "topic": topic, "defaultTopic": "TBW102",
                       "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
                       "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
                       "properties": encode_properties(props), "reconsumeTimes": "0", "unitMode": "false",
                       "batch": "false"})


class Cluster(BrokerCluster):
    def __init__(self, root: Path) -> None:
        super().__init__(root, broker_defaults=COMMON, supportActingMaster=True, scanNotActiveBrokerInterval=1000)


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def test_acting_slave_runs_delay_transaction_and_pop_revive_through_b(cluster: Cluster,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientInstance, "route_interval_ms", 1000)  # the producer finds the acting slave quickly
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 1000)
    a_master_proc, a_master = cluster.broker("broker-a", 0, "ASYNC_MASTER")
    _, a_slave = cluster.broker("broker-a", 1, "SLAVE")
    _, b_master = cluster.broker("broker-b", 0, "ASYNC_MASTER")
    asyncio.run(_scenario(cluster, a_master_proc, a_master, a_slave, b_master))


async def _scenario(cluster: Cluster, a_master_proc: ServerProcess, a_master: str, a_slave: str,
                    b_master: str) -> None:
    client = RemotingClient(name="test")
    crashed = asyncio.Event()

    def checker(msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE if crashed.is_set() else LocalTransactionState.UNKNOWN

    producer = TransactionProducer(TX_GROUP, cluster.ns_addr, lambda msg, arg: LocalTransactionState.UNKNOWN,
                                   checker)
    try:
        async with Admin(cluster.ns_addr) as admin:
            for addr in (a_master, b_master):
                await admin.update_topic(TOPIC, broker_addr=addr, read_queue_nums=4, write_queue_nums=4)
            await admin.update_topic("%RETRY%" + POP_GROUP, broker_addr=b_master, read_queue_nums=1,
                                     write_queue_nums=1)
        await wait_for(lambda: _route_has(client, cluster.ns_addr, TOPIC, {"broker-a", "broker-b"}), 20,
                       "route of the topic on both groups")
        await wait_for(lambda: _slave_connected(client, a_master), 20, "A's slave connected")

        # 1. a level-2 (5 s) delay message on A
        delay_uniq = "DELAY0000000000000000000000000001"
        sent_at = int(time.time() * 1000)
        resp = await invoke(client, a_master, RequestCode.SEND_MESSAGE_V2,
                            send_header(TOPIC, 0, {Prop.UNIQ_KEY: delay_uniq, Prop.DELAY: "2", Prop.WAIT: "true"}),
                            b"delayed")
        assert resp.code == ResponseCode.SUCCESS, resp.remark

        # 2. a pending transaction half on A (the producer answers UNKNOWN until the crash)
        await producer.start()
        half = None
        for i in range(8):
            result, _ = await producer.send_in_transaction(Message(TOPIC, f"tx-{i}".encode()))
            if result.message_queue.broker_name == "broker-a":
                half = result
                break
        assert half is not None, "no half message landed on broker-a"

        # 3. a popped-but-unacked message on A
        pop_uniq = "POP00000000000000000000000000001"
        resp = await invoke(client, a_master, RequestCode.SEND_MESSAGE_V2,
                            send_header(TOPIC, 1, {Prop.UNIQ_KEY: pop_uniq, Prop.WAIT: "true"}), b"popped")
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        pop = await invoke(client, a_master, RequestCode.POP_MESSAGE,
                           {"consumerGroup": POP_GROUP, "topic": TOPIC, "queueId": "1", "maxMsgNums": "1",
                            "invisibleTime": "3000", "pollTime": "0", "bornTime": str(int(time.time() * 1000)),
                            "initMode": "0", "expType": "TAG", "exp": "*"})
        assert pop.code == ResponseCode.SUCCESS, pop.remark
        assert [m.properties.get(Prop.UNIQ_KEY) for m in decode_messages(pop.body)] == [pop_uniq]

        await wait_for(lambda: _caught_up(client, a_master, a_slave), 10, "A's slave caught up")
        assert (await runtime(client, a_slave)).get("actingMaster") == "false"

        # --- A's master dies ---
        a_master_proc.kill9()
        killed_at = time.monotonic()
        crashed.set()
        await wait_for(lambda: _acting(client, a_slave, "true"), 10, "A's slave acting master")
        assert time.monotonic() - killed_at < 5

        delayed = await wait_for(lambda: find_uniq(client, b_master, TOPIC, delay_uniq), 15,
                                 "the delay message on B")
        assert abs(delayed.store_timestamp - (sent_at + 5000)) <= 1000, \
            f"delivered {delayed.store_timestamp - sent_at} ms after sending (due after 5000)"
        assert delayed.body == b"delayed"

        committed = await wait_for(lambda: find_uniq(client, b_master, TOPIC, half.msg_id), 30,
                                   "the committed transaction message on B")
        assert committed.body.startswith(b"tx-")
        assert committed.properties.get(Prop.TRAN_MSG) is None

        retry = await wait_for(lambda: find_uniq(client, b_master, "%RETRY%" + POP_GROUP, pop_uniq, 1), 20,
                               "the revived pop message on B")
        assert retry.body == b"popped" and retry.reconsume_times == 1
        assert await find_uniq(client, a_slave, TOPIC, half.msg_id) is None  # nothing written to the replica

        # --- A's master comes back; the slave steps down and hands its decision over ---
        a_master_proc.start()
        await wait_for(lambda: _acting(client, a_slave, "false"), 30, "A's slave stepping down")
        _, _, phys = decode_offset_msg_id(half.offset_msg_id)
        end = {"producerGroup": TX_GROUP, "tranStateTableOffset": str(half.queue_offset),
               "commitLogOffset": str(phys), "commitOrRollback": "8", "fromTransactionCheck": "true",
               "msgId": half.msg_id, "transactionId": half.msg_id}

        async def finished_on_master() -> bool:
            r = await invoke(client, a_master, RequestCode.END_TRANSACTION, dict(end))
            assert r.code in (ResponseCode.SUCCESS, ResponseCode.SLAVE_NOT_AVAILABLE), r.remark
            return r.code == ResponseCode.SUCCESS and r.remark == "transaction already finished"

        await wait_for(finished_on_master, 20, "the master knowing the transaction finished")
        assert await find_uniq(client, a_master, TOPIC, half.msg_id) is None  # no second real message
    finally:
        await producer.shutdown()
        await client.close()


async def _route_has(client: RemotingClient, ns: str, topic: str, names: set[str]) -> bool:
    from orbitmq.protocol.bodies import TopicRouteData

    resp = await invoke(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if resp.code != ResponseCode.SUCCESS:
        return False
    return {q.broker_name for q in TopicRouteData.from_json(resp.body).queue_datas} >= names


async def _slave_connected(client: RemotingClient, master: str) -> bool:
    return (await runtime(client, master)).get("haConnectedSlaves") == "1"


async def _caught_up(client: RemotingClient, master: str, slave: str) -> bool:
    m, s = await runtime(client, master), await runtime(client, slave)
    return m["commitLogMaxOffset"] == s["commitLogMaxOffset"]


async def _acting(client: RemotingClient, addr: str, value: str) -> bool:
    try:
        return (await runtime(client, addr)).get("actingMaster") == value
    except Exception:  # noqa: BLE001 - the broker may be restarting
        return False
