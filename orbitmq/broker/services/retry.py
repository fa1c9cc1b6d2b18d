"""Retry service: CONSUMER_SEND_MSG_BACK (36). A consumer's failed message is re-put to %RETRY%<group> through
the delay levels (level 3 + reconsumeTimes unless the client names one), or to the read-only %DLQ%<group> once
reconsumeTimes reaches the group's (or the client's) max reconsume times. Why: docs/design/delay-retry.md.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.model.enums import Perm, SysFlag, transaction_type
from orbitmq.model.message import MessageExt
from orbitmq.model.properties import Prop
from orbitmq.protocol import (
    HeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    ext_bool,
    ext_int,
    ext_str,
)
from orbitmq.store import MessageInner, PutStatus
from orbitmq.store.schedule import SCHEDULE_TOPIC, parse_delay_levels

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.services import ServiceEnv

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
DLQ_NUMS_PER_GROUP = 1
DLQ_PERM = int(Perm.READ)  # read-only: producers cannot write to a dead-letter queue (4.9.x would use RW)
FIRST_RETRY_LEVEL = 3  # delay level of the first redelivery (3 + reconsumeTimes)
VERSION_V3_4_9 = 121  # from this client version the broker honours maxReconsumeTimes in the header
_RW = int(Perm.READ | Perm.WRITE)


def retry_delay_level(header_level: int, reconsume_times: int) -> int:
    """Level of the next redelivery: the client's explicit level, else 3 + reconsumeTimes (10 s, 30 s, 1 m, ...)."""
    return header_level if header_level > 0 else FIRST_RETRY_LEVEL + reconsume_times


def goes_to_dlq(reconsume_times: int, max_reconsume_times: int, header_level: int) -> bool:
    return reconsume_times >= max_reconsume_times or header_level < 0


def schedule_rewrite(topic: str, queue_id: int, props: dict[str, str], level: int,
                     max_level: int) -> tuple[str, int]:
    """DELAY level > 0: REAL_TOPIC/REAL_QID keep the destination, the record goes to SCHEDULE_TOPIC_XXXX level-1."""
    level = min(level, max_level)
    if level <= 0:
        props.pop(Prop.DELAY, None)
        return topic, queue_id
    props[Prop.DELAY] = str(level)
    props[Prop.REAL_TOPIC] = topic
    props[Prop.REAL_QID] = str(queue_id)
    return SCHEDULE_TOPIC, level - 1


class RetryService:
    name = "retry"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.max_level = len(parse_delay_levels(ctx.config.message_delay_level))
        self.send_back_nums = 0
        self.dlq_nums = 0

    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {int(RequestCode.CONSUMER_SEND_MSG_BACK): self.handle}

    async def start(self) -> None:
        return None

    async def run(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def _error(self, req: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return req.response(code, remark)

    async def handle(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        ext = req.ext_fields or {}
        try:
            phys = ext_int(ext, "offset")
            group = ext_str(ext, "group")
            header_level = ext_int(ext, "delayLevel")
            origin_msg_id = ext_str(ext, "originMsgId", None)
            unit_mode = ext_bool(ext, "unitMode", False)
            header_max = ext_int(ext, "maxReconsumeTimes", None)
        except HeaderError as e:
            return self._error(req, ResponseCode.SYSTEM_ERROR, str(e))
        sgc = ctx.groups.find_or_create(group)
        if sgc is None:
            return self._error(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        cfg = ctx.config
        if not cfg.broker_permission & Perm.WRITE or cfg.is_slave:
            return self._error(req, ResponseCode.NO_PERMISSION,
                               f"the broker[{cfg.broker_ip1}] sending message is forbidden")
        if sgc.retry_queue_nums <= 0:
            return req.response(ResponseCode.SUCCESS)  # retry disabled for the group: the message is dropped
        topic = RETRY_PREFIX + group
        queue_id = random.randrange(1 << 30) % sgc.retry_queue_nums
        tc = ctx.topics.create_system_topic(topic, sgc.retry_queue_nums, _RW, 2 if unit_mode else 0)
        if not tc.perm & Perm.WRITE:
            return self._error(req, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        msg = ctx.store.look_message_by_offset(phys)
        if msg is None:
            return self._error(req, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phys}")
        max_times = sgc.retry_max_times
        if req.version >= VERSION_V3_4_9 and header_max is not None:
            max_times = header_max
        inner = self.retry_message(msg, topic, queue_id, origin_msg_id)
        if goes_to_dlq(msg.reconsume_times, max_times, header_level):
            inner.topic = DLQ_PREFIX + group
            inner.queue_id = random.randrange(1 << 30) % DLQ_NUMS_PER_GROUP
            ctx.topics.create_system_topic(inner.topic, DLQ_NUMS_PER_GROUP, DLQ_PERM)
            inner.properties.pop(Prop.DELAY, None)
            self.dlq_nums += 1
        elif transaction_type(inner.sys_flag) in (0, SysFlag.TRANSACTION_COMMIT):
            level = retry_delay_level(header_level, msg.reconsume_times)
            inner.topic, inner.queue_id = schedule_rewrite(topic, queue_id, inner.properties, level, self.max_level)
        result = await ctx.store.put_message(inner)
        if result.status is not PutStatus.PUT_OK:
            return self._error(req, ResponseCode.SYSTEM_ERROR, result.status.name)
        self.send_back_nums += 1
        ctx.stats.on_put(1, result.wrote_bytes)
        if inner.topic.startswith(DLQ_PREFIX):  # rocketmq_send_to_dlq_messages_total{topic, consumer_group}
            ctx.stats.on_dlq(inner.properties.get(Prop.RETRY_TOPIC) or msg.topic, group)
        return req.response(ResponseCode.SUCCESS)

    def retry_message(self, msg: MessageExt, topic: str, queue_id: int, origin_msg_id: str | None) -> MessageInner:
        """Copy of the failed record for %RETRY%<group>: same body/flag/properties/sys flag/born info, RETRY_TOPIC
        and ORIGIN_MESSAGE_ID set once, reconsumeTimes + 1, WAIT=false."""
        props = dict(msg.properties)
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        if not props.get(Prop.ORIGIN_MESSAGE_ID):
            props[Prop.ORIGIN_MESSAGE_ID] = msg.offset_msg_id or origin_msg_id or ""
        props[Prop.WAIT] = "false"
        return MessageInner(topic, queue_id, msg.body, props, msg.flag, msg.sys_flag, msg.born_timestamp,
                            msg.born_host, self.ctx.store_host, msg.reconsume_times + 1, 0)


def create(ctx: BrokerContext, env: ServiceEnv) -> RetryService | None:
    return RetryService(ctx, env)
