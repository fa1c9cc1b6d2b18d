"""Read a whole topic back through the SDK (every queue from its min offset to its max) for end-to-end checks."""

from __future__ import annotations

from orbitmq.client import PullConsumer, PullStatus
from orbitmq.model import MessageExt, MessageQueue


async def read_topic(namesrv: str, topic: str, group: str = "readback") -> dict[MessageQueue, list[MessageExt]]:
    """Every stored message of `topic`, per queue, in queue-offset order."""
    out: dict[MessageQueue, list[MessageExt]] = {}
    async with PullConsumer(group, namesrv=namesrv) as c:
        for mq in await c.fetch_queues(topic):
            msgs: list[MessageExt] = []
            offset = await c.min_offset(mq)
            end = await c.max_offset(mq)
            while offset < end:
                r = await c.pull(mq, offset, 32)
                if r.status == PullStatus.FOUND:
                    msgs.extend(r.msgs)
                elif r.status not in (PullStatus.NO_MATCHED_MSG,):
                    break
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
            out[mq] = msgs
    return out
