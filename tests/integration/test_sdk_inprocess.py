"""The SDK against an in-process NameServer + Broker on free 127.0.0.1 ports: produce (single, batch, orderly,
oneway, async), push consume (clustering with tag filter, rebalance between two consumers, broadcasting, orderly),
pull consumer offsets, and the admin operations."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import asynccontextmanager

import pytest

from orbitmq.base import marks
from orbitmq.broker import Broker, BrokerConfig
from orbitmq.client import (
    Admin,
    ConsumeOrderlyResult,
    ConsumeResult,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    broker_api,
)
from orbitmq.model import Message, MessageQueue
from orbitmq.namesrv import NameServer, NamesrvConfig
from orbitmq.store import StoreConfig

pytestmark = pytest.mark.integration


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


@asynccontextmanager
async def cluster(tmp_path):
    ns = NameServer(NamesrvConfig(listen_port=0, listen_host="127.0.0.1",
                                  kv_config_path=str(tmp_path / "kvConfig.json")))
    await ns.start()
    ns_addr = f"127.0.0.1:{ns.port}"
    store = StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                        mapped_file_size_consume_queue=20 * 1000, max_message_size=1024 * 1024,
                        max_hash_slot_num=1000, max_index_num=4000)
    broker = Broker(BrokerConfig(listen_port=0, broker_ip1="127.0.0.1", namesrv_addr=ns_addr), store)
    await broker.start()
    admin = Admin(ns_addr)
    await admin.start()
    try:
        for _ in range(100):  # wait for the broker's registration
            if await admin.cluster_brokers():
                break
            await asyncio.sleep(0.05)
        yield ns_addr, broker, admin
    finally:
        await admin.close()
        await broker.stop()
        await ns.stop()


async def create_topic(admin: Admin, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC, then wait until the broker's re-registration made the route visible."""
    await admin.update_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    for _ in range(200):
        try:
            rd = await admin.topic_route(topic)
            if rd.queue_datas and rd.queue_datas[0].write_queue_nums == queues:
                return
        except Exception:  # noqa: BLE001 - not registered yet
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"route of {topic} never appeared")


async def wait_for(pred, timeout_s: float = 10.0, step_s: float = 0.05) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        if pred():
            return True
        await asyncio.sleep(step_s)
    return pred()


def own_tasks() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


def test_send_then_push_consume_with_tag_filter_and_committed_offsets(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, _broker, admin):
            await create_topic(admin, "T1", 4)
            before = own_tasks()
            producer = Producer("PG1", ns)
            await producer.start()
            sent = []
            for i in range(20):
                m = Message("T1", f"m{i}".encode(), {})
                m.tags = "A" if i % 2 == 0 else "B"
                m.keys = [f"k{i}"]
                r = await producer.send(m)
                assert r.status is SendStatus.SEND_OK
                assert r.msg_id == m.properties["UNIQ_KEY"] and r.offset_msg_id and r.queue_offset >= 0
                sent.append((m, r))
            got: list = []

            def listener(msgs):
                got.extend(msgs)
                return ConsumeResult.SUCCESS

            c = PushConsumer("CG1", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                             persist_offset_interval_ms=200)
            c.subscribe("T1", "A", listener)
            await c.start()
            assert await wait_for(lambda: len(got) >= 10)
            await asyncio.sleep(0.3)
            assert sorted(m.body for m in got) == sorted(m.body for m, _ in sent if m.tags == "A")
            assert all(m.tags == "A" and m.topic == "T1" for m in got)
            # committed offsets reach the broker (oneway every 200 ms here)
            async def progress_done():
                rows = await admin.consumer_progress("CG1", "T1")
                return rows and all(lag == 0 for _, _, _, lag, _ in rows)
            ok = False
            for _ in range(50):
                if await progress_done():
                    ok = True
                    break
                await asyncio.sleep(0.1)
            assert ok
            await c.shutdown()
            await producer.shutdown()
            assert own_tasks() <= before  # no orphan tasks
    run(main())


