"""NATS JetStream driver: a file-storage stream, acked publishes, a durable pull consumer with AckAll (nats-py)."""

from __future__ import annotations

import asyncio
import uuid

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from bench.drivers import Driver
from bench.metrics import Meter, find_server_pid

FETCH_BATCH = 500


class NatsDriver(Driver):
    system = "nats"
    durability = "file stream; ack after write to the OS (fsync every 2 min by default)"

    def __init__(self, options: object) -> None:
        self.url = getattr(options, "nats_url", "nats://127.0.0.1:4222")
        self._nc: nats.NATS | None = None
        self._stream = ""
        self._subject = ""
        self._pid: int | None = None

    async def start(self) -> None:
        self._nc = await nats.connect(self.url, max_reconnect_attempts=2)
        self._js = self._nc.jetstream(timeout=30)
        self._pid = find_server_pid(("nats-server",))

    async def prepare(self, destination: str) -> None:
        self._stream = destination.replace(".", "_").replace("-", "_")
        self._subject = f"bench.{self._stream}"
        await self._js.add_stream(StreamConfig(name=self._stream, subjects=[self._subject], storage=StorageType.FILE))

    async def send(self, body: bytes) -> None:
        await self._js.publish(self._subject, body)

    async def send_with_id(self, body: bytes) -> None:
        # Nats-Msg-Id: JetStream remembers it for the stream's duplicate window (2 min by default) and answers a
        # second publish of it as a duplicate, as OrbitMQ does with a RocketMQ message's UNIQ_KEY
        await self._js.publish(self._subject, body, headers={"Nats-Msg-Id": uuid.uuid4().hex})

    async def send_batch(self, bodies: list[bytes]) -> None:
        publish_async = self._js.publish_async
        subject = self._subject
        futures = [await publish_async(subject, b) for b in bodies]
        await asyncio.gather(*futures)

    async def consume(self, count: int, meter: Meter) -> None:
        config = ConsumerConfig(ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.ALL, max_ack_pending=-1)
        sub = await self._js.pull_subscribe(self._subject, durable=f"{self._stream}_c", stream=self._stream,
                                            config=config)
        try:
            while meter.count < count:
                try:
                    msgs = await sub.fetch(batch=min(FETCH_BATCH, count - meter.count), timeout=5)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    meter.bytes += len(m.data)
                meter.count += len(msgs)
                if msgs:
                    await msgs[-1].ack()
        finally:
            await sub.unsubscribe()

    def server_pid(self) -> int | None:
        return self._pid

    async def cleanup(self) -> None:
        if self._stream:
            await self._js.delete_stream(self._stream)

    async def stop(self) -> None:
        if self._nc is not None:
            await self._nc.drain()
