"""Producer auto-batching against a real `orbitmq standalone` process: concurrent senders are coalesced into
SEND_BATCH_MESSAGE requests and every SendResult points at its own stored message; a batch retried after a lost
response is answered by the broker's per-UNIQ_KEY dedup (stored once, same results); the blocking facade passes
the options through."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest

from orbitmq.base.errors import RemotingTimeoutError
from orbitmq.client import BlockingProducer, Producer, PullConsumer, PullStatus, SendResult, SendStatus
from orbitmq.model import Message, MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.testing.procs import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def counting(p: Producer, lose_first_batch_response: bool = False) -> tuple[Counter[int], list[str]]:
    """Count the producer's requests by code (and optionally drop the first batch response after the broker
    stored it); returns (counts, offset ids of the dropped response)."""
    inst = p._instance()
    real = inst.invoke
    codes: Counter[int] = Counter()
    lost: list[str] = []

    async def invoke(addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        codes[int(cmd.code)] += 1
        resp = await real(addr, cmd, timeout_ms)
        if lose_first_batch_response and cmd.code == RequestCode.SEND_BATCH_MESSAGE and not lost:
            lost.extend((resp.ext_fields or {}).get("msgId", "").split(","))
            raise RemotingTimeoutError("response lost (test)")
        return resp

    inst.invoke = invoke  # type: ignore[method-assign]
    return codes, lost


async def stored(ns: str, topic: str) -> dict[tuple[MessageQueue, int], Any]:
    """Every stored message of the topic by (queue, queue offset)."""
    out: dict[tuple[MessageQueue, int], Any] = {}
    async with PullConsumer("CG_auto_batch", ns) as pc:
        for mq in await pc.fetch_queues(topic):
            offset = 0
            while True:
                res = await pc.pull(mq, offset, 32)
                if res.status is not PullStatus.FOUND:
                    break
                for m in res.msgs:
                    out[(mq, m.queue_offset)] = m
                offset = res.next_begin_offset
    return out


def test_concurrent_senders_are_batched_and_each_result_is_its_own_message(standalone: Standalone) -> None:
    async def main() -> None:
        async with Producer("PG_auto", standalone.namesrv_addr, auto_batch=True) as p:
            await p.send(Message("AutoT", b"warm-up"))  # route known: the senders start together
            codes, _ = counting(p)
            sent: list[tuple[Message, SendResult]] = []

            async def sender(w: int) -> None:
                for i in range(25):
                    m = Message("AutoT", f"w{w}-{i}".encode(), {"KEYS": f"k{w}-{i}"})
                    sent.append((m, await p.send(m)))

            await asyncio.gather(*(sender(w) for w in range(8)))
            assert codes[RequestCode.SEND_BATCH_MESSAGE] >= 1
            assert codes[RequestCode.SEND_BATCH_MESSAGE] + codes[RequestCode.SEND_MESSAGE_V2] < 200
            results = [r for _, r in sent]
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert len({r.msg_id for r in results}) == len({r.offset_msg_id for r in results}) == 200
            assert len({(r.message_queue, r.queue_offset) for r in results}) == 200
            found = await stored(standalone.namesrv_addr, "AutoT")
            assert len(found) == 201  # and the warm-up
            for m, r in sent:
                ext = found[(r.message_queue, r.queue_offset)]
                assert ext.body == m.body and ext.msg_id == r.msg_id and ext.offset_msg_id == r.offset_msg_id
                assert ext.properties["KEYS"] == m.properties["KEYS"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_batch_retried_after_a_lost_response_is_stored_once(standalone: Standalone) -> None:
    async def main() -> None:
        async with Producer("PG_auto_dedup", standalone.namesrv_addr, auto_batch=True) as p:
            await p.send(Message("AutoDedup", b"warm-up"))
            codes, lost = counting(p, lose_first_batch_response=True)
            ms = [Message("AutoDedup", f"m{i}".encode()) for i in range(6)]
            results = await asyncio.gather(*(p.send(m) for m in ms))
            assert codes[RequestCode.SEND_BATCH_MESSAGE] == 2  # the lost one and its retry
            assert [r.offset_msg_id for r in results] == lost  # the broker answered the retry from its dedup
            found = await stored(standalone.namesrv_addr, "AutoDedup")
            assert len(found) == 7  # six messages and the warm-up: nothing stored twice
            assert [found[(r.message_queue, r.queue_offset)].body for r in results] == [m.body for m in ms]
            info = await p._instance().invoke(standalone.broker_addr,
                                              RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert KVTable.from_json(info.body).table["dedupHits"] == "6"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_blocking_producer_takes_the_auto_batch_options(standalone: Standalone) -> None:
    with BlockingProducer("PG_auto_blocking", standalone.namesrv_addr, auto_batch=True,
                          auto_batch_max_messages=4) as bp:
        assert bp.producer is not None and bp.producer.auto_batch and bp.producer.auto_batch_max_messages == 4
        results: list[SendResult] = []

        def worker(w: int) -> None:
            for i in range(10):
                results.append(bp.send(Message("AutoBlocking", f"{w}-{i}".encode())))

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 40 and all(r.status is SendStatus.SEND_OK for r in results)
        assert len({(r.message_queue, r.queue_offset) for r in results}) == 40
