"""TransactionProducer: half message (TRAN_MSG, PGROUP, sysflag PREPARED) → local transaction executor →
END_TRANSACTION oneway to the broker that stored it; answers the broker's CHECK_TRANSACTION_STATE with the
checker's verdict (END_TRANSACTION, fromTransactionCheck=true). The broker side is broker/services/transaction.py.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from enum import Enum
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import broker_api
from orbitmq.client.errors import ClientStateError
from orbitmq.client.producer import Producer, SendResult, SendStatus
from orbitmq.model import Message, MessageExt, Prop, decode_offset_msg_id
from orbitmq.protocol import RemotingCommand, RequestCode

log = logging.getLogger("orbitmq.client.transaction")

TRANSACTION_ID = "__transactionId__"


class LocalTransactionState(Enum):
    """Outcome of the local transaction; the value is END_TRANSACTION's commitOrRollback."""

    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOWN = 0


# executor(msg, arg) / checker(msg): sync or async, returning a LocalTransactionState
Executor = Callable[[Message, Any], Any]
Checker = Callable[[MessageExt], Any]


async def _call(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, LocalTransactionState):
        raise TypeError(f"transaction callback returned {result!r}, not a LocalTransactionState")
    return result


def _end_transaction(header: dict[str, str], remark: str | None) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header, oneway=True)
    cmd.remark = remark
    return cmd


class TransactionProducer(Producer):
    def __init__(self, group: str, namesrv: str, executor: Executor, checker: Checker, **kwargs: Any) -> None:
        super().__init__(group, namesrv, **kwargs)
        self.executor = executor
        self.checker = checker

    async def send_in_transaction(self, msg: Message, arg: Any = None) -> tuple[SendResult, LocalTransactionState]:
        """Send `msg` as a half message, run the executor, tell the broker the outcome (oneway).

        An executor exception leaves the state UNKNOWN (the broker will ask the checker later)."""
        inst = self._instance()
        props = msg.properties
        props.pop(Prop.DELAY, None)  # a half message is never delayed
        props[Prop.TRAN_MSG] = "true"
        props[Prop.PGROUP] = self.group
        result = await self.send(msg)
        props.pop(Prop.TRAN_MSG, None)  # the caller's message object stays a plain message afterwards
        remark: str | None = None
        if result.status is SendStatus.SEND_OK:
            props[TRANSACTION_ID] = result.msg_id
            try:
                state = await _call(self.executor, msg, arg)
            except Exception as e:  # noqa: BLE001 - the local transaction's failure is reported, not raised
                log.warning("local transaction of %s failed: %s", result.msg_id, e)
                state, remark = LocalTransactionState.UNKNOWN, f"executeLocalTransactionBranch exception: {e}"
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        await inst.send_heartbeat_to_all(only_new=True)  # the broker must know us to send check-backs
        addr = inst.broker_addr(result.message_queue.broker_name)
        _, _, phys = decode_offset_msg_id(result.offset_msg_id.split(",")[0])
        header = {"producerGroup": self.group, "tranStateTableOffset": str(result.queue_offset),
                  "commitLogOffset": str(phys), "commitOrRollback": str(state.value),
                  "fromTransactionCheck": "false", "msgId": result.msg_id, "transactionId": result.msg_id}
        try:
            await inst.invoke_oneway(addr, _end_transaction(header, remark))
        except OrbitMQError as e:  # the broker's check-back resolves it later
            log.warning("END_TRANSACTION for %s to %s failed: %s", result.msg_id, addr, e)
        return result, state

    async def on_check_transaction(self, addr: str, header: dict[str, str], body: bytes | None) -> None:
        """CHECK_TRANSACTION_STATE from a broker (routed here by ClientInstance through PGROUP)."""
        inst = self._inst
        if inst is None:
            raise ClientStateError(f"transaction producer {self.group} is not started")
        msgs = broker_api.decode_messages(body)
        if not msgs:
            log.warning("CHECK_TRANSACTION_STATE from %s without a message", addr)
            return
        msg = msgs[0]
        uniq = header.get("msgId") or msg.properties.get(Prop.UNIQ_KEY, "")
        remark: str | None = None
        try:
            state = await _call(self.checker, msg)
        except Exception as e:  # noqa: BLE001
            log.warning("transaction checker failed for %s: %s", uniq, e)
            state, remark = LocalTransactionState.UNKNOWN, f"checkLocalTransactionState exception: {e}"
        end = {"producerGroup": self.group, "tranStateTableOffset": header.get("tranStateTableOffset", "0"),
               "commitLogOffset": header.get("commitLogOffset", str(msg.phys_offset)),
               "commitOrRollback": str(state.value), "fromTransactionCheck": "true", "msgId": uniq,
               "transactionId": header.get("transactionId") or uniq}
        try:
            await inst.invoke_oneway(addr, _end_transaction(end, remark))
        except OrbitMQError as e:
            log.warning("END_TRANSACTION (check) for %s to %s failed: %s", uniq, addr, e)
