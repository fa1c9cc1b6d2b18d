"""Issue 12.2: a new SQL92 expression is compiled off the event loop. While its compile is pending (held here by a
gate, so nothing depends on timing), other connections' sends and pulls are answered; the waiting pulls are
answered once it is done; a cached expression is answered inline; a refusal found by the off-loop compile is
answered SUBSCRIPTION_PARSE_FAILED; too many distinct expressions waiting -> SYSTEM_BUSY."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import orjson

from orbitmq.broker.filter import FilterCache, SqlLimits, sql_limits
from orbitmq.broker.filter.sql92 import compile_sql92
from orbitmq.broker.handlers import heartbeat as heartbeat_mod
from orbitmq.broker.handlers import pull as pull_mod
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from tests.unit.broker.test_send_pull import FakeConn, bodies, ctx, pull_req, send_req  # noqa: F401 - ctx: fixture

WAIT_S = 30.0  # generous: only a bound on a condition wait, never a timing assertion


class ReplyConn(FakeConn):
    """FakeConn plus the deferred-answer API of remoting's Connection."""

    def reply(self, cmd: RemotingCommand, result: RemotingCommand | None) -> None:
        if result is not None:
            self.sent.append(result)

    def reply_error(self, cmd: RemotingCommand, exc: BaseException) -> None:
        self.sent.append(cmd.response(ResponseCode.SYSTEM_ERROR, repr(exc)))


class GatedCompile:
    """compile_sql92 that blocks on the compile thread until opened (a pathological-but-allowed expression)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.calls: list[str] = []
        self.threads: set[int] = set()

    def __call__(self, expression: str, limits: SqlLimits) -> Any:
        self.calls.append(expression)
        self.threads.add(threading.get_ident())
        self.started.set()
        if not self.gate.wait(WAIT_S):
            raise RuntimeError("gate never opened")
        return compile_sql92(expression, limits)


async def _until(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not cond():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _proc(bctx, gated: GatedCompile, max_pending: int = 64) -> pull_mod.PullProcessor:  # type: ignore[no-untyped-def]
    proc = pull_mod.build(bctx)
    proc.filters = FilterCache(lambda: bctx.config.filter_sql_cache_bytes, lambda: sql_limits(bctx.config),
                               compile_fn=gated, max_pending=max_pending)
    return proc


def test_pending_compile_blocks_no_other_client_and_its_pulls_are_answered_after(ctx) -> None:  # noqa: F811
    ctx.config = dataclasses.replace(ctx.config, enable_property_filter=True)
    gated = GatedCompile()

    async def main() -> None:
        loop_thread = threading.get_ident()
        sender = SendProcessor(ctx)
        for i in range(4):
            r = await sender.handle(FakeConn(), send_req("TS", b"m%d" % i, props={"a": str(i % 2), "TAGS": "X"}))
            assert r.code == ResponseCode.SUCCESS
        proc = _proc(ctx, gated)
        sql = dict(expression_type="SQL92", expression="a = 1")
        c1, c2, c3 = ReplyConn("127.0.0.1:1"), ReplyConn("127.0.0.1:2"), ReplyConn("127.0.0.1:3")
        assert proc.handle(c1, pull_req("TS", 0, **sql)) is None  # waits for the compile
        await _until(gated.started.is_set, "the compile to start")
        assert proc.handle(c3, pull_req("TS", 0, group="G3", **sql)) is None  # another group: its own compile
        assert proc.handle(c1, pull_req("TS", 1, **sql)) is None  # same expression: joins the same compile
        # the compile is stuck on its thread; the loop serves other clients meanwhile
        r = await sender.handle(FakeConn(), send_req("TS", b"m4", props={"a": "1", "TAGS": "X"}))
        assert r.code == ResponseCode.SUCCESS
        tag_pull = proc.handle(c2, pull_req("TS", 0, expression="X"))
        assert tag_pull is not None and tag_pull.code == ResponseCode.SUCCESS and len(bodies(tag_pull)) == 5
        assert c1.sent == [] and c3.sent == [] and proc.filters.pending == 2
        gated.gate.set()
        await _until(lambda: len(c1.sent) == 2 and len(c3.sent) == 1, "the waiting pulls to be answered")
        assert all(x.code == ResponseCode.SUCCESS for x in [*c1.sent, *c3.sent])
        assert sorted(bodies(c1.sent[0]) + bodies(c1.sent[1])) == [b"m1", b"m1", b"m3", b"m3", b"m4", b"m4"]
        assert bodies(c3.sent[0]) == [b"m1", b"m3", b"m4"]
        assert gated.calls == ["a = 1", "a = 1"] and loop_thread not in gated.threads
        # cached now: answered inline, no new compile
        inline = proc.handle(c2, pull_req("TS", 0, **sql))
        assert inline is not None and bodies(inline) == [b"m1", b"m3", b"m4"] and len(gated.calls) == 2

    asyncio.run(main())


def test_refusal_found_off_loop_and_busy_when_too_many_are_waiting(ctx) -> None:  # noqa: F811
    ctx.config = dataclasses.replace(ctx.config, enable_property_filter=True, filter_sql_max_in_list=2)
    gated = GatedCompile()

    async def main() -> None:
        r = await SendProcessor(ctx).handle(FakeConn(), send_req("TR", b"m", props={"a": "1"}))
        assert r.code == ResponseCode.SUCCESS
        proc = _proc(ctx, gated, max_pending=1)
        c1, c2 = ReplyConn(), ReplyConn()
        bad = dict(expression_type="SQL92", expression="a IN (1, 2, 3)")  # over the IN-list limit
        assert proc.handle(c1, pull_req("TR", 0, **bad)) is None
        busy = proc.handle(c2, pull_req("TR", 0, expression_type="SQL92", expression="a = 2"))
        assert busy is not None and busy.code == ResponseCode.SYSTEM_BUSY and "compiled" in (busy.remark or "")
        gated.gate.set()
        await _until(lambda: len(c1.sent) == 1, "the refusal")
        assert c1.sent[0].code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "IN" in (c1.sent[0].remark or "")
        again = proc.handle(c2, pull_req("TR", 0, **bad))  # the refusal is cached: answered inline
        assert again is not None and again.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        ok = proc.handle(c2, pull_req("TR", 0, expression_type="SQL92", expression="a = 1"))
        assert ok is None  # room again: compiled off the loop
        await _until(lambda: len(c2.sent) == 1, "the second expression")
        assert bodies(c2.sent[0]) == [b"m"]

    asyncio.run(main())


def test_uncacheable_expression_is_still_answered_after_its_compile(ctx) -> None:  # noqa: F811
    """A cache too small for the entry: the waiting pull gets the compile's result (no endless recompiles)."""
    ctx.config = dataclasses.replace(ctx.config, enable_property_filter=True, filter_sql_cache_bytes=1)
    gated = GatedCompile()
    gated.gate.set()

    async def main() -> None:
        r = await SendProcessor(ctx).handle(FakeConn(), send_req("TU", b"m", props={"a": "1"}))
        assert r.code == ResponseCode.SUCCESS
        proc = _proc(ctx, gated)
        c = ReplyConn()
        assert proc.handle(c, pull_req("TU", 0, expression_type="SQL92", expression="a = 1")) is None
        await _until(lambda: len(c.sent) == 1, "the answer")
        assert bodies(c.sent[0]) == [b"m"] and len(gated.calls) == 1 and len(proc.filters) == 0

    asyncio.run(main())


