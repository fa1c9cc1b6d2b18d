"""Offset handlers (14, 15, 29-32, 43) and query handlers (12, 33) against a small real MessageStore."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers import offsets as offset_handlers
from orbitmq.broker.handlers import query as query_handlers
from orbitmq.broker.metadata import ConsumerOffsetManager, SubscriptionGroupManager, TopicConfigManager
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.record import iter_records
from orbitmq.protocol import HeaderError, RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.store import MessageInner, MessageStore, StoreConfig


@dataclass
class Env:
    ctx: BrokerContext
    loop: asyncio.AbstractEventLoop
    handlers: dict[int, Any]

    def put(self, topic: str, queue_id: int, body: bytes, props: dict[str, str] | None = None) -> Any:
        msg = MessageInner(topic, queue_id, body, dict(props or {}), store_host=self.ctx.store_host,
                           born_timestamp=1)
        r = self.loop.run_until_complete(self.ctx.store.put_message(msg))
        assert r.ok, r
        return r

    def call(self, code: int, ext: dict[str, str] | None = None, *, oneway: bool = False) -> Any:
        return self.handlers[code](None, RemotingCommand.request(code, ext, oneway=oneway))


def make_env(tmp_path: Any, **store_kw: Any) -> Iterator[Env]:
    cfg = BrokerConfig(broker_ip1="127.0.0.1", listen_port=10911)
    store_cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=128 * 1024,
        mapped_file_size_consume_queue=20 * 64, max_message_size=8 * 1024, max_hash_slot_num=64,
        max_index_num=256, **store_kw,
    )
    loop = asyncio.new_event_loop()
    store = MessageStore(store_cfg)
    store.load()
    loop.run_until_complete(store.start())
    conf_dir = str(tmp_path / "store" / "config")
    ctx = BrokerContext(
        config=cfg, store=store, topics=TopicConfigManager(conf_dir, cfg),
        groups=SubscriptionGroupManager(conf_dir, cfg), offsets=ConsumerOffsetManager(conf_dir),
        clients=ClientRegistry(), stats=BrokerStats(), store_host="127.0.0.1:10911",
    )
    hs: dict[int, Any] = {}
    hs.update(offset_handlers.handlers(ctx))
    hs.update(query_handlers.handlers(ctx))
    try:
        yield Env(ctx, loop, hs)
    finally:
        loop.run_until_complete(store.shutdown())
        loop.close()


@pytest.fixture
def env(tmp_path: Any) -> Iterator[Env]:
    yield from make_env(tmp_path)


def _q(group: str, topic: str, qid: int) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(qid)}


# ---- consumer offsets ------------------------------------------------------------------------------------
def test_update_then_query_consumer_offset(env: Env) -> None:
    ext = {**_q("G", "T", 1), "commitOffset": "42"}
    assert env.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext, oneway=True) is None
    resp = env.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("G", "T", 1))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields == {"offset": "42"}
    resp = env.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": "43"})
    assert resp.code == ResponseCode.SUCCESS and resp.is_response
    assert env.ctx.offsets.query("G", "T", 1) == 43


def test_query_unknown_offset_on_empty_queue_is_zero(env: Env) -> None:
    resp = env.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("G", "T", 0))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "0"


def test_query_unknown_offset_first_message_in_memory_is_zero(env: Env) -> None:
    env.put("T", 0, b"a")
    env.put("T", 0, b"b")
    resp = env.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("G", "T", 0))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "0"
    # 5.x clients can turn the rule off
    resp = env.call(RequestCode.QUERY_CONSUMER_OFFSET, {**_q("G", "T", 0), "setZeroIfNotFound": "false"})
    assert resp.code == ResponseCode.QUERY_NOT_FOUND


def test_query_unknown_offset_first_message_on_disk_is_not_found(tmp_path: Any) -> None:
    # a 1-byte "physical memory" makes the in-memory window empty: message 0 counts as on disk
    for env in make_env(tmp_path, physical_memory_bytes=1):
        env.put("T", 0, b"a")
        env.put("T", 0, b"b")
        resp = env.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("G", "T", 0))
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        assert resp.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


def test_missing_required_header_raises_header_error(env: Env) -> None:
    with pytest.raises(HeaderError, match="queueId"):
        env.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T"})
    with pytest.raises(HeaderError, match="commitOffset"):
        env.call(RequestCode.UPDATE_CONSUMER_OFFSET, _q("G", "T", 0))


def test_offset_headers_are_range_checked(env: Env) -> None:
    """The handlers read typed headers (protocol/headers.py): a value outside its Java type is a HeaderError
    (answered SYSTEM_ERROR by the connection), not a number that reaches the offset table or the store."""
    with pytest.raises(HeaderError, match="<commitOffset> is out of range"):
        env.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**_q("G", "T", 0), "commitOffset": str(2**63)})
    with pytest.raises(HeaderError, match="<queueId> is out of range"):
        env.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("G", "T", 2**31))
    with pytest.raises(HeaderError, match="<queueId> is out of range"):
        env.call(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": str(-(2**31) - 1)})
    with pytest.raises(HeaderError, match="<timestamp> is out of range"):
        env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": "0", "timestamp": str(2**64)})
    assert env.ctx.offsets.query("G", "T", 0) < 0  # nothing was committed


def test_get_all_consumer_offset_body(env: Env) -> None:
    env.ctx.offsets.commit("G", "T", 0, 5)
    env.ctx.offsets.commit("G", "T", 3, 9)
    resp = env.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert resp.code == ResponseCode.SUCCESS
    assert resp.body.startswith(b'{"dataVersion":')  # 5.x form: dataVersion first (C: RIP-32)
    assert b',"offsetTable":{"T@G":{0:5,3:9}},"offsetStamps":{"T@G":{0:' in resp.body  # + commit stamps (OrbitMQ)
    body = fastjson.loads(resp.body)
    assert body["offsetTable"] == {"T@G": {0: 5, 3: 9}} and set(body["dataVersion"]) == {"counter", "timestamp"}
    assert set(body["offsetStamps"]["T@G"]) == {0, 3}


# ---- queue offsets ---------------------------------------------------------------------------------------
def test_max_min_offset_and_earliest_time(env: Env) -> None:
    first = env.put("T", 2, b"a")
    env.put("T", 2, b"b")
    env.put("T", 2, b"c")
    q = {"topic": "T", "queueId": "2"}
    assert env.call(RequestCode.GET_MAX_OFFSET, q).ext_fields == {"offset": "3"}
    assert env.call(RequestCode.GET_MIN_OFFSET, q).ext_fields == {"offset": "0"}
    assert env.call(RequestCode.GET_MAX_OFFSET, {"topic": "Nope", "queueId": "0"}).ext_fields == {"offset": "0"}
    resp = env.call(RequestCode.GET_EARLIEST_MSG_STORETIME, q)
    assert resp.ext_fields == {"timestamp": str(first.store_timestamp)}
    resp = env.call(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "Nope", "queueId": "0"})
    assert resp.ext_fields == {"timestamp": "-1"}


def test_search_offset_by_timestamp(env: Env) -> None:
    results = [env.put("T", 0, b"m%d" % i) for i in range(4)]
    q = {"topic": "T", "queueId": "0"}
    resp = env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": "0"})
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "0"
    last_ts = results[-1].store_timestamp
    resp = env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": str(last_ts + 60_000)})
    assert int(resp.ext_fields["offset"]) in (3, 4)  # past the end: last entry or max offset (store rule)
    expected = env.ctx.store.get_offset_in_queue_by_time("T", 0, results[2].store_timestamp)
    resp = env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": str(results[2].store_timestamp)})
    assert resp.ext_fields["offset"] == str(expected)


# ---- QUERY_MESSAGE / VIEW_MESSAGE_BY_ID ------------------------------------------------------------------
def _query(env: Env, key: str, *, unique: bool = False, max_num: int = 32, end: int = 2**62) -> Any:
    ext = {"topic": "T", "key": key, "maxNum": str(max_num), "beginTimestamp": "0", "endTimestamp": str(end)}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    return env.call(RequestCode.QUERY_MESSAGE, ext)


def test_query_message_by_key_and_unique_key(env: Env) -> None:
    env.put("T", 0, b"one", {"KEYS": "order-1 shared", "UNIQ_KEY": "AAA1"})
    env.put("T", 1, b"two", {"KEYS": "order-2 shared", "UNIQ_KEY": "AAA2"})
    env.put("U", 0, b"other topic", {"KEYS": "order-1"})
    resp = _query(env, "order-1")
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in iter_records(resp.body)] == [b"one"]
    assert int(resp.ext_fields["indexLastUpdatePhyoffset"]) > 0
    assert int(resp.ext_fields["indexLastUpdateTimestamp"]) > 0
    assert sorted(m.body for m in iter_records(_query(env, "shared").body)) == [b"one", b"two"]
    resp = _query(env, "AAA2", unique=True, max_num=0)  # maxNum replaced by defaultQueryMaxNum
    assert [m.body for m in iter_records(resp.body)] == [b"two"]


def test_query_message_not_found(env: Env) -> None:
    env.put("T", 0, b"one", {"KEYS": "k1"})
    resp = _query(env, "missing")
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert resp.remark == "can not find message, maybe time range not correct"
    assert "indexLastUpdateTimestamp" in resp.ext_fields
    assert _query(env, "k1", end=1).code == ResponseCode.QUERY_NOT_FOUND  # time range excludes it


def test_view_message_by_id(env: Env) -> None:
    env.put("T", 0, b"first")
    r = env.put("T", 0, b"second", {"KEYS": "x"})
    resp = env.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(r.phys_offset)})
    assert resp.code == ResponseCode.SUCCESS
    (msg,) = list(iter_records(resp.body))
    assert msg.body == b"second" and msg.phys_offset == r.phys_offset and msg.keys == ["x"]
    bad = env.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(r.phys_offset + 10_000)})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "can not find message" in bad.remark
