"""Helper process for test_ordered.py: one orderly push consumer (our SDK) that prints every consumed message as
"<time_ns> <key> <seq>" on stdout (flushed), so the test can merge the streams of several processes.

Usage: python ordered_consumer_helper.py NAMESRV GROUP TOPIC INSTANCE DELAY_MS
"""

from __future__ import annotations

import asyncio
import sys
import time

from orbitmq.client import ConsumeOrderlyResult, PushConsumer
from orbitmq.model import MessageExt


async def main(namesrv: str, group: str, topic: str, instance: str, delay_ms: float) -> None:
    out = sys.stdout

    async def listener(msgs: list[MessageExt]) -> ConsumeOrderlyResult:
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)  # a cancellation here means "not consumed"
        for m in msgs:
            out.write(f"{time.time_ns()} {m.properties['k']} {m.properties['seq']}\n")
        out.flush()
        return ConsumeOrderlyResult.SUCCESS

    c = PushConsumer(group, namesrv=namesrv, instance_name=instance, orderly=True,
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET", persist_offset_interval_ms=500,
                     rebalance_interval_ms=1000, lock_interval_ms=1000, lock_max_live_ms=3000,
                     listener_in_thread=False)
    c.subscribe(topic, "*", listener)
    await c.start()
    out.write("READY\n")
    out.flush()
    try:
        await asyncio.Event().wait()  # until killed
    finally:
        await c.shutdown()


if __name__ == "__main__":
    ns, grp, tp, inst, delay = sys.argv[1:6]
    asyncio.run(main(ns, grp, tp, inst, float(delay)))
