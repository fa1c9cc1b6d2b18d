"""SQL92 property filtering against a real broker process: push and pull consumers get exactly the matching
messages; a parse error answers SUBSCRIPTION_PARSE_FAILED; a broker with enablePropertyFilter=false answers the
clear error (also for CHECK_CLIENT_CONFIG)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orbitmq.client import ConsumeResult, Producer, PullConsumer, PushConsumer, SendStatus
from orbitmq.client.broker_api import PullStatus
from orbitmq.client.errors import NoRouteError
from orbitmq.model import Message, MessageExt, MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.protocol.bodies import SubscriptionData
from orbitmq.testing.procs import Standalone, blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EXPR = "(a BETWEEN 10 AND 29 OR color IN ('red')) AND b IS NOT NULL AND NOT (a = 15)"


def _expected(i: int) -> bool:
    a, color, has_b = i, ("red", "blue", "green")[i % 3], i % 4 != 0
    return ((10 <= a <= 29) or color == "red") and has_b and a != 15


async def _send_all(sa: Standalone, topic: str, n: int) -> None:
    async with Producer("PG_sql", namesrv=sa.namesrv_addr) as p:
        for i in range(n):
            props = {"a": str(i), "color": ("red", "blue", "green")[i % 3]}
            if i % 4 != 0:
                props["b"] = "x"
            m = Message(topic, f"m{i}".encode(), props)
            r = await p.send(m)
            assert r.status == SendStatus.SEND_OK


def test_sql92_push_and_pull_get_exactly_the_matching_messages(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa", enablePropertyFilter="true").start()
    topic, n = "SqlT", 60
    want = sorted(i for i in range(n) if _expected(i))
    try:
        async def run() -> None:
            await _send_all(sa, topic, n)
            got: list[int] = []

            def listener(msgs: list[MessageExt]) -> ConsumeResult:
                got.extend(int(m.properties["a"]) for m in msgs)
                return ConsumeResult.SUCCESS

            c = PushConsumer("CG_sql_push", namesrv=sa.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            c.subscribe(topic, EXPR, listener, expression_type="SQL92")
            await c.start()
            try:
                for _ in range(200):
                    if len(got) >= len(want):
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)  # nothing else may arrive
            finally:
                await c.shutdown()
            assert sorted(got) == want

            async with PullConsumer("CG_sql_pull", namesrv=sa.namesrv_addr) as pc:
                pulled: list[int] = []
                for mq in await _queues(pc, topic):
                    offset = 0
                    for _ in range(100):
                        r = await pc.pull(mq, offset, 32, "a > 40 AND color <> 'blue'", expression_type="SQL92")
                        pulled.extend(int(m.properties["a"]) for m in r.msgs)
                        if r.next_begin_offset == offset or r.status is PullStatus.NO_NEW_MSG:
                            break
                        offset = r.next_begin_offset
                assert sorted(pulled) == [i for i in range(41, n) if i % 3 != 1]
                mq0 = (await _queues(pc, topic))[0]
                with pytest.raises(Exception, match="parse the consumer's subscription"):
                    await pc.pull(mq0, 0, 32, "a > AND", expression_type="SQL92")

        asyncio.run(run())
        # raw PULL with the subscription flag: parse error -> 23 with a clear remark
        req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "CG_raw", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "a >",
            "subVersion": "0", "expressionType": "SQL92"})
        resp = blocking_request(sa.broker_addr, req)
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "a >" in (resp.remark or "") and "expected" in (resp.remark or "")
        assert _check_client_config(sa.broker_addr, topic, "a > 1") == (0, None)
        code, remark = _check_client_config(sa.broker_addr, topic, "a > > 1")
        assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and remark
    finally:
        sa.close()


async def _queues(pc: PullConsumer, topic: str) -> list[MessageQueue]:
    for _ in range(100):  # until the broker's re-registration carries the auto-created topic
        try:
            return await pc.fetch_queues(topic)
        except NoRouteError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"no route for {topic}")


def _check_client_config(addr: str, topic: str, expr: str) -> tuple[int, str | None]:
    sd = SubscriptionData.of_expression(topic, expr, 0, "SQL92")
    body = fastjson.dumps({"clientId": "c1", "group": "CG", "subscriptionData": sd.to_json_obj()})
    resp = blocking_request(addr, RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body=body))
    return resp.code, resp.remark


def test_sql92_on_a_broker_with_the_filter_disabled_is_a_clear_error(tmp_path: Path) -> None:
    sa = Standalone(tmp_path / "sa").start()
    try:
        async def run() -> None:
            await _send_all(sa, "SqlOff", 4)
            async with PullConsumer("CG_sql_off", namesrv=sa.namesrv_addr) as pc:
                mq: MessageQueue = (await _queues(pc, "SqlOff"))[0]
                with pytest.raises(Exception, match="does not support consumer to filter message by SQL92"):
                    await pc.pull(mq, 0, 32, "a > 1", expression_type="SQL92")

        asyncio.run(run())
        code, remark = _check_client_config(sa.broker_addr, "SqlOff", "a > 1")
        assert code == ResponseCode.SYSTEM_ERROR
        assert remark == "The broker does not support consumer to filter message by SQL92"
    finally:
        sa.close()
