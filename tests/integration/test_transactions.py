"""Transactional messages against a real broker process: commit is seen once, rollback never; a producer killed
(-9) before END_TRANSACTION is resolved by check-back through another live producer of its group; a transaction
never answered is rolled back after transactionCheckMax checks; a broker kill -9 between the half message and
the check-back loses nothing."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import (
    ClientInstance,
    ConsumeResult,
    LocalTransactionState,
    PushConsumer,
    TransactionProducer,
)
from orbitmq.client.producer import SendStatus
from orbitmq.model import Message, MessageExt, Prop, decode_offset_msg_id
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import Standalone
from orbitmq.testing.readback import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOWN = LocalTransactionState.UNKNOWN
# small timings: a half message is due for its first check 1 s after its birth, the checker runs every 300 ms
FAST = {"transactionTimeOut": 1000, "transactionCheckInterval": 300}


def run_async(fn: Callable[..., Any]) -> Callable[..., None]:
    """The test body is a coroutine run on a fresh event loop (no asyncio pytest plugin here)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))
    return wrapper


@pytest.fixture(autouse=True)
def _fast_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    # after a broker restart the producer must be known again quickly for check-backs to reach it
    monkeypatch.setattr(ClientInstance, "heartbeat_interval_ms", 500)


async def _bodies(sa: Standalone, topic: str) -> list[bytes]:
    msgs = [m for q in (await read_topic(sa.namesrv_addr, topic)).values() for m in q]
    return sorted(m.body for m in msgs)


