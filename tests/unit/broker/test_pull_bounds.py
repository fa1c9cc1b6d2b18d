"""Issue 12.2: a pull's batch is capped (maxPullMsgNums), a filtered pull scans a bounded number of entries, SQL92
limits refuse a subscription with SUBSCRIPTION_PARSE_FAILED, and negative header values do no harm."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from orbitmq.broker.handlers import pull as pull_mod
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.protocol import HeaderError, ResponseCode
from tests.unit.broker.test_send_pull import FakeConn, bodies, ctx, pull_req, send_req  # noqa: F401 - ctx: fixture


@pytest.fixture
def bctx(ctx):  # noqa: F811 - the broker context of test_send_pull (a real store in tmp_path)
    return ctx


def _send_many(bctx, topic: str, props_list: list[dict[str, str]]) -> None:
    async def go() -> None:
        proc = SendProcessor(bctx)
        for i, props in enumerate(props_list):
            r = await proc.handle(FakeConn(), send_req(topic, str(i).encode(), props=props))
            assert r.code == ResponseCode.SUCCESS, r.remark
    asyncio.run(go())


def _with(bctx, **changes) -> None:
    bctx.config = dataclasses.replace(bctx.config, **changes)


def test_max_msg_nums_is_capped_and_at_least_one(bctx):
    _send_many(bctx, "TB", [{}] * 40)
    proc = pull_mod.build(bctx)
    req = pull_req("TB", 0)
    req.ext_fields["maxMsgNums"] = "100000"
    assert len(bodies(proc.handle(FakeConn(), req))) == 32
    _with(bctx, max_pull_msg_nums=4)
    assert len(bodies(proc.handle(FakeConn(), req))) == 4
    for n in ("0", "-7"):
        req.ext_fields["maxMsgNums"] = n
        r = proc.handle(FakeConn(), req)
        assert r.code == ResponseCode.SUCCESS and len(bodies(r)) == 1 and r.ext_fields["nextBeginOffset"] == "1"


def test_filtered_pull_scans_a_bounded_number_of_entries(bctx):
    _with(bctx, enable_property_filter=True)
    _send_many(bctx, "TF", [{"a": "0"}] * 1200 + [{"a": "1"}])
    proc = pull_mod.build(bctx)
    evaluated = 0
    real_get = proc.filters.lookup  # no running loop: compiled inline, never pending

    def counting_get(group: str, topic: str, expression: str):
        f = real_get(group, topic, expression)

        def keep(record) -> bool:
            nonlocal evaluated
            evaluated += 1
            return f(record)
        return keep

    proc.filters.lookup = counting_get  # type: ignore[method-assign,assignment]
    r = proc.handle(FakeConn(), pull_req("TF", 0, expression_type="SQL92", expression="a = 1"))
    # RocketMQ's bound: maxFilterMessageCount 16000 bytes of ConsumeQueue = 800 entries per pull
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "800"
    assert evaluated == 800
    offset, found = 800, []
    for _ in range(5):  # pulls go on from nextBeginOffset (a ConsumeQueue file's end also ends a scan)
        before = evaluated
        r = proc.handle(FakeConn(), pull_req("TF", offset, expression_type="SQL92", expression="a = 1"))
        assert evaluated - before <= 800
        offset = int(r.ext_fields["nextBeginOffset"])
        if r.code == ResponseCode.SUCCESS:
            found = bodies(r)
            break
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert found == [b"1200"] and offset == 1201 and evaluated == 1201


def test_sql92_limits_refuse_the_subscription_on_pull(bctx):
    _with(bctx, enable_property_filter=True)
    _send_many(bctx, "TS", [{"a": "1"}])
    proc = pull_mod.build(bctx)
    too_long = "a = '" + "x" * 5000 + "'"
    r = proc.handle(FakeConn(), pull_req("TS", 0, expression_type="SQL92", expression=too_long))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "over the limit of 4096" in r.remark
    nested = "(" * 40 + "a = 1" + ")" * 40
    r = proc.handle(FakeConn(), pull_req("TS", 0, expression_type="SQL92", expression=nested))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "deeper than 32" in r.remark
    in3 = "a IN ('1', '2', '3')"
    assert proc.handle(FakeConn(), pull_req("TS", 0, expression_type="SQL92", expression=in3)).code == \
        ResponseCode.SUCCESS
    _with(bctx, filter_sql_max_in_list=2)  # hot: applies to expressions compiled from now on
    r = proc.handle(FakeConn(), pull_req("TS", 0, group="G2", expression_type="SQL92", expression=in3))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "IN list longer than 2" in r.remark


def test_negative_commit_offset_is_not_stored_and_negative_offset_is_corrected(bctx):
    _send_many(bctx, "TN", [{}] * 3)
    proc = pull_mod.build(bctx)
    bctx.offsets.commit("G", "TN", 0, 2)
    r = proc.handle(FakeConn(), pull_req("TN", 0, sys_flag=0x4 | 0x1, commit=-5))
    assert r.code == ResponseCode.SUCCESS and bctx.offsets.query("G", "TN", 0) == 2
    r = proc.handle(FakeConn(), pull_req("TN", -9))
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "0"


def test_pull_header_is_typed_and_range_checked(bctx):
    """PULL_MESSAGE reads its typed header (protocol/headers.py PullMessageRequestHeader): an offset beyond int64
    or a queue id beyond int32 is a HeaderError naming the field (SYSTEM_ERROR on the wire), nothing is committed."""
    _send_many(bctx, "TH", [{}] * 2)
    proc = pull_mod.build(bctx)
    req = pull_req("TH", 0, sys_flag=0x4 | 0x1, commit=1)
    req.ext_fields["queueOffset"] = str(2**63)
    with pytest.raises(HeaderError, match="<queueOffset> is out of range"):
        proc.handle(FakeConn(), req)
    req = pull_req("TH", 0, sys_flag=0x4 | 0x1, commit=1)
    req.ext_fields["queueId"] = str(2**31)
    with pytest.raises(HeaderError, match="<queueId> is out of range"):
        proc.handle(FakeConn(), req)
    assert bctx.offsets.query("G", "TH", 0) < 0
    r = proc.handle(FakeConn(), pull_req("TH", 0, sys_flag=0x4 | 0x1, commit=1))  # the same pull, in range
    assert r.code == ResponseCode.SUCCESS and len(bodies(r)) == 2 and bctx.offsets.query("G", "TH", 0) == 1
