"""Read a whole topic back through the SDK (every queue from its min offset to its max) for end-to-end checks."""

from __future__ import annotations

import asyncio
import time

from orbitmq.client import PullConsumer, PullStatus
from orbitmq.client.errors import NoRouteError
from orbitmq.model import MessageExt, MessageQueue


async def read_topic(namesrv: str, topic: str, group: str = "readback",
                     route_wait_s: float = 15.0) -> dict[MessageQueue, list[MessageExt]]:
    """Every stored message of `topic`, per queue, in queue-offset order. A topic auto-created by a send moments ago
    reaches the name server with the broker's next registration: its route is waited for (up to route_wait_s)."""
    out: dict[MessageQueue, list[MessageExt]] = {}
    async with PullConsumer(group, namesrv=namesrv) as c:
        deadline = time.monotonic() + route_wait_s
        while True:
            try:
                queues = await c.fetch_queues(topic)
                break
            except NoRouteError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        for mq in queues:
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