def _check_req(expression: str) -> RemotingCommand:
    body = orjson.dumps({"clientId": "c1", "group": "G", "subscriptionData": {
        "topic": "T", "subString": expression, "expressionType": "SQL92"}})
    return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body)


def test_check_client_config_compiles_off_the_loop_bounded(ctx, monkeypatch) -> None:  # noqa: F811
    """CHECK_CLIENT_CONFIG: the compile runs on a worker thread while the loop serves a send; a check beyond the
    waiting bound is answered SYSTEM_BUSY at once; a refusal is SUBSCRIPTION_PARSE_FAILED."""
    gated = GatedCompile()
    monkeypatch.setattr(heartbeat_mod, "compile_sql92", gated)
    monkeypatch.setattr(heartbeat_mod, "MAX_CHECKS_WAITING", 1)
    ctx.config = dataclasses.replace(ctx.config, enable_property_filter=True)
    proc = heartbeat_mod.ClientManageProcessor(ctx, heartbeat_mod.ConsumerIdsNotifier(ctx))
    sender = SendProcessor(ctx)

    async def scenario() -> None:
        conn = FakeConn()
        first = asyncio.ensure_future(proc.check_client_config(conn, _check_req("a > 1")))
        await _until(gated.started.is_set, "the compile to start")
        # the loop is free: a send is answered while the compile is held
        assert (await sender.handle(FakeConn(), send_req("T_check"))).code == ResponseCode.SUCCESS
        busy = await proc.check_client_config(conn, _check_req("b > 1"))
        assert busy.code == ResponseCode.SYSTEM_BUSY and "waiting" in (busy.remark or "")
        assert not first.done()
        gated.gate.set()
        assert (await first).code == ResponseCode.SUCCESS
        bad = await proc.check_client_config(conn, _check_req("a > > 1"))
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

    asyncio.run(scenario())
    assert gated.calls == ["a > 1", "a > > 1"] and threading.main_thread().ident not in gated.threads
