"""CLONE_GROUP_OFFSET and GET_BROKER_CONSUME_STATS (handlers/admin_groups.py)."""

from __future__ import annotations

from typing import Any

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.handlers import admin_groups
from orbitmq.model.topic import MessageQueue, TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.consume_stats_list import ConsumeStatsList
from tests.unit.broker.test_admin_handlers import Env, _make_env, env  # noqa: F401 - env is a fixture


def call(e: Env, code: int, ext: dict[str, str]) -> RemotingCommand:
    cmd = RemotingCommand.request(code, ext)
    resp = admin_groups.handlers(e.ctx)[code](None, cmd)
    assert resp is not None and resp.opaque == cmd.opaque
    return resp


def test_clone_group_offset_copies_the_topic_or_every_topic_of_the_source(env: Env) -> None:  # noqa: F811
    for t in ("S", "Other"):
        env.ctx.topics.create_or_update(TopicConfig(t, 2, 2, 6))
    env.ctx.offsets.commit("Src", "S", 0, 5)
    env.ctx.offsets.commit("Src", "S", 1, 7)
    env.ctx.offsets.commit("Src", "Other", 0, 3)
    resp = call(env, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "Src", "destGroup": "D1", "topic": "S",
                                                      "offline": "true"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert env.ctx.offsets.query_all("D1", "S") == {0: 5, 1: 7} and env.ctx.offsets.query_all("D1", "Other") == {}
    call(env, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "Src", "destGroup": "D2", "offline": "true"})
    assert env.ctx.offsets.query_all("D2", "Other") == {0: 3}
    # an online destination only gets the topics it subscribes to (unless offline=true)
    env.consumer("D3", "c1", ["Other"])
    call(env, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "Src", "destGroup": "D3", "offline": "false"})
    assert env.ctx.offsets.query_all("D3", "S") == {} and env.ctx.offsets.query_all("D3", "Other") == {0: 3}
    bad = call(env, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "", "destGroup": "D"})
    assert bad.code != ResponseCode.SUCCESS


def test_clone_group_offset_refused_on_a_slave(tmp_path: Any) -> None:
    for e in _make_env(tmp_path, BrokerConfig(broker_ip1="127.0.0.1", broker_role="SLAVE", broker_id=1)):
        e.ctx.offsets.commit("Src", "S", 0, 5)
        resp = call(e, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "Src", "destGroup": "D", "topic": "S"})
        assert resp.code == ResponseCode.SYSTEM_ERROR and "slave" in (resp.remark or "")
        assert e.ctx.offsets.query_all("D", "S") == {}


def test_broker_consume_stats_lists_every_group_with_offsets(env: Env) -> None:  # noqa: F811
    env.ctx.topics.create_or_update(TopicConfig("S", 1, 1, 6))
    env.put("S", 0)
    env.put("S", 0)
    env.ctx.offsets.commit("G1", "S", 0, 1)
    env.ctx.offsets.commit("G2", "S", 0, 2)
    resp = call(env, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false", "timeoutMillis": "3000"})
    body = ConsumeStatsList.from_json(resp.body)
    by_group = {g: lst[0] for entry in body.consume_stats_list for g, lst in entry.items()}
    assert set(by_group) == {"G1", "G2"}
    w = by_group["G1"].offset_table[MessageQueue("S", "bk", 0)]
    assert (w.broker_offset, w.consumer_offset) == (2, 1)
    assert body.total_diff == 1 and body.broker_addr == "127.0.0.1:10911"
    assert ConsumeStatsList.from_json(body.to_json()) == body
