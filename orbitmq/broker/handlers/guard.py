"""Name guard: checks the topic and group names a request carries (orbitmq.model.names rules) before its handler
runs, and answers SYSTEM_ERROR with a remark when one is illegal (nothing is stored, the handler never sees it).

Owns REQUEST_NAMES (request code -> the header fields holding names) and the body checks of LOCK/UNLOCK and
BATCH_ACK. Sends and heartbeats check their names themselves (hot path / one JSON decode); this module never reads
metadata or the store.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from orbitmq.base.errors import ProtocolError
from orbitmq.model.names import consumer_group_error, group_error, topic_error
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import LockBatchBody

Check = Callable[[object], "str | None"]
# (header field, check, required): an optional field is checked only when present and non-empty
Field = tuple[str, Check, bool]

_T: Field = ("topic", topic_error, True)
_CG: Field = ("consumerGroup", consumer_group_error, True)

REQUEST_NAMES: dict[int, tuple[Field, ...]] = {
    int(RequestCode.PULL_MESSAGE): (_CG, _T),
    int(RequestCode.QUERY_CONSUMER_OFFSET): (_CG, _T),
    int(RequestCode.UPDATE_CONSUMER_OFFSET): (_CG, _T),
    int(RequestCode.GET_MAX_OFFSET): (_T,),
    int(RequestCode.GET_MIN_OFFSET): (_T,),
    int(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP): (_T,),
    int(RequestCode.GET_EARLIEST_MSG_STORETIME): (_T,),
    int(RequestCode.QUERY_MESSAGE): (_T,),
    int(RequestCode.GET_CONSUMER_LIST_BY_GROUP): (_CG,),
    int(RequestCode.UNREGISTER_CLIENT): (("producerGroup", group_error, False),
                                         ("consumerGroup", group_error, False)),
    int(RequestCode.CONSUMER_SEND_MSG_BACK): (("group", consumer_group_error, True),),
    int(RequestCode.END_TRANSACTION): (("producerGroup", group_error, True),),
    int(RequestCode.POP_MESSAGE): (_CG, _T),
    int(RequestCode.PEEK_MESSAGE): (_CG, _T),
    int(RequestCode.ACK_MESSAGE): (_CG, _T),
    int(RequestCode.CHANGE_MESSAGE_INVISIBLETIME): (_CG, _T),
    int(RequestCode.NOTIFICATION): (_CG, _T),
    int(RequestCode.POLLING_INFO): (_CG, _T),
    # admin requests (a group that is only looked up or deleted may be any legal group)
    int(RequestCode.UPDATE_AND_CREATE_TOPIC): (_T,),
    int(RequestCode.DELETE_TOPIC_IN_BROKER): (_T,),
    int(RequestCode.DELETE_SUBSCRIPTIONGROUP): (("groupName", group_error, True),),
    int(RequestCode.GET_TOPIC_STATS_INFO): (_T,),
    int(RequestCode.GET_CONSUME_STATS): (("consumerGroup", group_error, True), ("topic", topic_error, False)),
    int(RequestCode.GET_CONSUMER_CONNECTION_LIST): (("consumerGroup", group_error, True),),
    int(RequestCode.GET_PRODUCER_CONNECTION_LIST): (("producerGroup", group_error, True),),
    int(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO): (_T,),
    int(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET): (_T, ("group", consumer_group_error, True)),
}


def _lock_body_error(cmd: RemotingCommand) -> str | None:
    try:
        body = LockBatchBody.from_json(cmd.body)
    except (ProtocolError, ValueError, TypeError, KeyError, AttributeError) as e:
        return f"bad LockBatchRequestBody: {e}"
    err = consumer_group_error(body.consumer_group)
    if err is not None:
        return err
    for mq in body.mq_set:
        err = topic_error(mq.topic)
        if err is not None:
            return err
    return None


def _batch_ack_error(cmd: RemotingCommand) -> str | None:
    try:
        acks = orjson.loads(cmd.body or b"{}").get("acks") or []
        pairs = [(a.get("c"), a.get("t")) for a in acks]
    except (orjson.JSONDecodeError, AttributeError, TypeError) as e:
        return f"bad batch ack body: {e}"
    for group, topic in pairs:
        err = consumer_group_error(group) or topic_error(topic)
        if err is not None:
            return err
    return None


BODY_CHECKS: dict[int, Callable[[RemotingCommand], str | None]] = {
    int(RequestCode.LOCK_BATCH_MQ): _lock_body_error,
    int(RequestCode.UNLOCK_BATCH_MQ): _lock_body_error,
    int(RequestCode.BATCH_ACK_MESSAGE): _batch_ack_error,
}


def request_name_error(cmd: RemotingCommand) -> str | None:
    """The remark for the first illegal name `cmd` carries (in its header fields or body), else None."""
    fields = REQUEST_NAMES.get(cmd.code)
    if fields is not None:
        ext = cmd.ext_fields or {}
        for name, check, required in fields:
            value = ext.get(name)
            if value is None or (value == "" and not required):
                continue  # a missing required field is left to the handler's own header check
            err = check(value)
            if err is not None:
                return f"{name}: {err}"
    body_check = BODY_CHECKS.get(cmd.code)
    return body_check(cmd) if body_check is not None else None


def refuse(cmd: RemotingCommand, remark: str) -> RemotingCommand | None:
    """SYSTEM_ERROR + remark (what a 4.x client handles for a malformed name); nothing for a oneway request."""
    return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR, remark)


def guard(handler: Any) -> Any:
    """`handler` behind the name check (same sync/async form; idempotent)."""
    if getattr(handler, "__name_guarded__", False):
        return handler
    if inspect.iscoroutinefunction(handler):
        async def checked_async(conn: Any, cmd: RemotingCommand) -> Any:
            err = request_name_error(cmd)
            if err is not None:
                return refuse(cmd, err)
            return await handler(conn, cmd)

        checked_async.__name_guarded__ = True  # type: ignore[attr-defined]
        return checked_async

    def checked(conn: Any, cmd: RemotingCommand) -> Any:
        err = request_name_error(cmd)
        if err is not None:
            return refuse(cmd, err)
        return handler(conn, cmd)

    checked.__name_guarded__ = True  # type: ignore[attr-defined]
    return checked


def guarded(table: Mapping[int, Any]) -> dict[int, Any]:
    """A handler table whose handlers for the codes listed in REQUEST_NAMES / BODY_CHECKS check names first."""
    return {code: guard(h) if int(code) in REQUEST_NAMES or int(code) in BODY_CHECKS else h
            for code, h in table.items()}
