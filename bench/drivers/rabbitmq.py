"""RabbitMQ driver: a durable quorum queue, persistent messages, publisher confirms, manual acks (aio-pika)."""

from __future__ import annotations

import asyncio

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from bench.drivers import Driver
from bench.metrics import Meter, find_server_pid

ACK_EVERY = 256


class RabbitDriver(Driver):
    system = "rabbitmq"
    durability = "quorum queue; confirm after Raft commit (fsync'd WAL batch)"

    def __init__(self, options: object) -> None:
        self.url = getattr(options, "rabbitmq_url", "amqp://guest:guest@127.0.0.1:5672/")
        self.prefetch = int(getattr(options, "prefetch", 1000))
        self._conn: aio_pika.abc.AbstractRobustConnection | None = None
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self._queue_name = ""
        self._pid: int | None = None

    async def start(self) -> None:
        self._conn = await aio_pika.connect(self.url)
        self._channel = await self._conn.channel(publisher_confirms=True)
        self._pid = find_server_pid(("beam.smp",))

    async def prepare(self, destination: str) -> None:
        assert self._channel is not None
        self._queue_name = destination
        await self._channel.declare_queue(destination, durable=True, arguments={"x-queue-type": "quorum"})
        self._exchange = self._channel.default_exchange

    def _message(self, body: bytes) -> aio_pika.Message:
        return aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

    async def send(self, body: bytes) -> None:
        await self._exchange.publish(self._message(body), routing_key=self._queue_name)

    async def send_batch(self, bodies: list[bytes]) -> None:
        publish = self._exchange.publish
        name = self._queue_name
        await asyncio.gather(*(publish(self._message(b), routing_key=name) for b in bodies))

    async def consume(self, count: int, meter: Meter) -> None:
        assert self._conn is not None
        channel = await self._conn.channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        queue = await channel.get_queue(self._queue_name, ensure=False)
        done = asyncio.get_running_loop().create_future()
        state = {"unacked": 0}

        async def on_message(message: AbstractIncomingMessage) -> None:
            if done.done():
                return
            meter.count += 1
            meter.bytes += len(message.body)
            state["unacked"] += 1
            if state["unacked"] >= ACK_EVERY or meter.count >= count:
                state["unacked"] = 0
                await message.ack(multiple=True)
            if meter.count >= count:
                done.set_result(None)

        tag = await queue.consume(on_message)
        try:
            await done
        finally:
            try:
                await queue.cancel(tag)
            finally:
                await channel.close()

    def server_pid(self) -> int | None:
        return self._pid

    async def cleanup(self) -> None:
        if self._channel is not None and self._queue_name:
            await self._channel.queue_delete(self._queue_name)

    async def stop(self) -> None:
        if self._conn is not None:
            await self._conn.close()
