"""Issue 12.2: topics and groups auto-created per client per minute are capped (autoCreatePerClientPerMinute)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json

import pytest

from orbitmq.broker.handlers import pull as pull_mod
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.broker.metadata.quota import REQUESTER, WINDOW_S, AutoCreateQuota, AutoCreateRefused, client_key
from orbitmq.broker.router import Router
from orbitmq.protocol import RequestCode, ResponseCode
from tests.unit.broker.test_send_pull import FakeConn, ctx, pull_req, send_req  # noqa: F401 - ctx: fixture


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_client_key_is_the_remote_ip() -> None:
    assert client_key(FakeConn("10.0.0.7:5555")) == "10.0.0.7"
    assert client_key(FakeConn("[::1]:80")) == "::1"
    assert client_key(None) is None


def test_quota_counts_per_client_per_window_and_ignores_internal_work() -> None:
    clock = Clock()
    hits: list[str] = []
    limit = [2]
    q = AutoCreateQuota(lambda: limit[0], hits.append, clock)
    for _ in range(3):  # no requester (the broker's own work, in a context no request set): never limited
        contextvars.Context().run(q.admit, "topic [x]")

    def as_client(addr: str, what: str) -> None:
        REQUESTER.set(FakeConn(addr))
        q.admit(what)

    def run(addr: str, what: str) -> None:
        contextvars.copy_context().run(as_client, addr, what)

    run("10.0.0.1:1", "a")
    run("10.0.0.1:2", "b")  # another connection from the same IP shares the budget
    with pytest.raises(AutoCreateRefused, match=r"topic \[c\] not created: client 10\.0\.0\.1 .*"
                                                r"autoCreatePerClientPerMinute=2"):
        run("10.0.0.1:3", "topic [c]")
    run("10.0.0.2:1", "d")  # other clients are not affected
    assert hits == ["autoCreatePerClientPerMinute"] and q.refused == 1
    clock.t += WINDOW_S  # a new minute
    run("10.0.0.1:1", "e")
    limit[0] = 0  # 0 = off (hot)
    for i in range(10):
        run("10.0.0.1:1", f"f{i}")


def _router(c) -> Router:
    proc = SendProcessor(c)
    pulls = pull_mod.build(c)
    return Router({int(RequestCode.SEND_MESSAGE): proc.handle, int(RequestCode.PULL_MESSAGE): pulls.handle})


def test_sends_and_pulls_over_the_cap_are_refused_through_the_router(ctx):  # noqa: F811
    c = ctx
    c.config = dataclasses.replace(c.config, auto_create_per_client_per_minute=3)
    c.topics.quota = c.groups.quota = AutoCreateQuota(lambda: c.config.auto_create_per_client_per_minute,
                                                      c.stats.limit_hit)
    router = _router(c)
    conn = FakeConn("192.0.2.9:4000")

    def call(req, who=conn):
        def go():
            r = router(who, req)
            return asyncio.run(r) if inspect.iscoroutine(r) else r  # a coroutine runs as a task: same context
        return contextvars.copy_context().run(go)  # a fresh context per request, as on a connection

    for i in range(3):
        assert call(send_req(f"Auto{i}")).code == ResponseCode.SUCCESS
    assert call(send_req("Auto0")).code == ResponseCode.SUCCESS  # existing topics cost nothing
    with pytest.raises(AutoCreateRefused, match=r"topic \[Auto3\] not created"):
        call(send_req("Auto3"))  # the connection answers SYSTEM_ERROR with this remark
    assert "Auto3" not in c.topics
    r = call(pull_req("Auto0", 0, group="NewGroup"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "subscription group [NewGroup] not created" in r.remark
    assert c.groups.get("NewGroup") is None
    assert c.stats.limits_hit["autoCreatePerClientPerMinute"] == 2
    # another client still can; direct calls by the broker itself are never limited
    other = FakeConn("192.0.2.10:4000")
    assert call(send_req("Auto3"), other).code == ResponseCode.SUCCESS
    assert contextvars.Context().run(c.groups.find_or_create, "Internal") is not None


def test_a_handler_task_inherits_the_requester(ctx):  # noqa: F811
    c = ctx
    c.config = dataclasses.replace(c.config, auto_create_per_client_per_minute=1)
    c.topics.quota = c.groups.quota = AutoCreateQuota(lambda: c.config.auto_create_per_client_per_minute)
    conn = FakeConn("192.0.2.11:1")

    async def handler(_conn, _req):
        await asyncio.sleep(0)
        c.groups.find_or_create("G1")
        c.groups.find_or_create("G2")

    async def main() -> None:
        router = Router({int(RequestCode.SEND_MESSAGE): handler})
        coro = router(conn, send_req("T"))
        task = asyncio.get_running_loop().create_task(coro)  # what the connection does with a coroutine
        with pytest.raises(AutoCreateRefused):
            await task

    asyncio.run(main())
    assert c.groups.get("G1") is not None and c.groups.get("G2") is None


def test_heartbeat_over_the_cap_is_refused_and_check_client_config_applies_sql_limits(ctx):  # noqa: F811
    from orbitmq.broker.handlers import heartbeat as hb
    from orbitmq.protocol import RemotingCommand
    from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData

    c = ctx
    c.config = dataclasses.replace(c.config, auto_create_per_client_per_minute=2, enable_property_filter=True)
    c.topics.quota = c.groups.quota = AutoCreateQuota(lambda: c.config.auto_create_per_client_per_minute)
    router = Router(hb.handlers(c))
    conn = FakeConn("192.0.2.12:1")

    def beat(groups: list[str]):
        data = HeartbeatData("cid", [], [ConsumerData(g, subscription_data_set=[
            SubscriptionData.of_expression("T", "*", 1)]) for g in groups])
        req = RemotingCommand.request(RequestCode.HEART_BEAT, body=data.to_json())
        return contextvars.copy_context().run(router, conn, req)

    assert beat(["H1", "H2"]).code == ResponseCode.SUCCESS
    assert beat(["H1", "H2"]).code == ResponseCode.SUCCESS  # known groups cost nothing
    r = beat(["H3"])
    assert r.code == ResponseCode.SYSTEM_ERROR and "subscription group [H3] not created" in r.remark
    assert c.groups.get("H3") is None and "%RETRY%H3" not in c.topics
    nested = "(" * 40 + "a > 1" + ")" * 40
    body = json.dumps({"clientId": "c", "group": "H1", "subscriptionData": {
        "topic": "T", "subString": nested, "expressionType": "SQL92"}}).encode()
    r = asyncio.run(contextvars.copy_context().run(router, conn, RemotingCommand.request(  # async: compiles off loop
        RequestCode.CHECK_CLIENT_CONFIG, body=body)))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "deeper than 32" in r.remark
