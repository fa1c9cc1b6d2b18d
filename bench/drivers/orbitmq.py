"""OrbitMQ driver: starts `orbitmq standalone` (own process, free ports, temp data dir) per flush mode and drives
it with the OrbitMQ SDK: Producer.send / send_batch, a second Producer with auto_batch=True (concurrent sends
coalesced into SEND_BATCH_MESSAGE requests) and a PushConsumer (new group, from the first offset).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.drivers import Driver
from bench.metrics import Meter
from orbitmq.cli.admin import AdminSession
from orbitmq.client import ConsumeResult, Producer, PushConsumer
from orbitmq.model import Message, MessageExt
from orbitmq.protocol import RequestCode
from orbitmq.testing.procs import (
    ServerProcess,
    free_broker_port,
    free_port,
    wait_broker_registered,
    write_conf,
)

FLUSH = {"async": "ASYNC_FLUSH", "sync": "SYNC_FLUSH"}
DURABILITY = {
    "async": "ASYNC_FLUSH: ack after append to the page cache (flushed every 500 ms)",
    "sync": "SYNC_FLUSH: ack after group-commit fsync of the CommitLog",
}


class OrbitDriver(Driver):
    system = "orbitmq"

    def __init__(self, mode: str, options: object) -> None:
        self.mode = mode
        self.durability = DURABILITY[mode]
        self.queues = int(getattr(options, "queues", 8))
        self.keep_data = bool(getattr(options, "keep_data", False))
        self.broker_conf: dict[str, str] = dict(getattr(options, "broker_conf", {}))  # more broker.conf settings
        self._dir = Path(tempfile.mkdtemp(prefix=f"orbitmq-bench-{mode}-"))
        self._proc: ServerProcess | None = None
        self._producer: Producer | None = None
        self._auto: Producer | None = None
        self._wants_auto = "autobatch" in getattr(options, "shapes", ())
        self._topic = ""
        self.namesrv = ""
        self.broker_addr = ""

    def conf_settings(self, ns_port: int, broker_port: int) -> dict[str, object]:
        """The standalone's broker.conf: the bench's settings, then the --orbitmq-set ones (which win)."""
        return {
            "brokerClusterName": "BenchCluster", "brokerName": "bench-broker", "brokerIP1": "127.0.0.1",
            "listenPort": broker_port, "namesrvAddr": f"127.0.0.1:{ns_port}",
            "storePathRootDir": str(self._dir / "store"), "flushDiskType": FLUSH[self.mode],
            "autoCreateTopicEnable": "true", "defaultTopicQueueNums": self.queues, **self.broker_conf,
        }

    async def start(self) -> None:
        ns_port, broker_port = free_port(), free_broker_port()
        conf = write_conf(self._dir / "broker.conf", self.conf_settings(ns_port, broker_port))
        log = self._dir / "broker.log"
        self._proc = ServerProcess([sys.executable, "-m", "orbitmq.cli.main", "--log-level", "WARNING",
                                    "standalone", "-c", str(conf), "--namesrv-port", str(ns_port)],
                                   log, ports=[ns_port, broker_port], name=f"orbitmq-{self.mode}",
                                   ready_timeout_s=60)
        await asyncio.to_thread(self._proc.start)
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.broker_addr = f"127.0.0.1:{broker_port}"
        # the ports open before the broker serves: it registers with the name server once it accepts requests
        await asyncio.to_thread(wait_broker_registered, self.namesrv, self.broker_addr, 60.0, proc=self._proc)
        self._producer = Producer("bench-producer", namesrv=self.namesrv, send_timeout_ms=10_000)
        await self._producer.start()
        if self._wants_auto:
            self._auto = Producer("bench-producer-auto", namesrv=self.namesrv, send_timeout_ms=10_000,
                                  auto_batch=True)
            await self._auto.start()

    async def prepare(self, destination: str) -> None:
        self._topic = destination.replace(".", "_")
        session = AdminSession(self.namesrv, timeout_ms=10_000)
        try:
            await session.call(self.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": self._topic, "defaultTopic": "TBW102", "readQueueNums": self.queues,
                "writeQueueNums": self.queues, "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                "order": False})
            deadline = time.monotonic() + 30
            while True:  # answered after the registration round carrying the topic, bounded at 2 s: poll beyond
                try:
                    route = await session.route(self._topic)
                    if route.queue_datas and route.queue_datas[0].write_queue_nums == self.queues:
                        break
                except Exception:  # noqa: BLE001 - not routed yet
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.2)
        finally:
            await session.close()

    async def send(self, body: bytes) -> None:
        assert self._producer is not None
        await self._producer.send(Message(self._topic, body))

    supports_auto_batch = True

    async def send_auto(self, body: bytes) -> None:
        assert self._auto is not None
        await self._auto.send(Message(self._topic, body))

    async def send_batch(self, bodies: list[bytes]) -> None:
        assert self._producer is not None
        topic = self._topic
        await self._producer.send_batch([Message(topic, b) for b in bodies])

    async def consume(self, count: int, meter: Meter) -> None:
        done = asyncio.Event()

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            meter.count += len(msgs)
            for m in msgs:
                meter.bytes += len(m.body)
            if meter.count >= count:
                done.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(f"bench-consumer-{int(time.time() * 1000)}", namesrv=self.namesrv,
                                consume_from_where="CONSUME_FROM_FIRST_OFFSET", consume_batch_size=32,
                                listener_in_thread=False, rebalance_interval_ms=5_000)
        consumer.subscribe(self._topic, "*", listener)
        await consumer.start()
        try:
            await done.wait()
        finally:
            await consumer.shutdown()

    def server_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def stop(self) -> None:
        for producer in (self._producer, self._auto):
            if producer is not None:
                await producer.shutdown()
        if self._proc is not None:
            code = await asyncio.to_thread(self._proc.terminate, 60.0)
            if code not in (0, None):
                print(f"orbitmq-{self.mode}: broker exited with {code}; log: {self._proc.log_path}", file=sys.stderr)
                self.keep_data = True
        if not self.keep_data:
            shutil.rmtree(self._dir, ignore_errors=True)
