"""Admin requests (mqadmin / dashboard): topic and group administration, statistics, connection lists,
runtime info, broker config, and INVOKE_BROKER_TO_RESET_OFFSET (which pushes RESET_CONSUMER_CLIENT_OFFSET to
the group's live consumers).

Reads metadata through the managers and the store through its facade; writes only metadata (and, for topic
deletion, asks the store to drop the topic's files).
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orbitmq.base.clock import now_ms
from orbitmq.base.errors import OrbitMQError, ProtocolError
from orbitmq.broker.config_file import to_properties
from orbitmq.broker.handlers.guard import guarded
from orbitmq.broker.metadata import DataVersion, SubscriptionGroupConfig
from orbitmq.broker.metadata.topics import validate_topic_config, validate_topic_name
from orbitmq.broker.registration import wait_round
from orbitmq.model.names import GROUP_MAX_LENGTH, consumer_group_error
from orbitmq.model.topic import MessageQueue, TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_bool, ext_int, ext_str, fastjson
from orbitmq.protocol.bodies import (
    ConnectionInfo,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    KVTable,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    TopicOffset,
    TopicStatsTable,
)

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext

log = logging.getLogger("orbitmq.broker.admin")

Handler = Callable[[Any, RemotingCommand], RemotingCommand | None]

SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, please execute it from master broker."
GROUP_NAME_MAX_LENGTH = GROUP_MAX_LENGTH
V3_0_7_SNAPSHOT = 28  # clients older than this cannot handle RESET_CONSUMER_CLIENT_OFFSET


def version_desc(version: int) -> str:
    """MQVersion ordinal -> name for the 4.x range (V4_x_y = 213 + 20x + 2y; SNAPSHOT = one less)."""
    if 213 <= version < 413:
        d = version - 213
        snapshot = d % 2 == 1
        d += 1 if snapshot else 0
        return f"V4_{d // 20}_{(d % 20) // 2}" + ("_SNAPSHOT" if snapshot else "")
    return f"V{version}"


def message_store_timestamp(store: Any, topic: str, queue_id: int, queue_offset: int) -> int:
    """Store timestamp of the message at `queue_offset` (Java getMessageStoreTimeStamp); 0 when absent."""
    if queue_offset < 0:
        return 0
    return max(0, store.get_message_store_timestamp(topic, queue_id, queue_offset))


def _error(cmd: RemotingCommand, remark: str, code: int = ResponseCode.SYSTEM_ERROR) -> RemotingCommand:
    return cmd.response(code, remark)


def _answer_when_routed(ctx: BrokerContext, resp: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Answer a topic change once it is on disk and a registration round that started after it has ended (bounded:
    registration.ROUTE_WAIT_S), so a client that creates a topic and sends to it at once finds its route."""
    written = ctx.topics.answer_when_written(resp)
    registered = ctx.register_round()
    if registered is None:
        ctx.request_register()
        return written

    async def later() -> RemotingCommand:
        out = await written if inspect.isawaitable(written) else written
        await wait_round(registered)
        return out

    return later()


def _is_slave(ctx: BrokerContext) -> bool:
    return str(ctx.config.broker_role) == "SLAVE"


def _language_name(language: Any) -> str:
    return str(getattr(language, "name", language) or "JAVA").upper()


def _connection_info(ch: Any) -> ConnectionInfo:
    return ConnectionInfo(ch.client_id, ch.remote_addr, _language_name(ch.language), int(ch.version))


def handlers(ctx: BrokerContext) -> dict[int, Handler]:
    out: dict[int, Handler] = {}
    out.update(_topic_handlers(ctx))
    out.update(_group_handlers(ctx))
    out.update(_stats_handlers(ctx))
    out.update(_broker_handlers(ctx))
    out[RequestCode.INVOKE_BROKER_TO_RESET_OFFSET] = lambda conn, cmd: reset_offset(ctx, cmd)
    return guarded(out)


