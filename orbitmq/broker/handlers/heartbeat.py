"""HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46) and the NOTIFY_CONSUMER_IDS_CHANGED (40)
fan-out to every channel of a consumer group when its membership or subscriptions change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.filter import sql_limits
from orbitmq.broker.filter.sql92 import SqlParseError, compile_sql92
from orbitmq.broker.handlers.guard import guarded
from orbitmq.broker.metadata.quota import AutoCreateRefused
from orbitmq.model.names import consumer_group_error, group_error, topic_error
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.protocol.bodies import HeartbeatData
from orbitmq.protocol.headers import UnregisterClientRequestHeader

log = logging.getLogger("orbitmq.broker.heartbeat")

RETRY_PREFIX = "%RETRY%"
_RW = 6
MAX_CHECKS_WAITING = 64  # CHECK_CLIENT_CONFIG compiles running or queued off the loop; more -> SYSTEM_BUSY


def heartbeat_name_error(data: HeartbeatData) -> str | None:
    """The first illegal name of a heartbeat (consumer groups, their subscription topics, producer groups)."""
    for cd in data.consumer_data_set:
        err = consumer_group_error(cd.group_name)
        if err is not None:
            return f"consumer group: {err}"
        for sd in cd.subscription_data_set:
            err = topic_error(sd.topic)
            if err is not None:
                return f"subscription of group {cd.group_name}: {err}"
    for pd in data.producer_data_set:
        err = group_error(pd.group_name)
        if err is not None:
            return f"producer group: {err}"
    return None


class ConsumerIdsNotifier:
    """Sends NOTIFY_CONSUMER_IDS_CHANGED (oneway, JSON) to every channel of a group."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.sent_count = 0

    def group_flag(self, group: str) -> bool:
        sgc = self.ctx.groups.get(group)
        return sgc.notify_consumer_ids_changed_enable if sgc is not None else True

    def on_change(self, group: str, by_client: bool) -> None:
        """ClientRegistry callback: a channel left (by_client: UNREGISTER_CLIENT; else close/expiry)."""
        if by_client and not self.group_flag(group):
            return
        self.notify(group)

    def notify(self, group: str) -> None:
        if not self.ctx.config.notify_consumer_ids_changed_enable:
            return
        for conn in self.ctx.clients.consumer_channels(group):
            if getattr(conn, "closed", False):
                continue
            cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group},
                                          oneway=True)
            try:
                conn.invoke_oneway(cmd)
                self.sent_count += 1
            except Exception:
                log.info("notify consumer ids changed to %s failed", getattr(conn, "remote_addr", "?"),
                         exc_info=True)


class ClientManageProcessor:
    def __init__(self, ctx: BrokerContext, notifier: ConsumerIdsNotifier) -> None:
        self.ctx = ctx
        self.notifier = notifier
        self._checks_waiting = 0

    def heartbeat(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        data = HeartbeatData.from_json(req.body)
        err = heartbeat_name_error(data)
        if err is not None:  # refused whole: no group, subscription or retry topic is registered
            return req.response(ResponseCode.SYSTEM_ERROR, err)
        client_id = data.client_id
        language = req.language
        version = req.version
        for cd in data.consumer_data_set:
            group = cd.group_name
            try:
                sgc = ctx.groups.find_or_create(group)
            except AutoCreateRefused as e:  # over the per-client cap: this and later groups are not registered
                return req.response(ResponseCode.SYSTEM_ERROR, str(e))
            notify_enabled = True
            if sgc is not None:
                notify_enabled = sgc.notify_consumer_ids_changed_enable
                if sgc.retry_queue_nums > 0:
                    ctx.topics.create_system_topic(RETRY_PREFIX + group, sgc.retry_queue_nums, _RW,
                                                   2 if cd.unit_mode else 0)
            subs = {sd.topic: sd for sd in cd.subscription_data_set}
            changed = ctx.clients.register_consumer(conn, client_id, group, cd.consume_type, cd.message_model,
                                                    cd.consume_from_where, subs, language, version)
            if changed and notify_enabled:
                self.notifier.notify(group)
        for pd in data.producer_data_set:
            ctx.clients.register_producer(conn, client_id, pd.group_name, language, version)
        if client_id:
            conn.attrs["client_id"] = client_id
        resp = req.response(ResponseCode.SUCCESS)
        resp.version = ctx.config.broker_ver_version
        return resp

    def unregister_client(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.decode(req.ext_fields)
        self.ctx.clients.unregister(conn, h.client_id, producer_group=h.producer_group,
                                    consumer_group=h.consumer_group)
        return req.response(ResponseCode.SUCCESS)

    async def check_client_config(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        """A consumer's subscription checked before it starts: a SQL92 expression is compiled off the event loop
        (a compile takes milliseconds; thousands of checks must not stall other clients), at most
        MAX_CHECKS_WAITING at once."""
        try:
            body = fastjson.loads(req.body) if req.body else {}
        except Exception as e:
            return req.response(ResponseCode.SYSTEM_ERROR, f"bad CheckClientRequestBody: {e}")
        sub = (body or {}).get("subscriptionData") or {}
        expression_type = str(sub.get("expressionType") or "TAG")
        if expression_type == "TAG":
            return req.response(ResponseCode.SUCCESS)
        if expression_type != "SQL92" or not self.ctx.config.enable_property_filter:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"The broker does not support consumer to filter message by {expression_type}")
        expression = str(sub.get("subString") or "")
        if self._checks_waiting >= MAX_CHECKS_WAITING:
            return req.response(ResponseCode.SYSTEM_BUSY,
                                f"{MAX_CHECKS_WAITING} subscription checks are waiting to compile; try again later")
        self._checks_waiting += 1
        try:
            await asyncio.to_thread(compile_sql92, expression, sql_limits(self.ctx.config))
        except SqlParseError as e:
            return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"parse the consumer's subscription[{expression}] failed: {e}")
        finally:
            self._checks_waiting -= 1
        return req.response(ResponseCode.SUCCESS)


def handlers(ctx: BrokerContext, notifier: ConsumerIdsNotifier | None = None) -> dict[int, Any]:
    proc = ClientManageProcessor(ctx, notifier or ConsumerIdsNotifier(ctx))
    return guarded({
        int(RequestCode.HEART_BEAT): proc.heartbeat,
        int(RequestCode.UNREGISTER_CLIENT): proc.unregister_client,
        int(RequestCode.CHECK_CLIENT_CONFIG): proc.check_client_config,
    })
