"""Consumer-offset and queue-offset requests: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, GET_ALL_CONSUMER_OFFSET.

Reads the store only through the MessageStore facade and offsets through ConsumerOffsetManager (memory only).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.broker.handlers.guard import guarded
from orbitmq.model.record import POS_PHYS_OFFSET
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.store import GetStatus

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext

Handler = Callable[[Any, RemotingCommand], RemotingCommand | None]

_Q = struct.Struct(">q")
NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


def first_message_in_memory(store: Any, topic: str, queue_id: int) -> bool:
    """Java's "!checkInDiskByConsumeOffset(topic, queue, 0)": True when queue offset 0 has no entry, or its
    message still lies in the memory-resident tail of the CommitLog (so a new group may start from 0)."""
    result = store.get_message("", topic, queue_id, 0, 1)
    if result.status is not GetStatus.FOUND or not result.buffers:
        return True
    phys_offset = _Q.unpack_from(result.buffers[0], POS_PHYS_OFFSET)[0]
    return bool(store.is_in_memory(phys_offset))


def handlers(ctx: BrokerContext) -> dict[int, Handler]:
    store = ctx.store
    offsets = ctx.offsets

    def query_consumer_offset(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        fence = ctx.read_fence()  # controller mode: offsets not synced yet (a stale answer would roll a consumer back)
        if fence is not None:
            return cmd.response(*fence)
        h = QueryConsumerOffsetRequestHeader.decode(cmd.ext_fields)
        topic, queue_id = h.topic, h.queue_id
        offset = offsets.query(h.consumer_group, topic, queue_id)
        if offset >= 0:
            return cmd.response(ext_fields={"offset": str(offset)})
        # 5.x clients may send setZeroIfNotFound=false to disable the "start from 0" rule below.
        if h.set_zero_if_not_found and store.get_min_offset_in_queue(topic, queue_id) <= 0:
            if first_message_in_memory(store, topic, queue_id):
                return cmd.response(ext_fields={"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)

    def update_consumer_offset(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        h = UpdateConsumerOffsetRequestHeader.decode(cmd.ext_fields)
        offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return None if cmd.is_oneway else cmd.response()

    def get_max_offset(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.decode(cmd.ext_fields)
        offset = store.get_max_offset_in_queue(h.topic, h.queue_id)
        return cmd.response(ext_fields={"offset": str(offset)})

    def get_min_offset(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.decode(cmd.ext_fields)
        offset = store.get_min_offset_in_queue(h.topic, h.queue_id)
        return cmd.response(ext_fields={"offset": str(offset)})

    def search_offset_by_timestamp(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.decode(cmd.ext_fields)
        offset = store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ext_fields={"offset": str(offset)})

    def get_earliest_msg_storetime(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.decode(cmd.ext_fields)
        ts = store.get_earliest_message_time(h.topic, h.queue_id)
        return cmd.response(ext_fields={"timestamp": str(ts)})

    def get_all_consumer_offset(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=offsets.encode())

    return guarded({
        RequestCode.QUERY_CONSUMER_OFFSET: query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: update_consumer_offset,
        RequestCode.GET_MAX_OFFSET: get_max_offset,
        RequestCode.GET_MIN_OFFSET: get_min_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset_by_timestamp,
        RequestCode.GET_EARLIEST_MSG_STORETIME: get_earliest_msg_storetime,
        RequestCode.GET_ALL_CONSUMER_OFFSET: get_all_consumer_offset,
    })
