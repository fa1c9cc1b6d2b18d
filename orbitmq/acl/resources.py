"""What one request touches: {resource: needed permission}, as RocketMQ's PlainAccessResource.parse decides,
plus the request codes only admin accounts may send.

Topics are resources by name; a consumer group is the resource %RETRY%<group> (its retry topic), so group
permissions (groupPerms, defaultGroupPerm) apply to it. A field the request lacks adds nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from orbitmq.acl.config import PUB, SUB, retry_topic
from orbitmq.base.errors import OrbitMQError
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import HeartbeatData

RC = RequestCode

# RocketMQ 4.x's admin codes (create/update/delete topic and group, broker config) and the other requests that
# change what every client sees: offsets reset, write permission, file deletion, ACL administration, and
# OrbitMQ's broker-to-broker replication requests (brokers authenticate by address: see security.md).
ADMIN_CODES: frozenset[int] = frozenset(int(c) for c in (
    RC.UPDATE_AND_CREATE_TOPIC, RC.UPDATE_AND_CREATE_TOPIC_LIST, RC.UPDATE_BROKER_CONFIG,
    RC.DELETE_TOPIC_IN_BROKER, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
    RC.DELETE_SUBSCRIPTIONGROUP, RC.INVOKE_BROKER_TO_RESET_OFFSET, RC.RESET_CONSUMER_OFFSET_IN_BROKER,
    RC.CLONE_GROUP_OFFSET, RC.WIPE_WRITE_PERM_OF_BROKER, RC.ADD_WRITE_PERM_OF_BROKER, RC.TRIGGER_DELETE_FILES,
    RC.DELETE_EXPIRED_COMMITLOG, RC.CLEAN_EXPIRED_CONSUMEQUEUE, RC.CLEAN_UNUSED_TOPIC,
    RC.UPDATE_AND_CREATE_ACL_CONFIG, RC.DELETE_ACL_CONFIG, RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RC.UPDATE_AND_GET_GROUP_FORBIDDEN, RC.UPDATE_AND_CREATE_STATIC_TOPIC, RC.RESET_MASTER_FLUSH_OFFSET,
    RC.UPDATE_COLD_DATA_FLOW_CTR_CONFIG, RC.REMOVE_COLD_DATA_FLOW_CTR_CONFIG, RC.SET_COMMITLOG_READ_MODE,
    RC.ORBIT_REPLICATE_CONSUMER_OFFSETS,
))


class ResourceError(OrbitMQError):
    """The request's resources cannot be determined (e.g. an undecodable heartbeat body)."""


Resources = dict[str, int]


def _add(out: Resources, resource: str | None, perm: int) -> None:
    if resource:
        out[resource] = out.get(resource, 0) | perm


def _send(topic_key: str, group_key: str) -> Callable[[RemotingCommand, dict[str, str]], Resources]:
    def parse(cmd: RemotingCommand, ext: dict[str, str]) -> Resources:
        out: Resources = {}
        topic = ext.get(topic_key)
        if topic and topic.startswith("%RETRY%"):  # a consumer re-sending to its retry topic: SUB on the group
            _add(out, retry_topic(ext.get(group_key) or ""), SUB)
        else:
            _add(out, topic, PUB)
        return out
    return parse


def _send_back(cmd: RemotingCommand, ext: dict[str, str]) -> Resources:
    out: Resources = {}
    _add(out, retry_topic(ext["group"]) if ext.get("group") else None, SUB)
    _add(out, ext.get("originTopic"), PUB)
    return out


def _topic_and_group(group_key: str) -> Callable[[RemotingCommand, dict[str, str]], Resources]:
    def parse(cmd: RemotingCommand, ext: dict[str, str]) -> Resources:
        out: Resources = {}
        _add(out, ext.get("topic"), SUB)
        group = ext.get(group_key)
        _add(out, retry_topic(group) if group else None, SUB)
        return out
    return parse


def _group_only(group_key: str) -> Callable[[RemotingCommand, dict[str, str]], Resources]:
    def parse(cmd: RemotingCommand, ext: dict[str, str]) -> Resources:
        group = ext.get(group_key)
        return {retry_topic(group): SUB} if group else {}
    return parse


def _topic_only(cmd: RemotingCommand, ext: dict[str, str]) -> Resources:
    topic = ext.get("topic")
    return {topic: SUB} if topic else {}


def _heartbeat(cmd: RemotingCommand, ext: dict[str, str]) -> Resources:
    try:
        data = HeartbeatData.from_json(cmd.body or b"{}")
    except (OrbitMQError, ValueError, KeyError, TypeError) as e:
        raise ResourceError(f"undecodable heartbeat body: {e}") from None
    out: Resources = {}
    for consumer in data.consumer_data_set:
        _add(out, retry_topic(consumer.group_name), SUB)
        for sub in consumer.subscription_data_set:
            _add(out, sub.topic, SUB)
    return out


_PARSERS: dict[int, Callable[[RemotingCommand, dict[str, str]], Resources]] = {
    RC.SEND_MESSAGE: _send("topic", "producerGroup"),
    RC.SEND_REPLY_MESSAGE: _send("topic", "producerGroup"),
    RC.SEND_MESSAGE_V2: _send("b", "a"),
    RC.SEND_BATCH_MESSAGE: _send("b", "a"),
    RC.SEND_REPLY_MESSAGE_V2: _send("b", "a"),
    RC.CONSUMER_SEND_MSG_BACK: _send_back,
    RC.PULL_MESSAGE: _topic_and_group("consumerGroup"),
    RC.LITE_PULL_MESSAGE: _topic_and_group("consumerGroup"),
    RC.POP_MESSAGE: _topic_and_group("consumerGroup"),
    RC.PEEK_MESSAGE: _topic_and_group("consumerGroup"),
    RC.ACK_MESSAGE: _topic_and_group("consumerGroup"),
    RC.CHANGE_MESSAGE_INVISIBLETIME: _topic_and_group("consumerGroup"),
    RC.NOTIFICATION: _topic_and_group("consumerGroup"),
    RC.POLLING_INFO: _topic_and_group("consumerGroup"),
    RC.QUERY_CONSUMER_OFFSET: _topic_and_group("consumerGroup"),
    RC.UPDATE_CONSUMER_OFFSET: _topic_and_group("consumerGroup"),
    RC.QUERY_MESSAGE: _topic_only,
    RC.HEART_BEAT: _heartbeat,
    RC.UNREGISTER_CLIENT: _group_only("consumerGroup"),
    RC.GET_CONSUMER_LIST_BY_GROUP: _group_only("consumerGroup"),
}
_PARSERS = {int(k): v for k, v in _PARSERS.items()}


def request_resources(cmd: RemotingCommand) -> Resources:
    """{resource: needed perm} of one request (empty for codes that name no topic or group)."""
    parse = _PARSERS.get(cmd.code)
    if parse is None:
        return {}
    return parse(cmd, cmd.ext_fields or {})