def test_batch_orderly_oneway_async_and_pull_consumer_offsets(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, _broker, _admin):
            await create_topic(_admin, "T2", 4)
            async with Producer("PG2", ns) as p, PullConsumer("CG2", ns) as pc:
                batch = [Message("T2", f"b{i}".encode(), {"KEYS": f"bk{i}"}) for i in range(5)]
                r = await p.send_batch(batch)
                assert r.status is SendStatus.SEND_OK and len(r.msg_id.split(",")) == 5
                res = await pc.pull(r.message_queue, r.queue_offset, 32)
                assert res.status is PullStatus.FOUND
                assert [m.body for m in res.msgs[:5]] == [f"b{i}".encode() for i in range(5)]
                assert [m.msg_id for m in res.msgs[:5]] == r.msg_id.split(",")
                # orderly: the same key always maps to the same queue, in send order
                qs = {(await p.send_orderly(Message("T2", b"o%d" % i), "order-1")).message_queue
                      for i in range(5)}
                assert len(qs) == 1
                # a big body is compressed on the wire and inflated by the consumer
                big = b"x" * 10_000
                rb = await p.send(Message("T2", big))
                res = await pc.pull(rb.message_queue, rb.queue_offset, 1)
                assert res.msgs[0].body == big and res.msgs[0].sys_flag & 1
                await p.send_oneway(Message("T2", b"oneway"))
                fut = p.send_async(Message("T2", b"async"))
                assert (await fut).status is SendStatus.SEND_OK
                mqs = await pc.fetch_queues("T2")
                assert sorted(mqs) == [MessageQueue("T2", mqs[0].broker_name, i) for i in range(4)]
                mq = r.message_queue
                assert await pc.query_offset(mq) == -1 or await pc.query_offset(mq) == 0
                await pc.update_offset(mq, 3)
                assert await pc.query_offset(mq) == 3
                assert await pc.max_offset(mq) >= 5 and await pc.min_offset(mq) == 0
                res = await pc.pull(mq, await pc.max_offset(mq), 32)
                assert res.status is PullStatus.NO_NEW_MSG
                # long poll: a held pull is answered when a message arrives
                t = asyncio.ensure_future(pc.pull(mq, await pc.max_offset(mq), 32, block_ms=5000))
                await asyncio.sleep(0.3)
                await p.send(Message("T2", b"late"), queue=mq)
                res = await asyncio.wait_for(t, 5)
                assert res.status is PullStatus.FOUND and res.msgs[0].body == b"late"
    run(main())


def test_two_consumers_split_queues_then_one_takes_all(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, _broker, admin):
            await create_topic(admin, "T3", 8)
            c1 = PushConsumer("CG3", ns, instance_name="c1", rebalance_interval_ms=1000)
            c2 = PushConsumer("CG3", ns, instance_name="c2", rebalance_interval_ms=1000)
            for c in (c1, c2):
                c.subscribe("T3", "*", lambda msgs: ConsumeResult.SUCCESS)
            await c1.start()
            await c2.start()

            def split():
                a = {q for q in c1.assigned_queues if q.topic == "T3"}
                b = {q for q in c2.assigned_queues if q.topic == "T3"}
                return len(a) == 4 and len(b) == 4 and not (a & b)
            assert await wait_for(split, 10)
            conns = await admin.consumer_connections("CG3")
            assert len(conns.connection_set) == 2
            await c2.shutdown()
            assert await wait_for(lambda: len([q for q in c1.assigned_queues if q.topic == "T3"]) == 8, 10)
            await c1.shutdown()
    run(main())


def test_broadcasting_consumers_each_get_every_message(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, _broker, admin):
            await create_topic(admin, "T4", 2)
            got: dict[str, list] = defaultdict(list)
            cs = []
            for name in ("b1", "b2"):
                c = PushConsumer("CG4", ns, instance_name=name, message_model="BROADCASTING",
                                 offsets_dir=tmp_path / "offsets", persist_offset_interval_ms=100)
                c.subscribe("T4", "*", lambda msgs, n=name: got[n].extend(msgs) or ConsumeResult.SUCCESS)
                await c.start()
                cs.append(c)
            assert await wait_for(lambda: all(len([q for q in c.assigned_queues if q.topic == "T4"]) == 2
                                              for c in cs))
            async with Producer("PG4", ns) as p:
                for i in range(6):
                    await p.send(Message("T4", b"%d" % i))
            assert await wait_for(lambda: len(got["b1"]) == 6 and len(got["b2"]) == 6)
            for c in cs:
                await c.shutdown()
            files = list((tmp_path / "offsets").rglob("offsets.json"))
            assert len(files) == 2
    run(main())


