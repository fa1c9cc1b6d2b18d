"""Group-wide admin requests of mqadmin: CLONE_GROUP_OFFSET (cloneGroupOffset), GET_BROKER_CONSUME_STATS
(brokerConsumeStats: every group's ConsumeStats on this broker, built with the GET_CONSUME_STATS handler) and
GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY (consumerStatus, queryMsgById -g -d: forwarded to the
named client over its own connection, the stored message attached for the latter, the answer relayed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.base.errors import RemotingError
from orbitmq.broker.handlers import admin
from orbitmq.broker.handlers.guard import guarded
from orbitmq.model.msg_id import decode_offset_msg_id
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_bool, ext_str
from orbitmq.protocol.bodies import ConsumeStats
from orbitmq.protocol.bodies.consume_stats_list import ConsumeStatsList

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext

Handler = Callable[[Any, RemotingCommand], Any]
CALL_CLIENT_TIMEOUT_MS = 5000


def handlers(ctx: BrokerContext) -> dict[int, Handler]:
    consume_stats = admin.handlers(ctx)[RequestCode.GET_CONSUME_STATS]

    def clone_group_offset(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        if admin._is_slave(ctx):
            return admin._error(cmd, admin.SLAVE_REMARK)
        src = ext_str(cmd.ext_fields, "srcGroup")
        dest = ext_str(cmd.ext_fields, "destGroup")
        topic = ext_str(cmd.ext_fields, "topic", "")
        offline = ext_bool(cmd.ext_fields, "offline", False)
        if not src or not dest:
            return admin._error(cmd, "srcGroup and destGroup are required", ResponseCode.INVALID_PARAMETER)
        topics = [topic] if topic else sorted(ctx.offsets.topics_of_group(src))
        online = ctx.clients.consumer_group(dest)
        cloned = 0
        for t in topics:
            if ctx.topics.get(t) is None:
                continue
            if not offline and online is not None and online.subscriptions and t not in online.subscriptions:
                continue  # Java: an online destination group only gets the topics it subscribes to
            for qid, offset in sorted(ctx.offsets.query_all(src, t).items()):
                ctx.offsets.commit(dest, t, qid, offset)
                cloned += 1
        return cmd.response(remark=f"{cloned} queue offset(s) cloned")

    def get_broker_consume_stats(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        groups = sorted({key.partition("@")[2] for key in ctx.offsets.table()})
        body = ConsumeStatsList(broker_addr=ctx.config.broker_addr)
        for group in groups:
            resp = consume_stats(conn, RemotingCommand.request(RequestCode.GET_CONSUME_STATS,
                                                               {"consumerGroup": group}))
            if resp is None or resp.code != ResponseCode.SUCCESS or not resp.body:
                continue
            stats = ConsumeStats.from_json(resp.body)
            if stats.offset_table:
                body.consume_stats_list.append({group: [stats]})
                body.total_diff += stats.total_diff()
        return cmd.response(body=body.to_json())

    async def call_consumer(cmd: RemotingCommand, ext: dict[str, str], body: bytes | None = None) -> RemotingCommand:
        """Send `cmd`'s request to the client named by its consumerGroup/clientId and relay the answer."""
        group = ext_str(cmd.ext_fields, "consumerGroup")
        client_id = ext_str(cmd.ext_fields, "clientId")
        info = ctx.clients.consumer_group(group)
        channel = next((ch for ch in (info.channels.values() if info else ()) if ch.client_id == client_id), None)
        if channel is None:
            return admin._error(cmd, f"The Consumer <{group}> <{client_id}> not online")
        try:
            answer = await channel.conn.invoke(RemotingCommand.request(cmd.code, ext, body), CALL_CLIENT_TIMEOUT_MS)
        except RemotingError as e:
            return admin._error(cmd, f"invoke consumer <{group}> <{client_id}> failed: {e}")
        return cmd.response(answer.code, answer.remark, body=answer.body)

    async def get_consumer_running_info(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return await call_consumer(cmd, dict(cmd.ext_fields or {}))

    async def consume_message_directly(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        msg_id = ext_str(cmd.ext_fields, "msgId")
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError as e:
            return admin._error(cmd, f"msgId {msg_id!r} is not an offset message id: {e}",
                                ResponseCode.INVALID_PARAMETER)
        raw = ctx.store.select_one_message_by_offset(phys) if phys >= 0 else None
        if raw is None:
            return admin._error(cmd, f"can not find message by the offset, {phys}")
        ext = dict(cmd.ext_fields or {})
        ext["brokerName"] = ctx.config.broker_name
        return await call_consumer(cmd, ext, bytes(raw))

    return guarded({
        RequestCode.CLONE_GROUP_OFFSET: clone_group_offset,
        RequestCode.GET_BROKER_CONSUME_STATS: get_broker_consume_stats,
        RequestCode.GET_CONSUMER_RUNNING_INFO: get_consumer_running_info,
        RequestCode.CONSUME_MESSAGE_DIRECTLY: consume_message_directly,
    })
