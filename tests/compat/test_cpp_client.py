"""The official RocketMQ C++ client (PyPI rocketmq==0.4.4) against `orbitmq standalone`, unchanged."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from orbitmq.client import Producer, PushConsumer
from orbitmq.client.blocking import BlockingProducer
from orbitmq.model import Message

pytestmark = [pytest.mark.compat, pytest.mark.timeout(240)]


def _by_key(items):
    return {x["key"] if "key" in x else x["keys"]: x for x in items}


def _assert_exact(sent, received):
    got = _by_key(received)
    assert len(received) == len(got), "duplicates delivered"
    assert set(got) == {s["key"] for s in sent}
    for s in sent:
        r = got[s["key"]]
        assert r["body"] == s["body"] and r["tags"] == s["tags"]
        assert r["seq"] == s["props"]["seq"] and r["run"] == s["props"]["run"]


@pytest.mark.parametrize("mode", ["sync", "async", "oneway", "batch"])
def test_cpp_send_modes_then_push_consumer_clustering(server, cpp, mode):
    topic, run = f"Compat_{mode}", f"run-{mode}"
    prod = cpp("produce", group=f"PG_{mode}", namesrv=server.namesrv_addr, topic=topic, count=40, mode=mode, run=run)
    prod.finish()
    assert prod.done()["errors"] == []
    sent = prod.sent()
    assert len(sent) == 40 and all(s.get("status", 0) == 0 for s in sent)
    cons = cpp("push", group=f"CG_{mode}", namesrv=server.namesrv_addr, topic=topic, expect=40, timeout_s=60)
    cons.finish()
    _assert_exact(sent, cons.received())


def test_cpp_orderly_send_keeps_per_queue_order(server, cpp):
    topic = "Compat_orderly"
    prod = cpp("produce", group="PG_ord", namesrv=server.namesrv_addr, topic=topic, count=60, mode="orderly", run="o")
    prod.finish()
    sent = prod.sent()
    assert len(sent) == 60
    cons = cpp("push", group="CG_ord", namesrv=server.namesrv_addr, topic=topic, expect=60, timeout_s=60, orderly=True)
    cons.finish()
    got = cons.received()
    _assert_exact(sent, got)
    # the selector is `arg % queue count` with arg = i % 4: same arg, same queue, in send order
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in got:
        per_queue[r["queue_id"]].append(int(r["seq"]))
    for qid, seqs in per_queue.items():
        assert seqs == sorted(seqs), f"queue {qid} out of order: {seqs}"
        assert len({s % 4 for s in seqs}) == 1


def test_cpp_pull_consumer_reads_everything(server, cpp):
    topic = "Compat_pull"
    prod = cpp("produce", group="PG_pull", namesrv=server.namesrv_addr, topic=topic, count=50, mode="batch", run="p")
    prod.finish()
    cons = cpp("pull", group="CG_pull", namesrv=server.namesrv_addr, topic=topic, expect=50, timeout_s=40)
    cons.finish()
    _assert_exact(prod.sent(), cons.received())


def test_cpp_broadcasting_consumers_each_get_everything(server, cpp):
    topic = "Compat_bcast"
    with BlockingProducer("PG_warm", namesrv=server.namesrv_addr) as warm:
        warm.send(Message(topic, b"warm", {"run": "warm"}))  # creates the topic, so consumers find a route
        consumers = [
            cpp("push", group="CG_bcast", namesrv=server.namesrv_addr, topic=topic, expect=30, timeout_s=90,
                model="broadcasting", instance=f"i{n}", count_run="b")
            for n in range(2)
        ]
        for c in consumers:
            c.wait_started()
        # A broadcasting consumer starts at the queue's end once its first rebalance ran: wait until each one
        # has seen a fresh warm-up message, then send the real ones.
        for c in consumers:
            ok = False
            for _ in range(30):
                warm.send(Message(topic, b"warm", {"run": "warm2"}))
                if c.wait_for(lambda o: o.get("recv", {}).get("run") == "warm2", timeout_s=1.0):
                    ok = True
                    break
            assert ok, "broadcasting consumer never became ready"
    prod = cpp("produce", group="PG_b", namesrv=server.namesrv_addr, topic=topic, count=30, mode="sync", run="b")
    prod.finish()
    for c in consumers:
        c.finish()
        got = [r for r in c.received() if r["run"] == "b"]
        _assert_exact(prod.sent(), got)


def test_sdk_and_cpp_client_interoperate(server, cpp):
    """Our SDK produces, the C++ push consumer receives; the C++ producer sends, our push consumer receives."""
    topic = "Compat_interop"

    async def sdk_produce() -> list[dict]:
        p = Producer("PG_sdk", namesrv=server.namesrv_addr)
        await p.start()
        sent = []
        try:
            for i in range(20):
                m = Message(topic, f"sdk-{i}".encode(), {"seq": str(i), "run": "sdk"})
                m.tags = "TagS"
                m.keys = f"sdk-key-{i}"
                r = await p.send(m)
                assert r.status.name == "SEND_OK"
                sent.append({"key": f"sdk-key-{i}", "body": f"sdk-{i}", "tags": "TagS", "props": {"seq": str(i), "run": "sdk"}})
        finally:
            await p.shutdown()
        return sent

    sent = asyncio.run(sdk_produce())
    cons = cpp("push", group="CG_interop", namesrv=server.namesrv_addr, topic=topic, expect=20, timeout_s=60,
               expression="TagS")
    cons.finish()
    _assert_exact(sent, cons.received())

    prod = cpp("produce", group="PG_cpp2", namesrv=server.namesrv_addr, topic=topic, count=20, mode="sync", run="cpp",
               tags=["TagC"])
    prod.finish()

    async def sdk_consume() -> list:
        got: list = []
        done = asyncio.Event()

        def listener(msgs):
            from orbitmq.client import ConsumeResult

            for m in msgs:
                if m.properties.get("run") == "cpp":
                    got.append(m)
            if len(got) >= 20:
                done.set()
            return ConsumeResult.SUCCESS

        c = PushConsumer("CG_sdk_interop", namesrv=server.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe(topic, "TagC", listener)
        await c.start()
        try:
            await asyncio.wait_for(done.wait(), 40)
        finally:
            await c.shutdown()
        return got

    got = asyncio.run(sdk_consume())
    by_key = {m.keys[0]: m for m in got}
    assert len(by_key) == 20
    for s in prod.sent():
        m = by_key[s["key"]]
        assert m.body.decode() == s["body"] and m.tags == "TagC" and m.properties["seq"] == s["props"]["seq"]