def test_orderly_consumer_sees_each_queue_in_order_and_suspend_retries(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, _broker, admin):
            await create_topic(admin, "T5", 2)
            seen: dict[int, list[int]] = defaultdict(list)
            suspended = {"done": False}

            async def listener(msgs):
                m = msgs[0]
                n = int(m.body)
                if n == 3 and not suspended["done"]:
                    suspended["done"] = True
                    return ConsumeOrderlyResult.SUSPEND
                seen[m.queue_id].append(n)
                return ConsumeOrderlyResult.SUCCESS

            # LOCK_BATCH_MQ must be served: REQUEST_CODE_NOT_SUPPORTED (or any error) fails the test, never skips it
            addr = (await admin.cluster_brokers())[0][3]
            await broker_api.lock_batch(admin._i(), addr, "probe@1", "CG5-probe", [MessageQueue("T5", "x", 0)])
            c = PushConsumer("CG5", ns, orderly=True, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            c.subscribe("T5", "*", listener)
            async with Producer("PG5", ns) as p:
                for i in range(10):
                    await p.send_orderly(Message("T5", b"%d" % i), f"key{i % 2}")
            await c.start()
            assert await wait_for(lambda: sum(len(v) for v in seen.values()) == 10, 15)
            for v in seen.values():
                assert v == sorted(v)
            assert suspended["done"]
            await c.shutdown()
    run(main())


def test_admin_queries(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, broker, admin):
            await create_topic(admin, "T6", 2)
            brokers = await admin.cluster_brokers()
            assert brokers and brokers[0][2] == 0
            assert "T6" in await admin.topic_list()
            route = await admin.topic_route("T6")
            assert route.queue_datas[0].write_queue_nums == 2
            async with Producer("PG6", ns) as p:
                m = Message("T6", b"hello", {})
                m.keys = ["order-42"]
                r = await p.send(m)
            got = await admin.query_msg_by_id(r.offset_msg_id)
            assert got.body == b"hello"
            assert (await admin.query_msg_by_id(r.msg_id, topic="T6")).body == b"hello"
            found = await admin.query_msg_by_key("T6", "order-42")
            assert [x.body for x in found] == [b"hello"]
            status = await admin.topic_status("T6")
            assert len(status) == 2 and sum(mx for _, _, mx, _ in status) == 1
            info = await admin.broker_runtime_info(brokers[0][3])
            assert isinstance(info, dict) and info
            # reset with an online consumer: the broker pushes RESET_CONSUMER_CLIENT_OFFSET, the message comes again
            got = []
            c = PushConsumer("CG6", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=100)
            c.subscribe("T6", "*", lambda msgs: got.extend(msgs) or ConsumeResult.SUCCESS)
            await c.start()
            assert await wait_for(lambda: len(got) == 1)
            for _ in range(50):
                rows = await admin.consumer_progress("CG6", "T6")
                if rows and sum(co for _, _, co, _, _ in rows) == 1:
                    break
                await asyncio.sleep(0.1)
            offs = await admin.reset_offset_by_time("CG6", "T6", 0)
            assert offs and all(v == 0 for v in offs.values())
            assert await wait_for(lambda: len(got) == 2)
            assert got[1].body == b"hello"
            await c.shutdown()
    run(main())


def test_reconsume_later_hands_the_message_back_to_the_broker(tmp_path):
    async def main():
        async with cluster(tmp_path) as (ns, _broker, admin):
            await create_topic(admin, "T7", 1)
            calls = []

            def listener(msgs):
                calls.extend(msgs)
                return ConsumeResult.RECONSUME_LATER

            marks.reset()
            c = PushConsumer("CG7", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=100)
            c.subscribe("T7", "*", listener)
            async with Producer("PG7", ns) as p:
                m = Message("T7", b"retry-me")
                m.keys = ["rk-1"]
                await p.send(m)
            await c.start()
            assert await wait_for(lambda: len(calls) >= 1)
            # handed back (send-back, or a publish to %RETRY%CG7 when the broker lacks code 36): the offset moves on
            ok = False
            for _ in range(50):
                rows = await admin.consumer_progress("CG7", "T7")
                if rows and all(lag == 0 for _, _, _, lag, _ in rows):
                    ok = True
                    break
                await asyncio.sleep(0.1)
            assert ok
            assert marks.count("consumer reconsume later") >= 1
            assert marks.count("consumer send back failed, local retry") == 0
            # the retried copy is stored (delayed: in the schedule topic, keys kept)
            found = await admin.query_msg_by_key("SCHEDULE_TOPIC_XXXX", "rk-1")
            assert [x.body for x in found] == [b"retry-me"]
            assert found[0].properties.get("RETRY_TOPIC") == "T7"
            await c.shutdown()
    run(main())


def test_blocking_facade_from_a_plain_thread(tmp_path):
    from orbitmq.client import BlockingAdmin, BlockingProducer, BlockingPushConsumer

    async def main():
        async with cluster(tmp_path) as (ns, _broker, admin):
            await create_topic(admin, "T8", 2)
            got = []

            def sync_side():
                c = BlockingPushConsumer("CG8", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                c.subscribe("T8", "*", lambda msgs: got.extend(msgs) or ConsumeResult.SUCCESS)
                c.start()
                with BlockingProducer("PG8", ns) as p:
                    results = [p.send(Message("T8", b"s%d" % i)) for i in range(3)]
                    batch = p.send_batch([Message("T8", b"b1"), Message("T8", b"b2")])
                with BlockingAdmin(ns) as a:
                    status = a.topic_status("T8")
                return c, results, batch, status

            c, results, batch, status = await asyncio.to_thread(sync_side)
            assert all(r.status is SendStatus.SEND_OK for r in results) and batch.status is SendStatus.SEND_OK
            assert sum(mx for _, _, mx, _ in status) == 5
            assert await wait_for(lambda: len(got) == 5)
            await asyncio.to_thread(c.shutdown)
    run(main())
