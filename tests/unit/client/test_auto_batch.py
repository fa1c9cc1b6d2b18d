"""Producer auto-batching against a scripted in-memory broker: which sends are coalesced into one
SEND_BATCH_MESSAGE, the per-message SendResults, limits, retries and errors (same as a plain send), cancellation,
linger and shutdown."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from orbitmq.base.errors import RemotingError, RemotingTimeoutError
from orbitmq.broker.handlers.send import decode_batch_body
from orbitmq.client import errors
from orbitmq.client.accumulator import ALONE, SendAccumulator
from orbitmq.client.errors import ClientStateError
from orbitmq.client.producer import Producer, SendResult, SendStatus
from orbitmq.client.route_cache import PublishInfo, QueueInfo, RouteInfo
from orbitmq.model import Message, MessageQueue, Prop, UniqIdGenerator, decode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, normalize_send_header

ROUTE = RouteInfo([QueueInfo("broker-a", 4, 4, 6), QueueInfo("broker-b", 4, 4, 6)],
                  {"broker-a": {0: "10.0.0.1:10911"}, "broker-b": {0: "10.0.0.2:10911"}})

Responder = Callable[[str, RemotingCommand], "RemotingCommand | BaseException | None"]


class FakeRoutes:
    def __init__(self) -> None:
        self.pis: dict[str, PublishInfo] = {}

    def publish_info(self, topic: str) -> PublishInfo:
        pi = self.pis.get(topic)
        if pi is None:
            pi = self.pis[topic] = PublishInfo(topic, ROUTE, seed=0)
        return pi

    def remove(self, topic: str) -> None:
        self.pis.pop(topic, None)


class FakeRemoting:
    """Every broker address is connected (the producer asks before a send with dedup on)."""

    def is_connected(self, addr: str) -> bool:
        return True


class FakeBroker:
    """Stores what it is sent (per queue offsets, offset ids "<addr>/<n>") unless `responder` answers first;
    a responder returning None lets the request through, an exception is raised, "hang" never answers."""

    def __init__(self) -> None:
        self.routes = FakeRoutes()
        self.remoting = FakeRemoting()
        self.requests: list[tuple[str, RemotingCommand]] = []
        self.responder: Responder | None = None
        self.hang = False
        self.offsets: dict[tuple[str, int], int] = defaultdict(int)
        self.stored = 0

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        self.requests.append((addr, cmd))
        await asyncio.sleep(0)
        if self.hang:
            await asyncio.sleep(3600)
        if self.responder is not None:
            r = self.responder(addr, cmd)
            if isinstance(r, BaseException):
                raise r
            if r is not None:
                return r
        h = normalize_send_header(cmd.ext_fields)
        n = len(decode_batch_body(cmd.body)) if cmd.code == RequestCode.SEND_BATCH_MESSAGE else 1
        q = (addr, int(h["queueId"]))
        first = self.offsets[q]
        self.offsets[q] += n
        ids = [f"{addr}/{self.stored + i}" for i in range(n)]
        self.stored += n
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.ext_fields = {"msgId": ",".join(ids), "queueId": h["queueId"], "queueOffset": str(first),
                           "MSG_REGION": "R1"}
        return resp

    async def unregister(self, **kw: Any) -> None:
        pass

    async def release(self) -> None:
        pass

    def codes(self) -> list[int]:
        return [int(c.code) for _, c in self.requests]

    def batch_sizes(self) -> list[int]:
        return [len(decode_batch_body(c.body)) if c.code == RequestCode.SEND_BATCH_MESSAGE else 1
                for _, c in self.requests]


def make(broker: FakeBroker, **kw: Any) -> Producer:
    kw.setdefault("auto_batch", True)
    p = Producer("PG", "127.0.0.1:1", **kw)
    p._inst = broker  # type: ignore[assignment]
    p._ids = UniqIdGenerator("10.0.0.9", seed=1)
    return p


def msgs(n: int, topic: str = "T", **props: str) -> list[Message]:
    return [Message(topic, f"body-{i}".encode(), dict(props)) for i in range(n)]


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_concurrent_sends_become_one_batch_with_per_message_results() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b)
        ms = msgs(8)
        ms[3].tags, ms[5].keys = "TagA", "k1 k2"
        ms[6].flag = 7
        rs: list[SendResult] = await asyncio.gather(*(p.send(m) for m in ms))
        assert b.codes() == [RequestCode.SEND_BATCH_MESSAGE]
        addr, cmd = b.requests[0]
        h = normalize_send_header(cmd.ext_fields)
        assert h["batch"] == "true" and h["topic"] == "T" and h["producerGroup"] == "PG"
        records = decode_batch_body(cmd.body)
        assert [r[1] for r in records] == [m.body for m in ms]
        assert [r[0] for r in records] == [m.flag for m in ms]
        assert [decode_properties(r[2]) for r in records] == [m.properties for m in ms]
        uniqs = [m.properties[Prop.UNIQ_KEY] for m in ms]
        assert len(set(uniqs)) == 8
        queue = MessageQueue("T", h["bname"], int(h["queueId"]))
        for i, (r, m) in enumerate(zip(rs, ms, strict=True)):
            assert r.status is SendStatus.SEND_OK
            assert r.msg_id == m.properties[Prop.UNIQ_KEY]
            assert r.offset_msg_id == f"{addr}/{i}"
            assert r.queue_offset == i
            assert r.message_queue == queue
            assert r.region_id == "R1"
        # the next round lands on the next queue (round-robin per batch) and continues its offsets correctly
        rs2 = await asyncio.gather(*(p.send(m) for m in msgs(3)))
        assert len(b.requests) == 2
        assert rs2[0].message_queue != queue and [r.queue_offset for r in rs2] == [0, 1, 2]

    run(main())


def test_a_lone_send_is_a_plain_send_message_v2_as_without_auto_batch() -> None:
    async def main() -> None:
        plain, auto = FakeBroker(), FakeBroker()
        m1, m2 = Message("T", b"x", {"TAGS": "a"}, flag=3), Message("T", b"x", {"TAGS": "a"}, flag=3)
        r1 = await make(plain, auto_batch=False).send(m1)
        r2 = await make(auto).send(m2)
        assert plain.codes() == auto.codes() == [RequestCode.SEND_MESSAGE_V2]
        (_, c1), (_, c2) = plain.requests[0], auto.requests[0]
        h1, h2 = dict(c1.ext_fields), dict(c2.ext_fields)
        assert h1.pop("g") and h2.pop("g")  # born timestamps
        p1, p2 = decode_properties(h1.pop("i")), decode_properties(h2.pop("i"))
        assert p1.pop(Prop.UNIQ_KEY) == r1.msg_id and p2.pop(Prop.UNIQ_KEY) == r2.msg_id  # time-based ids
        assert h1 == h2 and p1 == p2 and c1.body == c2.body
        r2.msg_id = r1.msg_id
        assert r1 == r2

    run(main())


def test_only_batchable_messages_are_accumulated() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b, compress_over_bytes=100)
        big = Message("T", b"z" * 101)
        delayed = Message("T", b"d")
        delayed.delay_level = 3
        timer = Message("T", b"t")
        timer.set_delay_sec(5)
        tran = Message("T", b"h", {Prop.TRAN_MSG: "true", Prop.PGROUP: "PG"})
        keyed = Message("T", b"k", {Prop.UNIQ_KEY: "ALREADY-SENT-ONCE"})
        retry = Message("%RETRY%G", b"r")
        explicit = Message("T", b"q")
        orderly = Message("T", b"o")
        batchable = msgs(3)
        alone = [big, delayed, timer, tran, keyed, retry]
        await asyncio.gather(*(p.send(m) for m in [*alone, *batchable]),
                             p.send(explicit, queue=MessageQueue("T", "broker-b", 1)),
                             p.send_orderly(orderly, "key"))
        assert sorted(b.batch_sizes()) == [1] * 8 + [3]
        batch = next(c for _, c in b.requests if c.code == RequestCode.SEND_BATCH_MESSAGE)
        assert [r[1] for r in decode_batch_body(batch.body)] == [m.body for m in batchable]
        assert all(c.code == RequestCode.SEND_MESSAGE_V2 for _, c in b.requests if c is not batch)
        # the big body went alone and compressed, exactly as without auto_batch
        big_req = next(c for _, c in b.requests if normalize_send_header(c.ext_fields)["sysFlag"] == "1")
        assert len(big_req.body) < 101

    run(main())


def test_accumulation_is_keyed_by_topic_and_wait() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b)
        groups = {"T1": msgs(2, "T1"), "T2": msgs(2, "T2"), "W": msgs(2, "T1", WAIT="false")}
        every = [m for g in groups.values() for m in g]
        await asyncio.gather(*(p.send(m) for m in every))
        assert b.batch_sizes() == [2, 2, 2]
        seen = []
        for _, c in b.requests:
            h = normalize_send_header(c.ext_fields)
            bodies = [r[1] for r in decode_batch_body(c.body)]
            seen.append((h["topic"], decode_properties(h.get("properties")).get(Prop.WAIT, ""), bodies))
        assert sorted(seen) == sorted([("T1", "", [b"body-0", b"body-1"]), ("T2", "", [b"body-0", b"body-1"]),
                                       ("T1", "false", [b"body-0", b"body-1"])])

    run(main())


def test_count_and_byte_limits() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b, auto_batch_max_messages=3)
        rs = await asyncio.gather(*(p.send(m) for m in msgs(7)))
        assert b.batch_sizes() == [3, 3, 1]
        assert b.codes()[-1] == RequestCode.SEND_MESSAGE_V2
        assert len({r.msg_id for r in rs}) == 7

        b = FakeBroker()
        one = msgs(1)[0]
        p = make(b)
        await p.send(one)
        record = 22 + len(one.body) + len(b.requests[0][1].ext_fields["i"].encode())  # as encoded in a batch
        p = make(b, auto_batch_max_bytes=2 * record + 1)
        b.requests.clear()
        await asyncio.gather(*(p.send(m) for m in msgs(5)))
        assert b.batch_sizes() == [2, 2, 1]
        assert all(len(c.body) <= 2 * record + 1 for _, c in b.requests)

        p = make(b, auto_batch_max_bytes=record - 1)  # no message fits: every one goes alone
        b.requests.clear()
        await asyncio.gather(*(p.send(m) for m in msgs(3)))
        assert b.batch_sizes() == [1, 1, 1]

    run(main())


def test_limits_are_validated() -> None:
    for kw in ({"auto_batch_max_messages": 0}, {"auto_batch_max_bytes": 0}, {"auto_batch_linger_ms": -1}):
        with pytest.raises(ValueError):
            Producer("PG", "127.0.0.1:1", auto_batch=True, **kw)
    assert Producer("PG", "x", auto_batch=True, auto_batch_max_bytes=1 << 30).auto_batch_max_bytes == 4 * 1024 * 1024


@pytest.mark.parametrize("dedup", [True, False])
def test_a_batch_whose_response_is_lost_is_retried_like_a_plain_send(dedup: bool) -> None:
    """dedup: same keys, same broker and queue (its de-duplication answers); dedup off: fresh keys, another broker."""
    async def main() -> None:
        b = FakeBroker()
        failures = [RemotingTimeoutError("lost (test)"), None]
        b.responder = lambda addr, cmd: failures.pop(0)
        p = make(b, dedup=dedup)
        ms = msgs(4)
        rs = await asyncio.gather(*(p.send(m) for m in ms))
        assert b.batch_sizes() == [4, 4]
        (a1, c1), (a2, c2) = b.requests
        assert (a1 == a2) is dedup  # dedup: the same broker, else another one
        if dedup:
            assert c1.ext_fields["e"] == c2.ext_fields["e"]  # and the same queue
        keys1 = [decode_properties(r[2])[Prop.UNIQ_KEY] for r in decode_batch_body(c1.body)]
        keys2 = [decode_properties(r[2])[Prop.UNIQ_KEY] for r in decode_batch_body(c2.body)]
        assert (keys1 == keys2) is dedup and len(set(keys2)) == 4
        assert [r.msg_id for r in rs] == keys2 == [m.properties[Prop.UNIQ_KEY] for m in ms]
        assert [r.queue_offset for r in rs] == [0, 1, 2, 3]

    run(main())


def _refuse(code: int) -> Responder:
    def responder(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(code, "refused (test)")
    return responder


@pytest.mark.parametrize("code", [ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION])
def test_a_refused_batch_fails_every_waiter_like_a_plain_send(code: int) -> None:
    async def main() -> None:
        plain, auto = FakeBroker(), FakeBroker()
        plain.responder = auto.responder = _refuse(code)
        with pytest.raises(errors.ResponseError) as single:
            await make(plain, auto_batch=False).send(msgs(1)[0])
        p = make(auto)
        out = await asyncio.gather(*(p.send(m) for m in msgs(5)), return_exceptions=True)
        assert all(type(e) is type(single.value) for e in out), out
        assert auto.batch_sizes() == [5] * len(plain.requests)  # same number of attempts as the plain send

    run(main())


def test_every_attempt_failing_raises_the_plain_send_error_to_every_waiter() -> None:
    async def main() -> None:
        b = FakeBroker()
        b.responder = lambda addr, cmd: RemotingError("connection refused (test)")
        p = make(b, retry_times=2)
        out = await asyncio.gather(*(p.send(m) for m in msgs(3)), return_exceptions=True)
        assert b.batch_sizes() == [3, 3, 3]
        assert all(type(e) is RemotingError for e in out)

    run(main())


def test_cancelling_one_waiter_does_not_break_the_others() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b)
        ms = msgs(4)
        tasks = [asyncio.create_task(p.send(m)) for m in ms]
        await asyncio.sleep(0)  # every send accumulated, the batch not yet closed
        tasks[1].cancel()
        rs = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(rs[1], asyncio.CancelledError)
        assert b.batch_sizes() == [3]  # cancelled before its batch closed: not sent
        assert [r.msg_id for r in rs if isinstance(r, SendResult)] == [ms[i].properties[Prop.UNIQ_KEY]
                                                                       for i in (0, 2, 3)]
        # cancelled while its batch is in flight: the others still get their results
        tasks = [asyncio.create_task(p.send(m)) for m in msgs(4)]
        while len(b.requests) < 2:
            await asyncio.sleep(0)
        tasks[0].cancel()
        rs = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(rs[0], asyncio.CancelledError)
        assert b.batch_sizes() == [3, 4]
        assert [r.queue_offset for r in rs[1:]] == [1, 2, 3]

    run(main())


def test_linger_coalesces_sends_of_different_iterations() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b, auto_batch_linger_ms=200)
        tasks = []
        for m in msgs(3):
            tasks.append(asyncio.create_task(p.send(m)))
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        assert b.batch_sizes() == [3]
        # without linger, sends of different iterations each go alone
        b2 = FakeBroker()
        p2 = make(b2)
        for m in msgs(2):
            await p2.send(m)
        assert b2.codes() == [RequestCode.SEND_MESSAGE_V2] * 2

    run(main())


def test_send_async_goes_through_the_accumulator() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b)
        seen: list[Any] = []
        futs = [p.send_async(m, lambda r, e: seen.append((r, e))) for m in msgs(5)]
        rs = await asyncio.gather(*futs)
        assert b.batch_sizes() == [5] and len(seen) == 5 and all(e is None for _, e in seen)
        assert [r.queue_offset for r in rs] == [0, 1, 2, 3, 4]

    run(main())


def test_shutdown_flushes_accumulated_sends() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b, auto_batch_linger_ms=60_000)
        tasks = [asyncio.create_task(p.send(m)) for m in msgs(3)]
        await asyncio.sleep(0.01)
        assert b.requests == []
        await p.shutdown()
        rs = await asyncio.gather(*tasks)
        assert b.batch_sizes() == [3] and all(r.status is SendStatus.SEND_OK for r in rs)
        with pytest.raises(ClientStateError):
            await p.send(msgs(1)[0])

    run(main())


def test_shutdown_fails_a_batch_stuck_in_flight() -> None:
    async def main() -> None:
        b = FakeBroker()
        b.hang = True
        p = make(b, send_timeout_ms=50)
        tasks = [asyncio.create_task(p.send(m)) for m in msgs(3)]
        while not b.requests:
            await asyncio.sleep(0)
        await p.shutdown()
        out = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(e, ClientStateError) for e in out), out

    run(main())


def test_accumulator_hands_a_lone_send_back_and_dispatches_groups() -> None:
    async def main() -> None:
        calls: list[tuple[Any, list[bytes]]] = []

        async def dispatch(key: Any, items: list[Any]) -> list[str]:
            calls.append((key, [p.msg.body for p in items]))
            return [f"r-{p.msg.body.decode()}" for p in items]

        acc: SendAccumulator[str] = SendAccumulator(dispatch, max_messages=10, max_bytes=100)
        assert await acc.submit("k", Message("T", b"a"), "", 10) is ALONE and calls == []
        tasks = [asyncio.create_task(acc.submit("k", Message("T", b), "", 40)) for b in (b"1", b"2", b"3")]
        await asyncio.sleep(0)
        assert len(acc) == 1  # 3 x 40 > 100 bytes: the first two were closed when the third did not fit
        assert await asyncio.gather(*tasks) == ["r-1", "r-2", ALONE]
        assert calls == [("k", [b"1", b"2"])]
        # the batch's first send (which closes it) cancelled: the others are still dispatched
        tasks = [asyncio.create_task(acc.submit("k", Message("T", b), "", 1)) for b in (b"4", b"5", b"6")]
        await asyncio.sleep(0)
        tasks[0].cancel()
        out = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(out[0], asyncio.CancelledError) and out[1:] == ["r-5", "r-6"]
        assert calls[-1] == ("k", [b"5", b"6"])
        await acc.close(1)
        with pytest.raises(ClientStateError):
            await acc.submit("k", Message("T", b"x"), "", 1)

    run(main())


def test_a_full_batch_does_not_wait_for_the_linger() -> None:
    async def main() -> None:
        b = FakeBroker()
        p = make(b, auto_batch_linger_ms=600_000, auto_batch_max_messages=3)
        rs = await asyncio.gather(*(p.send(m) for m in msgs(3)))  # would hang for the linger if it waited
        assert b.batch_sizes() == [3] and [r.queue_offset for r in rs] == [0, 1, 2]

    run(main())


def test_send_batch_keeps_its_retry_policy_on_the_shared_loop() -> None:
    async def main() -> None:
        b = FakeBroker()
        failures: list[Any] = [RemotingTimeoutError("lost (test)"), None]
        b.responder = lambda addr, cmd: failures.pop(0) if failures else None
        p = make(b, auto_batch=False, dedup=False)
        ms = msgs(3)
        r = await p.send_batch(ms)
        (a1, c1), (a2, c2) = b.requests
        assert a1 != a2 and c1.body == c2.body  # another broker, same keys (send_batch never re-keys)
        assert r.msg_id == ",".join(m.properties[Prop.UNIQ_KEY] for m in ms) and r.queue_offset == 0
        b.requests.clear()
        failures[:] = [RemotingTimeoutError("lost (test)")]
        with pytest.raises(RemotingTimeoutError):  # an explicit queue is tried once
            await p.send_batch(msgs(2), queue=MessageQueue("T", "broker-b", 3))
        assert [(a, normalize_send_header(c.ext_fields)["queueId"]) for a, c in b.requests] == [("10.0.0.2:10911", "3")]

    run(main())