# ---- topics --------------------------------------------------------------------------------------------------
def _topic_handlers(ctx: BrokerContext) -> dict[int, Handler]:
    def update_and_create_topic(conn: Any, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        if _is_slave(ctx):
            return _error(cmd, SLAVE_REMARK)
        ext = cmd.ext_fields
        topic = ext_str(ext, "topic")
        err = validate_topic_name(topic)
        if err:
            return _error(cmd, err)
        if ctx.topics.is_system_topic(topic):
            return _error(cmd, f"The topic[{topic}] is conflict with system topic.")
        tc = TopicConfig(
            topic_name=topic,
            read_queue_nums=ext_int(ext, "readQueueNums"),
            write_queue_nums=ext_int(ext, "writeQueueNums"),
            perm=ext_int(ext, "perm"),
            topic_filter_type=str(ext_str(ext, "topicFilterType", "SINGLE_TAG") or "SINGLE_TAG"),
            topic_sys_flag=ext_int(ext, "topicSysFlag", 0),
            order=ext_bool(ext, "order", False),
        )
        err = validate_topic_config(tc)
        if err:
            return _error(cmd, err)
        ctx.topics.create_or_update(tc)
        return _answer_when_routed(ctx, cmd.response())

    def delete_topic_in_broker(conn: Any, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        if _is_slave(ctx):
            return _error(cmd, SLAVE_REMARK)
        topic = ext_str(cmd.ext_fields, "topic")
        err = validate_topic_name(topic)
        if err:
            return _error(cmd, err)
        if ctx.topics.is_system_topic(topic):
            return _error(cmd, f"The topic[{topic}] is conflict with system topic.")
        existed = ctx.topics.delete(topic)
        ctx.offsets.remove_topic(topic)
        ctx.store.delete_topics({topic})
        if existed:
            ctx.request_register()
        return ctx.topics.answer_when_written(cmd.response())

    def get_all_topic_config(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=ctx.topics.encode())

    return {
        RequestCode.UPDATE_AND_CREATE_TOPIC: update_and_create_topic,
        RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic_in_broker,
        RequestCode.GET_ALL_TOPIC_CONFIG: get_all_topic_config,
    }


# ---- subscription groups -------------------------------------------------------------------------------------
def validate_group_config(cfg: SubscriptionGroupConfig) -> str | None:
    """Java client Validators.checkGroup rules (the group's %RETRY% topic must be a legal topic name too)."""
    err = consumer_group_error(cfg.group_name)
    if err is not None:
        return err
    for label, n in (("retryQueueNums", cfg.retry_queue_nums), ("retryMaxTimes", cfg.retry_max_times),
                     ("brokerId", cfg.broker_id)):
        if n < 0:
            return f"{label} {n} must not be negative"
    return None


def _group_handlers(ctx: BrokerContext) -> dict[int, Handler]:
    def update_and_create_subscription_group(conn: Any, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        if _is_slave(ctx):
            return _error(cmd, SLAVE_REMARK)
        if not cmd.body:
            return _error(cmd, "request body (SubscriptionGroupConfig JSON) is empty")
        try:
            cfg = SubscriptionGroupConfig.from_json_obj(fastjson.loads(cmd.body))
        except (ProtocolError, ValueError, TypeError) as e:
            return _error(cmd, f"bad SubscriptionGroupConfig body: {e}")
        err = validate_group_config(cfg)
        if err:
            return _error(cmd, err)
        ctx.groups.update(cfg)
        return ctx.groups.answer_when_written(cmd.response())

    def get_all_subscription_group_config(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=ctx.groups.encode())

    def delete_subscription_group(conn: Any, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        if _is_slave(ctx):
            return _error(cmd, SLAVE_REMARK)
        group = ext_str(cmd.ext_fields, "groupName")
        ctx.groups.delete(group)
        if ext_bool(cmd.ext_fields, "removeOffset", False):
            ctx.offsets.remove_group(group)
        return ctx.groups.answer_when_written(cmd.response())

    return {
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: update_and_create_subscription_group,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: get_all_subscription_group_config,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: delete_subscription_group,
    }


# ---- statistics and connections ------------------------------------------------------------------------------
def _stats_handlers(ctx: BrokerContext) -> dict[int, Handler]:
    store = ctx.store
    broker_name = ctx.config.broker_name

    def get_topic_stats_info(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        tc = ctx.topics.get(topic)
        if tc is None:
            return _error(cmd, f"topic[{topic}] not exist", ResponseCode.TOPIC_NOT_EXIST)
        table = TopicStatsTable()
        for qid in range(tc.write_queue_nums):
            max_offset = max(0, store.get_max_offset_in_queue(topic, qid))
            min_offset = max(0, store.get_min_offset_in_queue(topic, qid))
            last = message_store_timestamp(store, topic, qid, max_offset - 1) if max_offset > 0 else 0
            table.offset_table[MessageQueue(topic, broker_name, qid)] = TopicOffset(min_offset, max_offset, last)
        return cmd.response(body=table.to_json())

    def get_consume_stats(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd.ext_fields, "consumerGroup")
        topic = ext_str(cmd.ext_fields, "topic", "")
        topics = sorted(ctx.offsets.topics_of_group(group)) if not topic else [topic]
        online = ctx.clients.consumer_group(group)
        stats = ConsumeStats()
        for t in topics:
            tc = ctx.topics.get(t)
            if tc is None:
                continue
            if online is not None and online.subscriptions and t not in online.subscriptions:
                continue  # the online group no longer subscribes to this topic
            stats.consume_tps += ctx.group_stats.tps(group, t)  # Java: sum of the topics' GROUP_GET_NUMS tps
            for qid in range(tc.read_queue_nums):
                broker_offset = max(0, store.get_max_offset_in_queue(t, qid))
                consumer_offset = max(0, ctx.offsets.query(group, t, qid))
                last = message_store_timestamp(store, t, qid, consumer_offset - 1)
                stats.offset_table[MessageQueue(t, broker_name, qid)] = OffsetWrapper(
                    broker_offset, consumer_offset, last
                )
        return cmd.response(body=stats.to_json())

    def get_consumer_connection_list(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd.ext_fields, "consumerGroup")
        info = ctx.clients.consumer_group(group)
        if info is None or not info.channels:
            return _error(cmd, f"the consumer group[{group}] not online", ResponseCode.CONSUMER_NOT_ONLINE)
        body = ConsumerConnection(
            connection_set=[_connection_info(ch) for ch in info.channels.values()],
            subscription_table=dict(info.subscriptions),
            consume_type=str(info.consume_type),
            message_model=str(info.message_model),
            consume_from_where=str(info.consume_from_where),
        )
        return cmd.response(body=body.to_json())

    def get_producer_connection_list(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd.ext_fields, "producerGroup")
        chans = ctx.clients.producer_group(group)
        if not chans:
            return _error(cmd, f"the producer group[{group}] not exist")
        body = ProducerConnection([_connection_info(ch) for ch in chans.values()])
        return cmd.response(body=body.to_json())

    def query_topic_consume_by_who(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        groups = set(ctx.clients.groups_subscribing(topic)) | ctx.offsets.groups_of_topic(topic)
        return cmd.response(body=GroupList(sorted(groups)).to_json())

    return {
        RequestCode.GET_TOPIC_STATS_INFO: get_topic_stats_info,
        RequestCode.GET_CONSUME_STATS: get_consume_stats,
        RequestCode.GET_CONSUMER_CONNECTION_LIST: get_consumer_connection_list,
        RequestCode.GET_PRODUCER_CONNECTION_LIST: get_producer_connection_list,
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: query_topic_consume_by_who,
    }


# ---- broker runtime info and config --------------------------------------------------------------------------
def _store_config(store: Any) -> Any:
    return getattr(store, "config", None)


def _format_runtime(ms: int) -> str:
    s = max(0, ms) // 1000
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


def _disk_ratio(path: str | None) -> float:
    """Used fraction of the partition holding `path` (Java getDiskPartitionSpaceUsedPercent); -1 if unknown."""
    if not path:
        return -1.0
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    return (usage.total - usage.free) / usage.total if usage.total else -1.0


def runtime_info(ctx: BrokerContext, boot_ms: int) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO table: broker identity, BrokerStats and the store's own runtime_info()."""
    cfg = ctx.config
    store = ctx.store
    now = now_ms()
    version = int(cfg.broker_ver_version)
    store_cfg = _store_config(store)
    root = getattr(store_cfg, "store_path_root_dir", None)
    earliest = -1
    try:
        msg = store.look_message_by_offset(store.min_phys_offset)
        if msg is not None:
            earliest = msg.store_timestamp
    except (OrbitMQError, OSError, ValueError):
        log.debug("earliest message lookup failed", exc_info=True)
    table: dict[str, str] = {
        "brokerVersionDesc": version_desc(version),
        "brokerVersion": str(version),
        "bootTimestamp": str(boot_ms),
        "runtime": _format_runtime(now - boot_ms),
        "startAcceptSendRequestTimeStamp": str(cfg.start_accept_send_request_time_stamp),
        "earliestMessageTimeStamp": str(earliest),
        "commitLogMinOffset": str(store.min_phys_offset),
        "commitLogMaxOffset": str(store.max_phys_offset),
        "commitLogDiskRatio": str(_disk_ratio(getattr(store_cfg, "commitlog_dir", None)  # storePathCommitLog
                                              or (os.path.join(root, "commitlog") if root else None))),
        "consumeQueueDiskRatio": str(_disk_ratio(os.path.join(root, "consumequeue") if root else None)),
        # no executor queues or page-cache lock exist here: these waits are genuinely zero
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "pageCacheLockTimeMills": "0",
        "remainTransientStoreBufferNumbs": "0",
    }
    table.update(ctx.stats.runtime_info())
    table.update(store.runtime_info())
    return table


def _broker_handlers(ctx: BrokerContext) -> dict[int, Handler]:
    boot_ms = now_ms()
    config_version = DataVersion()  # BrokerConfig is frozen: its version never moves while we run

    def get_broker_runtime_info(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        table = runtime_info(ctx, boot_ms)
        for extra in ctx.runtime_extras:  # services' keys (local delivery); ha/controller mode have their own handler
            table.update(extra())
        return cmd.response(body=KVTable(table).to_json())

    def get_broker_config(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        props = to_properties(ctx.config, _store_config(ctx.store))
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        version = fastjson.dumps(config_version.to_json_obj()).decode()
        return cmd.response(ext_fields={"version": version}, body=text.encode("utf-8"))

    return {
        RequestCode.GET_BROKER_RUNTIME_INFO: get_broker_runtime_info,
        RequestCode.GET_BROKER_CONFIG: get_broker_config,
    }


# ---- reset offset --------------------------------------------------------------------------------------------
def compute_reset_offsets(
    ctx: BrokerContext, topic: str, group: str, timestamp: int, is_force: bool
) -> dict[MessageQueue, int] | str:
    """Per-queue target offsets for a reset to `timestamp` (-1 = the queue's max offset), or an error text.

    Without force a queue only moves backwards: offsets already before the target stay (Java semantics).
    """
    tc = ctx.topics.get(topic)
    if tc is None:
        return f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
    store = ctx.store
    table: dict[MessageQueue, int] = {}
    for qid in range(tc.write_queue_nums):
        consumer_offset = ctx.offsets.query(group, topic, qid)
        if consumer_offset == -1:
            return f"The consumer group <{group}> not exist"
        if timestamp == -1:
            target = store.get_max_offset_in_queue(topic, qid)
        else:
            target = store.get_offset_in_queue_by_time(topic, qid, timestamp)
        target = max(0, target)
        mq = MessageQueue(topic, ctx.config.broker_name, qid)
        table[mq] = target if is_force or target < consumer_offset else consumer_offset
    return table


def reset_offset(ctx: BrokerContext, cmd: RemotingCommand) -> RemotingCommand:
    """INVOKE_BROKER_TO_RESET_OFFSET: commit the new offsets and push them (oneway 220) to every consumer."""
    ext = cmd.ext_fields
    topic = ext_str(ext, "topic")
    group = ext_str(ext, "group")
    timestamp = ext_int(ext, "timestamp")
    is_force = ext_bool(ext, "isForce", False)
    table = compute_reset_offsets(ctx, topic, group, timestamp, is_force)
    if isinstance(table, str):
        return _error(cmd, table)
    info = ctx.clients.consumer_group(group)
    channels = list(info.channels.values()) if info is not None else []
    if not channels:
        return _error(
            cmd,
            f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}",
            ResponseCode.CONSUMER_NOT_ONLINE,
        )
    for ch in channels:
        if int(ch.version) < V3_0_7_SNAPSHOT:
            return _error(cmd, f"the client does not support this feature. version={version_desc(int(ch.version))}")
    for mq, offset in table.items():
        ctx.offsets.commit(group, topic, mq.queue_id, offset)
    body = ResetOffsetBody(table)
    java_body = body.to_json()
    c_body: bytes | None = None
    header = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true" if is_force else "false"}
    for ch in channels:
        if _language_name(ch.language) == "CPP":
            c_body = c_body if c_body is not None else body.to_json_for_c()
            payload = c_body
        else:
            payload = java_body
        request = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(header), payload, oneway=True)
        try:
            ch.conn.invoke_oneway(request)
        except (OrbitMQError, OSError) as e:
            log.warning("reset offset: cannot notify consumer %s of group %s: %s", ch.client_id, group, e)
    return cmd.response(body=java_body)
