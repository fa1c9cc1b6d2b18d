"""PULL_MESSAGE (11): checks in Java order, tag filter by hash, commit-on-pull, long polling via long_poll.py.

The response body is the store's record buffers joined once. A request that finds nothing and carries the
suspend flag is parked (no answer now); long_poll re-runs it through `rerun` without suspend permission.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.filter import (
    EXPRESSION_TYPE_SQL92,
    FilterBusy,
    FilterCache,
    PendingCompile,
    SqlParseError,
    sql_limits,
)
from orbitmq.broker.handlers.guard import guarded
from orbitmq.broker.long_poll import LongPollService
from orbitmq.broker.metadata.quota import AutoCreateRefused
from orbitmq.model.enums import Perm
from orbitmq.model.tags import java_hash, tags_of_expression
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.headers import PullMessageRequestHeader
from orbitmq.store import GetStatus

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
RETRY_PREFIX = "%RETRY%"
MASTER_ID = 0

_OK = int(ResponseCode.SUCCESS)
_NOT_FOUND = int(ResponseCode.PULL_NOT_FOUND)
_RETRY_NOW = int(ResponseCode.PULL_RETRY_IMMEDIATELY)
_MOVED = int(ResponseCode.PULL_OFFSET_MOVED)


@lru_cache(maxsize=4096)
def tag_codes(expression: str | None) -> frozenset[int] | None:
    """Hash codes of a TAG expression; None for '*' (no filtering)."""
    tags = tags_of_expression(expression)
    if tags is None:
        return None
    return frozenset(java_hash(t) for t in tags)


_decode_pull = PullMessageRequestHeader.decode

# statuses meaning "this queue ends before the requested offset" (a slave that is behind)
_SLAVE_BEHIND = frozenset({GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.NO_MESSAGE_IN_QUEUE,
                           GetStatus.NO_MATCHED_LOGIC_QUEUE})


def _status_code(status: GetStatus, queue_offset: int) -> int:
    if status is GetStatus.FOUND:
        return _OK
    if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
        return _RETRY_NOW
    if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return _MOVED if queue_offset != 0 else _NOT_FOUND
    if status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_FOUND_NULL):
        return _NOT_FOUND
    if status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
        return _MOVED
    return int(ResponseCode.SYSTEM_ERROR)


class PullProcessor:
    def __init__(self, ctx: BrokerContext, long_poll: LongPollService | None = None) -> None:
        self.ctx = ctx
        self.long_poll = long_poll
        self.filters = FilterCache(lambda: self.ctx.config.filter_sql_cache_bytes, lambda: sql_limits(self.ctx.config))

    def handle(self, conn: Any, req: RemotingCommand) -> RemotingCommand | None:
        fence = self.ctx.read_fence()  # controller mode: role unknown (a restarted broker's tail may be unconfirmed)
        if fence is not None:
            return req.response(*fence)
        return self.process(conn, req, allow_suspend=True)

    def rerun(self, conn: Any, req: RemotingCommand) -> RemotingCommand | None:
        """Second processing of a held request: no suspension, no offset commit."""
        return self.process(conn, req, allow_suspend=False)

    def process(self, conn: Any, req: RemotingCommand, allow_suspend: bool) -> RemotingCommand | None:
        h = _decode_pull(req.ext_fields)  # typed, range-checked once (a HeaderError is answered SYSTEM_ERROR)
        group = h.consumer_group
        topic = h.topic
        queue_id = h.queue_id
        queue_offset = h.queue_offset
        # bounds (docs/design/security.md "Limits"): the batch is capped like the store caps it, at least 1
        max_msg_nums = min(max(h.max_msg_nums, 1), self.ctx.config.max_pull_msg_nums or 2**31 - 1)
        sys_flag = h.sys_flag
        commit_offset = h.commit_offset
        suspend_timeout_ms = h.suspend_timeout_millis
        checked = self._check(conn, req, h, group, topic, queue_id, sys_flag)
        if isinstance(checked, RemotingCommand):
            return checked
        sgc, codes, record_filter = checked
        if isinstance(record_filter, PendingCompile):  # a new SQL92 expression compiles off the loop: answer after
            record_filter.then(lambda: self._after_compile(conn, req, allow_suspend))
            return None
        if record_filter is None:
            result = self.ctx.store.get_message(group, topic, queue_id, queue_offset, max_msg_nums,
                                                codes.__contains__ if codes is not None else None)
        else:  # SQL92: second-stage filter over the candidate records' properties
            result = self.ctx.store.get_message(group, topic, queue_id, queue_offset, max_msg_nums, None,
                                                record_filter)
        response = self._respond(conn, req, result, sgc, codes, topic, queue_id, queue_offset, sys_flag,
                                 suspend_timeout_ms, allow_suspend)
        if result.msg_count and response is not None and response.code == _OK:
            gs = self.ctx.group_stats
            gs.on_get(group, topic, result.msg_count, len(response.body or b""))
            gs.on_pulled(group, topic, queue_id, result.next_begin_offset)
        if allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and commit_offset >= 0 and not self.ctx.config.is_slave:
            self.ctx.offsets.commit(group, topic, queue_id, commit_offset)
            self.ctx.offset_committed(group, topic, queue_id, commit_offset)
        return response

    def _check(self, conn: Any, req: RemotingCommand, h: PullMessageRequestHeader, group: str, topic: str,
               queue_id: int, sys_flag: int) -> RemotingCommand | tuple[Any, frozenset[int] | None, Any]:
        """The §3.2 checks in Java order: an error response, or (group config, tag codes or None for all,
        SQL92 record filter or None)."""
        ctx = self.ctx
        cfg = ctx.config
        if not cfg.broker_permission & Perm.READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] pulling message is forbidden")
        try:
            sgc = ctx.groups.find_or_create(group)
        except AutoCreateRefused as e:
            return req.response(ResponseCode.SYSTEM_ERROR, str(e))
        if sgc is None:
            return req.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group}] does not exist, apply first please!")
        if not sgc.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        tc = ctx.topics.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & Perm.READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}] consumer:[{getattr(conn, 'remote_addr', '')}]")
        if sys_flag & FLAG_SUBSCRIPTION:
            expression = "*" if h.subscription is None else h.subscription
            expression_type = h.expression_type or "TAG"
        else:
            cgi = ctx.clients.consumer_group(group)
            if cgi is None:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                    f"the consumer's group info not exist, {group}")
            if not sgc.consume_broadcast_enable and cgi.message_model == "BROADCASTING":
                return req.response(ResponseCode.NO_PERMISSION,
                                    f"the consumer group[{group}] can not consume by broadcast way")
            sub = cgi.subscriptions.get(topic)
            if sub is None:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                    f"the consumer's subscription not exist, {group}")
            if sub.sub_version < h.sub_version:
                return req.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            expression = sub.sub_string
            expression_type = sub.expression_type or "TAG"
        if expression_type != "TAG":
            return self._sql_filter(req, sgc, group, topic, expression, expression_type)
        codes = tag_codes(expression)
        if codes is not None and topic.startswith(RETRY_PREFIX) and not cfg.filter_support_retry:
            codes = None
        return sgc, codes, None

    def _sql_filter(self, req: RemotingCommand, sgc: Any, group: str, topic: str, expression: str,
                    expression_type: str) -> RemotingCommand | tuple[Any, None, Any]:
        """SQL92 property filtering (broker/filter): a compiled record filter, or the error response."""
        if expression_type != EXPRESSION_TYPE_SQL92 or not self.ctx.config.enable_property_filter:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"The broker does not support consumer to filter message by {expression_type}")
        if topic.startswith(RETRY_PREFIX) and not self.ctx.config.filter_support_retry:
            return sgc, None, None
        try:
            return sgc, None, self.filters.lookup(group, topic, expression)
        except SqlParseError as e:
            return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"parse the consumer's subscription[{expression}] failed, group: {group}: {e}")
        except FilterBusy as e:
            return req.response(ResponseCode.SYSTEM_BUSY, str(e))

    def _after_compile(self, conn: Any, req: RemotingCommand, allow_suspend: bool) -> None:
        """A pull that waited for its SQL92 expression to compile: processed now (the compile result is cached, or
        handed over by the cache for this call), answered through the connection."""
        if getattr(conn, "closed", False):
            return
        fence = self.ctx.read_fence()  # the role may have changed while the expression compiled
        if fence is not None:
            conn.reply(req, req.response(*fence))
            return
        try:
            response = self.process(conn, req, allow_suspend)
        except Exception as e:
            conn.reply_error(req, e)
            return
        if response is not None:
            conn.reply(req, response)

    def _respond(self, conn: Any, req: RemotingCommand, result: Any, sgc: Any, codes: frozenset[int] | None,
                 topic: str, queue_id: int, queue_offset: int, sys_flag: int, suspend_timeout_ms: int,
                 allow_suspend: bool) -> RemotingCommand | None:
        """Status -> response (§3.2 table), or park the request (None) for long polling."""
        ctx = self.ctx
        cfg = ctx.config
        status = result.status
        code = _status_code(status, queue_offset)
        if cfg.slave_read_enable:
            suggest = (ctx.slave_read_target(sgc.which_broker_when_consume_slowly) if result.suggest_pull_from_slave
                       else sgc.broker_id)
        else:
            suggest = MASTER_ID
        # RIP-32, as Java 5: an acting slave serves pulls like a master. Any other slave without slave
        # reads sends the client back to the master but still delivers what it found: answering PULL_RETRY with a
        # nextBeginOffset past found messages made a client with a stale route (the slave had been acting) skip them.
        if cfg.is_slave and not ctx.acting_master:
            if not cfg.slave_read_enable:
                if code != _OK:
                    code = _RETRY_NOW
                suggest = MASTER_ID
            elif code == _MOVED:
                code = _RETRY_NOW  # slaves do not correct offsets (offsetCheckInSlave=false)
        # offsets never roll back: a slave, acting or not, whose queue ends before the consumer's offset
        # is behind (its master died before it caught up); the consumer is right. Never move it back (Java's
        # nextOffsetCorrection on a SLAVE keeps the offset): same offset, and "nothing new yet" where it reads.
        next_begin = result.next_begin_offset
        if cfg.is_slave and status in _SLAVE_BEHIND and code in (_MOVED, _RETRY_NOW):
            next_begin = queue_offset
            if code == _MOVED or cfg.slave_read_enable:
                code = _NOT_FOUND
        if code == _OK:
            buffers = result.buffers
            body = b"".join(buffers)
            ctx.stats.on_get(result.msg_count, len(body))
            response = req.response(code, status.value, body=body)
        elif code == _NOT_FOUND and allow_suspend and sys_flag & FLAG_SUSPEND and self.long_poll is not None:
            hold_ms = suspend_timeout_ms if cfg.long_polling_enable else cfg.short_polling_time_mills
            self.long_poll.hold(conn, req, topic, queue_id, queue_offset, hold_ms, codes)
            return None
        else:
            ctx.stats.on_get(0, 0)
            response = req.response(code, status.value)
        response.ext_fields = {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(next_begin),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        return response


def build(ctx: BrokerContext) -> PullProcessor:
    """A PullProcessor with its LongPollService (which re-runs held requests through the processor)."""
    proc = PullProcessor(ctx)
    proc.long_poll = LongPollService(proc.rerun, ctx.store.get_max_offset_in_queue)
    return proc


def handlers(ctx: BrokerContext, proc: PullProcessor | None = None) -> dict[int, Any]:
    proc = proc or build(ctx)
    return guarded({int(RequestCode.PULL_MESSAGE): proc.handle})
