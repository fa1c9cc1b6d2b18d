"""Message lookup requests: QUERY_MESSAGE (by key or UNIQ_KEY through the IndexFile) and VIEW_MESSAGE_BY_ID.

Bodies are the raw stored records (the CommitLog layout), concatenated, exactly as Java sends them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.broker.handlers.guard import guarded
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_int, ext_str

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext

Handler = Callable[[Any, RemotingCommand], RemotingCommand | None]

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
QUERY_NOT_FOUND_REMARK = "can not find message, maybe time range not correct"


def handlers(ctx: BrokerContext) -> dict[int, Handler]:
    store = ctx.store
    config = ctx.config

    def query_message(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        topic = ext_str(ext, "topic")
        key = ext_str(ext, "key")
        max_num = ext_int(ext, "maxNum")
        begin_ts = ext_int(ext, "beginTimestamp")
        end_ts = ext_int(ext, "endTimestamp")
        if ext and str(ext.get(UNIQUE_KEY_QUERY, "")).lower() == "true":
            max_num = config.default_query_max_num
        max_num = min(max_num, config.max_msgs_num_batch)  # Java caps every index query at maxMsgsNumBatch
        result = store.query_message(topic, key, max_num, begin_ts, end_ts)
        header = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset),
        }
        if not result.buffers:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, QUERY_NOT_FOUND_REMARK, ext_fields=header)
        return cmd.response(ext_fields=header, body=b"".join(result.buffers))

    def view_message_by_id(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        phys_offset = ext_int(cmd.ext_fields, "offset")
        raw = store.select_one_message_by_offset(phys_offset) if phys_offset >= 0 else None
        if raw is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {phys_offset}")
        return cmd.response(body=bytes(raw))

    return guarded({
        RequestCode.QUERY_MESSAGE: query_message,
        RequestCode.VIEW_MESSAGE_BY_ID: view_message_by_id,
    })
