"""Transaction service against a real MessageStore in tmp_path with a virtual clock and fake producer channels:
half rewrite, commit/rollback, check-back copies, the check limit, and a restart from stale progress."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TopicConfigManager,
)
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.transaction import CHECK_GROUP, TransactionService, create
from orbitmq.broker.stats import BrokerStats
from orbitmq.model import decode_offset_msg_id, iter_records
from orbitmq.model.properties import encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.store import GetStatus, MessageStore, StoreConfig

BORN = 1_700_000_000_000


class VirtualClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def monotonic_ms(self) -> int:
        return self.now


class FakeConn:
    def __init__(self, addr: str = "127.0.0.1:5555") -> None:
        self.remote_addr = addr
        self.closed = False
        self.attrs: dict[str, Any] = {}
        self.sent: list[RemotingCommand] = []

    def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def env(tmp_path):
    store = MessageStore(StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                                     mapped_file_size_consume_queue=20 * 1000, max_message_size=1024 * 1024,
                                     max_hash_slot_num=1000, max_index_num=4000))
    store.load()
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1", transaction_timeout=1000, transaction_check_max=3)
    config_dir = str(tmp_path / "store" / "config")
    ctx = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                        ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
    clock = VirtualClock(BORN)
    senv = ServiceEnv(clock, None, config_dir, store.config)  # type: ignore[arg-type]
    yield ctx, senv, clock
    asyncio.run(store.shutdown())


def _service(ctx: BrokerContext, senv: ServiceEnv) -> TransactionService:
    svc = create(ctx, senv)
    ctx.services[svc.name] = svc
    return svc


def _send_half(ctx: BrokerContext, body: bytes, uniq: str, extra: dict[str, str] | None = None) -> RemotingCommand:
    props = {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": uniq, **(extra or {})}
    ext = {"producerGroup": "PG", "topic": "Orders", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "2", "sysFlag": "4", "bornTimestamp": str(BORN), "flag": "0",
           "properties": encode_properties(props)}
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body)
    resp = asyncio.run(SendProcessor(ctx).handle(FakeConn(), req))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return resp


def _end(svc: TransactionService, table_offset: int | str, phys: int | str, kind: int, group: str = "PG") -> Any:
    ext = {"producerGroup": group, "tranStateTableOffset": str(table_offset), "commitLogOffset": str(phys),
           "commitOrRollback": str(kind), "msgId": "x"}
    return asyncio.run(svc.end_transaction(FakeConn(), RemotingCommand.request(RequestCode.END_TRANSACTION, ext)))


def _phys(resp: RemotingCommand) -> int:
    return decode_offset_msg_id(resp.ext_fields["msgId"])[2]


def _messages(ctx: BrokerContext, topic: str, queue_id: int = 0) -> list[Any]:
    r = ctx.store.get_message("t", topic, queue_id, 0, 100)
    if r.status is not GetStatus.FOUND:
        return []
    return [m for b in r.buffers for m in iter_records(bytes(b))]


def test_half_message_is_stored_in_half_topic_and_commit_writes_real_message_once(env):
    ctx, senv, _ = env
    svc = _service(ctx, senv)
    resp = _send_half(ctx, b"pay", "U1")
    (half,) = _messages(ctx, TRANS_HALF_TOPIC)
    assert half.properties["REAL_TOPIC"] == "Orders" and half.properties["REAL_QID"] == "2"
    assert half.sys_flag & 0xC == 0 and _messages(ctx, "Orders", 2) == []
    assert resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["queueId"] == "2"
    assert _end(svc, 0, _phys(resp), 8).code == ResponseCode.SUCCESS
    assert _end(svc, 0, _phys(resp), 8).remark == "transaction already finished"
    (real,) = _messages(ctx, "Orders", 2)
    assert real.body == b"pay" and real.sys_flag & 0xC == 8 and real.prepared_transaction_offset == half.phys_offset
    assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(real.properties)
    (op,) = _messages(ctx, TRANS_OP_HALF_TOPIC)
    assert op.body == b"0" and op.properties["TAGS"] == "d"
    assert _end(svc, 0, _phys(resp), 8, group="other").remark == "The producer group wrong"


def test_rollback_writes_only_an_op_message(env):
    ctx, senv, _ = env
    svc = _service(ctx, senv)
    resp = _send_half(ctx, b"pay", "U1")
    assert _end(svc, 0, _phys(resp), 12).code == ResponseCode.SUCCESS
    assert _messages(ctx, "Orders", 2) == [] and len(_messages(ctx, TRANS_OP_HALF_TOPIC)) == 1


def test_send_is_refused_without_the_service(env):
    ctx, _, _ = env
    ext = {"producerGroup": "PG", "topic": "Orders", "queueId": "0", "sysFlag": "4", "bornTimestamp": str(BORN),
           "flag": "0", "properties": encode_properties({"TRAN_MSG": "true", "PGROUP": "PG"})}
    resp = asyncio.run(SendProcessor(ctx).handle(FakeConn(), RemotingCommand.request(RequestCode.SEND_MESSAGE, ext,
                                                                                     b"x")))
    assert resp.code == ResponseCode.NO_PERMISSION


def test_checks_go_to_a_live_producer_then_the_limit_rolls_back(env):
    ctx, senv, clock = env
    svc = _service(ctx, senv)
    producer = FakeConn("127.0.0.1:7000")
    ctx.clients.register_producer(producer, "cid", "PG", "JAVA", 400)
    _send_half(ctx, b"pay", "U1")
    asyncio.run(svc.start())
    clock.now = BORN + 500
    assert asyncio.run(svc.check_once()) == 0  # younger than transactionTimeOut
    clock.now = BORN + 1500
    for _ in range(5):
        asyncio.run(svc.check_once())
    assert [c.code for c in producer.sent] == [RequestCode.CHECK_TRANSACTION_STATE] * 3
    checks = [next(iter_records(c.body)) for c in producer.sent]
    assert [c.properties["TRANSACTION_CHECK_TIMES"] for c in checks] == ["1", "2", "3"]
    assert all(c.topic == "Orders" and c.queue_id == 2 for c in checks)
    assert [c.ext_fields["tranStateTableOffset"] for c in producer.sent] == ["1", "2", "3"]
    assert len(_messages(ctx, TRANS_CHECK_MAX_TIME_TOPIC)) == 1
    assert _messages(ctx, "Orders", 2) == []
    assert ctx.offsets.query(CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 4


def test_restart_from_stale_progress_commits_once(env):
    ctx, senv, clock = env
    svc = _service(ctx, senv)
    producer = FakeConn()
    ctx.clients.register_producer(producer, "cid", "PG", "JAVA", 400)
    _send_half(ctx, b"pay", "U1")
    asyncio.run(svc.start())
    clock.now = BORN + 1500
    asyncio.run(svc.check_once())
    asyncio.run(svc.check_once())  # the first answer is late: a second copy is checked
    first, second = producer.sent
    assert _end(svc, first.ext_fields["tranStateTableOffset"], first.ext_fields["commitLogOffset"], 8).code == 0
    # crash: the persisted progress is older than the check runs (offsets are flushed every 5 s)
    ctx.offsets.commit(CHECK_GROUP, TRANS_HALF_TOPIC, 0, 0)
    ctx.offsets.commit(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, 0)
    ctx.send_hooks.clear()
    restarted = _service(ctx, senv)
    asyncio.run(restarted.start())
    assert asyncio.run(restarted.check_once()) == 0  # every copy of U1 is known finished
    resp = _end(restarted, second.ext_fields["tranStateTableOffset"], second.ext_fields["commitLogOffset"], 8)
    assert resp.remark == "transaction already finished"
    assert len(_messages(ctx, "Orders", 2)) == 1


def test_check_immunity_time_delays_the_first_check(env):
    ctx, senv, clock = env
    svc = _service(ctx, senv)
    producer = FakeConn()
    ctx.clients.register_producer(producer, "cid", "PG", "JAVA", 400)
    _send_half(ctx, b"pay", "U1", {"CHECK_IMMUNITY_TIME_IN_SECONDS": "10"})
    asyncio.run(svc.start())
    clock.now = BORN + 5000
    assert asyncio.run(svc.check_once()) == 0
    clock.now = BORN + 10_001
    assert asyncio.run(svc.check_once()) == 1
