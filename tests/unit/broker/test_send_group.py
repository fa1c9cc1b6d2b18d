"""The send requests of one read stored together (Router.many → SendProcessor.dispatch_group →
MessageStore.put_singles_nowait): every request gets the answer dispatch() gives it one by one, the messages land at
the same queue offsets with the same bodies, and a retry inside the same read is still answered as a duplicate."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.broker.router import Router
from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services.dedup import DedupService
from orbitmq.client.producer import encode_batch_body
from orbitmq.model.message import Message
from orbitmq.model.properties import encode_properties
from orbitmq.model.record import decode_record
from orbitmq.protocol import (
    CURRENT_VERSION,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
    to_send_v2,
)
from orbitmq.protocol.frame import EncodedResponse
from orbitmq.remoting.connection import DEFERRED
from orbitmq.store import GetStatus

from .test_send_fast_path import FakeConn, answer_of, make_ctx, send_req


class _Clock:
    def now_ms(self) -> int:
        return 1_700_000_000_000


def _with_dedup(ctx: Any, tmp_path: Any) -> DedupService:
    env = SimpleNamespace(clock=_Clock(), config_dir=str(tmp_path), store_config=None, writes=BackgroundWrites())
    ctx.role_listeners = []
    svc = DedupService(ctx, env)  # type: ignore[arg-type]
    ctx.send_hooks.append(svc)
    return svc


def _single(topic: str, queue_id: int, uniq: str, body: bytes) -> RemotingCommand:
    req = send_req(topic, {"UNIQ_KEY": uniq, "TAGS": "A", "WAIT": "true"})
    req.ext_fields["e"] = str(queue_id)  # SEND_MESSAGE_V2's short name of queueId
    req.body = body
    return req


def _batch(topic: str, queue_id: int, uniqs: list[str]) -> RemotingCommand:
    msgs = [Message(topic, u.encode(), {"UNIQ_KEY": u}) for u in uniqs]
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
           "properties": "", "batch": "true"}
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, to_send_v2(ext),
                                   encode_batch_body(msgs, [encode_properties(m.properties) for m in msgs]))


def _read() -> list[RemotingCommand]:
    """One read's worth of requests: singles on several queues and topics, a retry of the first inside the read,
    a refused send, a batch between singles, and a oneway send."""
    oneway = _single("TopicA", 1, "U-ONEWAY", b"oneway")
    oneway.flag |= 2
    return [
        _single("TopicA", 0, "U1", b"one"),
        _single("TopicB", 1, "U2", b"two"),
        _single("TopicA", 0, "U1", b"one"),  # the producer's retry of U1, in the same read
        _single("SCHEDULE_TOPIC_XXXX", 0, "U3", b"refused"),  # a system topic: refused
        _single("TopicA", 2, "U4", b"four"),
        _batch("TopicA", 3, ["B1", "B2"]),
        _single("TopicA", 0, "U5", b"five"),
        oneway,
        _single("TopicB", 1, "U6", b"six"),
    ]


def _answer(r: Any) -> tuple[Any, ...]:
    if isinstance(r, EncodedResponse):  # a PUT_OK from the template: exactly the frame the encoder gives
        cmd = r.decode()
        assert r.frame == encode_frame(cmd)
        assert (cmd.flag, cmd.language, cmd.version, cmd.code) == (1, "JAVA", CURRENT_VERSION, r.code)
        r = cmd
    assert isinstance(r, RemotingCommand), r
    return r.code, r.remark, r.ext_fields


def _stored(ctx: Any) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    out = {}
    for topic in ("TopicA", "TopicB"):
        for q in range(4):
            got = ctx.store.get_message("G", topic, q, 0, 32)
            if got.status is GetStatus.FOUND:
                out[(topic, q)] = [(m.queue_offset, m.body) for m in map(decode_record, got.buffers)]
    return out


def _run(tmp_path: Any, name: str, grouped: bool) -> tuple[list[Any], Any, DedupService]:
    ctx = make_ctx(tmp_path / name, "ASYNC_FLUSH")
    svc = _with_dedup(ctx, tmp_path / name)
    proc = SendProcessor(ctx)
    conn = FakeConn()
    reqs = _read()
    results = proc.dispatch_group(conn, reqs) if grouped else [proc.dispatch(conn, r) for r in reqs]
    return results, ctx, svc


def test_a_read_of_sends_answers_and_stores_as_one_by_one(tmp_path: Any) -> None:
    grouped, g_ctx, g_svc = _run(tmp_path, "grouped", True)
    single, s_ctx, _ = _run(tmp_path, "single", False)
    assert [_answer(r) for r in grouped] == [_answer(r) for r in single]
    # every stored single's PUT_OK is encoded (grouped or, for the first run, which meets a new host, one by one);
    # the de-dup answer, the refusal and the batch's answer are commands
    assert [isinstance(r, EncodedResponse) for r in grouped] == [True, True, False, False, True, False, True, True,
                                                                 True]
    codes = [r.code for r in grouped]
    assert codes.count(int(ResponseCode.SUCCESS)) == 8 and int(ResponseCode.SYSTEM_ERROR) in codes
    # the retry is the de-dup hook's answer: the original's msgId and queue offset, and one hit
    assert grouped[2].ext_fields["msgId"] == answer_of(grouped[0]).ext_fields["msgId"]
    g_stats, s_stats = g_ctx.stats, s_ctx.stats
    assert (g_stats.put_msgs_total, g_stats.put_bytes_total, g_stats.topic_in) == \
        (s_stats.put_msgs_total, s_stats.put_bytes_total, s_stats.topic_in)
    assert g_ctx.stats.counters["dedupHits"] == 1
    assert _stored(g_ctx) == _stored(s_ctx)
    assert _stored(g_ctx)[("TopicA", 0)] == [(0, b"one"), (1, b"five")]  # U1 stored once
    assert g_ctx.store.commitlog.max_offset == s_ctx.store.commitlog.max_offset


def test_the_singles_of_a_read_go_to_the_store_in_one_put(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = make_ctx(tmp_path, "ASYNC_FLUSH")
    proc = SendProcessor(ctx)
    runs: list[int] = []
    real = ctx.store.put_singles_nowait

    def spy(msgs: list[Any]) -> Any:
        runs.append(len(msgs))
        return real(msgs)

    monkeypatch.setattr(ctx.store, "put_singles_nowait", spy)
    reqs = _read()
    proc.dispatch_group(FakeConn(), reqs)
    # no de-dup hook here: the retry of U1 is a new message, but it waits until U1 is stored (its key is pending):
    # [U1 U2] | [U1' U4] (the refused one between) | batch | [U5 oneway U6]
    assert runs == [2, 2, 3]


def test_a_store_that_waits_for_the_flush_takes_them_one_by_one(tmp_path: Any) -> None:
    ctx = make_ctx(tmp_path, "SYNC_FLUSH")
    assert not ctx.store.puts_complete_at_once
    assert ctx.store.put_singles_nowait([]) is None

    async def main() -> list[Any]:
        await ctx.store.start()
        try:
            proc = SendProcessor(ctx)
            conn = FakeConn()
            out = proc.dispatch_group(conn, [_single("TopicA", 0, f"S{i}", b"x") for i in range(3)])
            for _ in range(200):
                if len(conn.replies) == 3:
                    break
                await asyncio.sleep(0.01)
            assert [r.code for _, r in conn.replies] == [0, 0, 0]
            return out
        finally:
            await ctx.store.shutdown()

    assert asyncio.run(main()) == [DEFERRED] * 3


class _Owner:
    """A handler object with dispatch and dispatch_group (what the router groups), recording its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def dispatch(self, conn: Any, req: RemotingCommand) -> Any:
        self.calls.append(("one", [req.opaque]))
        return req.response(0, f"one {req.opaque}")

    def dispatch_group(self, conn: Any, reqs: list[RemotingCommand]) -> list[Any]:
        self.calls.append(("group", [r.opaque for r in reqs]))
        return [ValueError("boom") if r.opaque == 5 else r.response(0, f"group {r.opaque}") for r in reqs]