async def _wait_for(pred: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            r = pred()
            if asyncio.iscoroutine(r):
                r = await r
        except OrbitMQError:  # a connection to the restarted broker / name server is re-established
            r = False
        if r:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def _checker_recording(calls: list[MessageExt], verdict: Callable[[MessageExt], LocalTransactionState]) -> Any:
    def check(msg: MessageExt) -> LocalTransactionState:
        calls.append(msg)
        return verdict(msg)
    return check


@run_async
async def test_commit_seen_once_and_rollback_never(standalone_factory: Callable[..., Standalone]) -> None:
    sa = standalone_factory(**FAST)
    checks: list[MessageExt] = []
    tp = TransactionProducer("tx_pg1", sa.namesrv_addr, lambda m, arg: arg,
                             _checker_recording(checks, lambda m: UNKNOWN))
    await tp.start()
    try:
        r1, s1 = await tp.send_in_transaction(Message("TxT1", b"committed"), COMMIT)
        r2, s2 = await tp.send_in_transaction(Message("TxT1", b"rolled-back"), ROLLBACK)
        assert (s1, s2) == (COMMIT, ROLLBACK)
        assert r1.status is SendStatus.SEND_OK and r2.status is SendStatus.SEND_OK
        # a repeated commit (e.g. from a duplicated END_TRANSACTION) must not store the message twice
        _, _, phys = decode_offset_msg_id(r1.offset_msg_id)
        again = await _end_transaction(sa.broker_addr, "tx_pg1", r1.queue_offset, phys, 8, r1.msg_id)
        assert again.code == ResponseCode.SUCCESS, again.remark
        # a push consumer of the real topic sees the committed message exactly once, the rolled-back one never
        seen: list[bytes] = []

        def listener(msgs: list[MessageExt]) -> ConsumeResult:
            seen.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("tx_cg1", sa.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe("TxT1", "*", listener)
        await consumer.start()
        try:
            await _wait_for(lambda: seen, 20, "the committed message at the push consumer")
            await asyncio.sleep(2.0)  # past transactionTimeOut: finished transactions are never checked
        finally:
            await consumer.shutdown()
        assert seen == [b"committed"]
        assert await _bodies(sa, "TxT1") == [b"committed"]
        assert checks == []
        # the committed message is a normal message of its real topic: real topic/queue restored, no TRAN_MSG
        msgs = [m for q in (await read_topic(sa.namesrv_addr, "TxT1")).values() for m in q]
        assert msgs[0].properties.get(Prop.UNIQ_KEY) == r1.msg_id
        assert Prop.TRAN_MSG not in msgs[0].properties and Prop.REAL_TOPIC not in msgs[0].properties
        assert msgs[0].queue_id == r1.message_queue.queue_id
        # bad END_TRANSACTION headers are refused with the reference remarks
        bad = await _end_transaction(sa.broker_addr, "other_group", r2.queue_offset, phys + 1, 8, r2.msg_id)
        assert bad.code == ResponseCode.SYSTEM_ERROR
        _, _, phys2 = decode_offset_msg_id(r2.offset_msg_id)
        bad = await _end_transaction(sa.broker_addr, "other_group", r2.queue_offset, phys2, 8, r2.msg_id)
        assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        bad = await _end_transaction(sa.broker_addr, "tx_pg1", r2.queue_offset + 7, phys2, 8, r2.msg_id)
        assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        # a commit after the rollback is ignored
        late = await _end_transaction(sa.broker_addr, "tx_pg1", r2.queue_offset, phys2, 8, r2.msg_id)
        assert late.code == ResponseCode.SUCCESS
        await asyncio.sleep(0.3)
        assert await _bodies(sa, "TxT1") == [b"committed"]
    finally:
        await tp.shutdown()


async def _end_transaction(addr: str, group: str, table_offset: int, phys: int, kind: int,
                           uniq: str) -> RemotingCommand:
    """A request/response END_TRANSACTION (the SDK sends it oneway) to read the broker's verdict."""
    client = RemotingClient()
    try:
        header = {"producerGroup": group, "tranStateTableOffset": str(table_offset), "commitLogOffset": str(phys),
                  "commitOrRollback": str(kind), "fromTransactionCheck": "false", "msgId": uniq,
                  "transactionId": uniq}
        return await client.invoke(addr, RemotingCommand.request(RequestCode.END_TRANSACTION, header), 3000)
    finally:
        await client.close()


CRASHING_PRODUCER = textwrap.dedent("""
    import asyncio, sys
    from orbitmq.client import ClientInstance, ConsumeResult, LocalTransactionState, PushConsumer, TransactionProducer
    from orbitmq.model import Message

    async def main() -> None:
        ClientInstance.heartbeat_interval_ms = 500
        async def executor(msg, arg):
            print("IN-LOCAL-TX", msg.properties["UNIQ_KEY"], flush=True)
            await asyncio.sleep(3600)  # killed -9 here, before END_TRANSACTION
        tp = TransactionProducer("tx_pg2", sys.argv[1], executor, lambda m: LocalTransactionState.UNKNOWN)
        await tp.start()
        await tp.send_in_transaction(Message("TxT2", b"from-crashed-producer"))

    asyncio.run(main())
""")


@run_async
async def test_crashed_producer_resolved_by_check_back_from_another(
        standalone_factory: Callable[..., Standalone]) -> None:
    sa = standalone_factory(transactionCheckMax=15, **FAST)
    checks: list[MessageExt] = []
    alive = TransactionProducer("tx_pg2", sa.namesrv_addr, lambda m, arg: COMMIT,
                                _checker_recording(checks, lambda m: COMMIT))
    await alive.start()
    child = subprocess.Popen([sys.executable, "-c", CRASHING_PRODUCER, sa.namesrv_addr], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        # the live producer announces itself to the broker with a transaction of its own
        await alive.send_in_transaction(Message("TxT2", b"from-alive-producer"))
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)  # type: ignore[union-attr]
        assert line.startswith("IN-LOCAL-TX"), line + child.stderr.read()  # type: ignore[union-attr]
        uniq = line.split()[1]
        child.kill()  # SIGKILL: no END_TRANSACTION, its connection drops
        child.wait(10)
        await _wait_for(lambda: any(c.properties.get(Prop.UNIQ_KEY) == uniq for c in checks), 20,
                        "a check-back to the live producer")
        await _wait_for(lambda: _has_body(sa, "TxT2", b"from-crashed-producer"), 10, "the committed message")
        assert checks[0].topic == "TxT2"  # the check carries the real topic
        await asyncio.sleep(1.0)
        assert await _bodies(sa, "TxT2") == [b"from-alive-producer", b"from-crashed-producer"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        await alive.shutdown()


async def _has_body(sa: Standalone, topic: str, body: bytes) -> bool:
    return body in await _bodies(sa, topic)


@run_async
async def test_never_answered_is_rolled_back_after_check_limit(
        standalone_factory: Callable[..., Standalone]) -> None:
    sa = standalone_factory(transactionCheckMax=3, **FAST)
    checks: list[MessageExt] = []
    tp = TransactionProducer("tx_pg3", sa.namesrv_addr, lambda m, arg: UNKNOWN,
                             _checker_recording(checks, lambda m: UNKNOWN))
    await tp.start()
    try:
        r, state = await tp.send_in_transaction(Message("TxT3", b"never-answered"))
        assert state is UNKNOWN
        await _wait_for(lambda: len(checks) >= 3, 20, "three check-backs")
        await asyncio.sleep(1.5)  # several more check periods: no fourth check, the broker rolled it back
        assert len(checks) == 3
        assert [c.properties.get("TRANSACTION_CHECK_TIMES") for c in checks] == ["1", "2", "3"]
        # the producer changing its mind afterwards changes nothing: the transaction is finished
        _, _, phys = decode_offset_msg_id(r.offset_msg_id)
        late = await _end_transaction(sa.broker_addr, "tx_pg3", r.queue_offset, phys, 8, r.msg_id)
        assert late.code == ResponseCode.SUCCESS
        await asyncio.sleep(0.3)
        assert await _bodies(sa, "TxT3") == []
    finally:
        await tp.shutdown()


@run_async
async def test_broker_kill9_between_half_and_check_back_loses_nothing(
        standalone_factory: Callable[..., Standalone]) -> None:
    sa = standalone_factory(transactionCheckMax=15, **FAST)
    decided = asyncio.Event()
    checks: list[MessageExt] = []
    tp = TransactionProducer("tx_pg4", sa.namesrv_addr, lambda m, arg: arg,
                             _checker_recording(checks, lambda m: COMMIT if decided.is_set() else UNKNOWN))
    await tp.start()
    try:
        await tp.send_in_transaction(Message("TxT4", b"before-crash-commit"), COMMIT)
        await tp.send_in_transaction(Message("TxT4", b"before-crash-rollback"), ROLLBACK)
        r, _ = await tp.send_in_transaction(Message("TxT4", b"pending-through-crash"), UNKNOWN)
        assert r.status is SendStatus.SEND_OK
        # let the broker check it (and re-append copies of the half message) twice before the crash
        await _wait_for(lambda: len(checks) >= 2, 20, "two check-backs before the crash")
        sa.kill9()
        sa.start()
        decided.set()
        await _wait_for(lambda: _has_body(sa, "TxT4", b"pending-through-crash"), 30,
                        "the check-back commit after the restart")
        await asyncio.sleep(1.5)
        assert await _bodies(sa, "TxT4") == [b"before-crash-commit", b"pending-through-crash"]
    finally:
        await tp.shutdown()