def test_router_many_groups_runs_of_one_handler_and_keeps_the_rest_in_order() -> None:
    owner = _Owner()
    seen: list[int] = []

    def other(conn: Any, req: RemotingCommand) -> Any:
        seen.append(req.opaque)
        if req.opaque == 8:
            raise RuntimeError("other failed")
        return req.response(0, f"other {req.opaque}")

    router = Router({RequestCode.SEND_MESSAGE_V2: owner.dispatch, RequestCode.SEND_MESSAGE: owner.dispatch,
                     RequestCode.HEART_BEAT: other})
    router.check = lambda conn, req: req.response(16, "denied") if req.opaque == 3 else None
    codes = [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
             RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE_V2, RequestCode.HEART_BEAT,
             RequestCode.SEND_MESSAGE_V2, RequestCode.HEART_BEAT]
    cmds = []
    for i, code in enumerate(codes, start=1):
        c = RemotingCommand.request(code, {})
        c.opaque = i
        cmds.append(c)
    out = Router.many(router, object(), cmds)
    assert [type(r).__name__ for r in out] == ["RemotingCommand"] * 4 + ["ValueError", "RemotingCommand",
                                                                        "RemotingCommand", "RuntimeError"]
    assert [r.remark for r in out if isinstance(r, RemotingCommand)] == [
        "group 1", "group 2", "denied", "group 4", "other 6", "one 7"]
    assert owner.calls == [("group", [1, 2, 4, 5]), ("one", [7])]  # 3 refused by the check, 7 alone
    assert seen == [6, 8]
    router.accepting = False  # starting: every request gets the refusal of __call__, nothing is grouped
    assert {r.code for r in Router.many(router, object(), cmds[:2])} == {int(ResponseCode.SERVICE_NOT_AVAILABLE)}
    assert owner.calls == [("group", [1, 2, 4, 5]), ("one", [7])]


class _Recorder:
    """A send hook that records the sends it was asked about (its before_put does nothing)."""

    def __init__(self, name: str, log: list[tuple[str, str]], acts_on: Any = None) -> None:
        self.name, self.log = name, log
        if acts_on is not None:
            self.before_put_acts_on = acts_on

    def before_put(self, conn: Any, req: Any, msgs: list[Any]) -> None:
        self.log.append((self.name, msgs[0].topic if len(msgs) == 1 else f"batch of {len(msgs)}"))

    def after_put(self, conn: Any, req: Any, msgs: list[Any], result: Any) -> None:
        return None


@pytest.mark.parametrize("grouped", [False, True])
def test_before_put_gates_skip_only_the_hooks_that_would_do_nothing(tmp_path: Any, grouped: bool) -> None:
    """A hook declaring before_put_acts_on = (topics, property names) is not asked about a single send to another
    topic without those properties (of any hook's gate); the others and every batch go to every hook; hooks without
    a gate are always asked, and the calls keep the hooks' order (one by one and in a read's group alike)."""
    ctx = make_ctx(tmp_path, "ASYNC_FLUSH")
    log: list[tuple[str, str]] = []
    ctx.send_hooks.extend([_Recorder("plain", log), _Recorder("gated", log, (frozenset({"TopicT"}), frozenset({"P"}))),
                           _Recorder("never", log, (frozenset(), frozenset()))])
    proc = SendProcessor(ctx)
    with_prop = send_req("TopicA", {"UNIQ_KEY": "U2", "P": "1"})
    reqs = [_single("TopicA", 0, "U1", b"one"), with_prop, _single("TopicT", 0, "U3", b"three"),
            _batch("TopicA", 1, ["B1", "B2"])]
    conn = FakeConn()
    if grouped:
        answers = proc.dispatch_group(conn, reqs)
    else:
        answers = [proc.dispatch(conn, r) for r in reqs]
    assert all(answer_of(a).code == ResponseCode.SUCCESS for a in answers), answers
    assert log == [("plain", "TopicA"),
                   ("plain", "TopicA"), ("gated", "TopicA"), ("never", "TopicA"),
                   ("plain", "TopicT"), ("gated", "TopicT"), ("never", "TopicT"),
                   ("plain", "batch of 2"), ("gated", "batch of 2"), ("never", "batch of 2")]


@pytest.mark.parametrize(("region", "trace_on", "encoded"), [("DefaultRegion", True, True), ("r-2", False, True),
                                                              ('quo"te', True, False), ("ünï", False, True)])
def test_the_put_ok_template_follows_the_config(tmp_path: Any, region: str, trace_on: bool, encoded: bool) -> None:
    """The grouped PUT_OK frame carries the config's region and trace flag as _response does; a region JSON would
    escape takes _response's command instead."""
    ctx = make_ctx(tmp_path, "ASYNC_FLUSH")
    ctx.config = dataclasses.replace(ctx.config, region_id=region, trace_on=trace_on)
    proc = SendProcessor(ctx)
    proc.dispatch(FakeConn(), _single("TopicA", 0, "U0", b"zero"))  # the store meets the host: later runs group
    answers = proc.dispatch_group(FakeConn(), [_single("TopicA", 0, "U1", b"one"), _single("TopicA", 1, "U2", b"2")])
    assert [isinstance(a, EncodedResponse) for a in answers] == [encoded, encoded]
    for a in answers:
        code, remark, ext = _answer(a)
        assert (code, remark) == (int(ResponseCode.SUCCESS), None)
        assert (ext["MSG_REGION"], ext["TRACE_ON"]) == (region, "true" if trace_on else "false")


def test_admission_is_checked_once_per_read_and_a_busy_store_refuses_each(tmp_path: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = make_ctx(tmp_path, "ASYNC_FLUSH")
    proc = SendProcessor(ctx)
    conn = FakeConn()
    calls: list[str | None] = []
    remark: list[str | None] = [None]

    def admission() -> str | None:
        calls.append(remark[0])
        return remark[0]

    monkeypatch.setattr(ctx.store, "admission_remark", admission)
    reqs = [_single("TopicA", q, f"A{q}", b"x") for q in range(3)]
    assert [r.code for r in proc.dispatch_group(conn, reqs)] == [int(ResponseCode.SUCCESS)] * 3
    assert len(calls) == 1  # one check for the read
    remark[0] = "[PCBUSY_CLEAN_QUEUE]broker busy"
    end = ctx.store.max_phys_offset
    busy = proc.dispatch_group(conn, [_single("TopicA", q, f"B{q}", b"y") for q in range(3)])
    assert [(r.code, r.remark) for r in busy] == [(int(ResponseCode.SYSTEM_BUSY), remark[0])] * 3
    assert ctx.store.max_phys_offset == end  # nothing stored
