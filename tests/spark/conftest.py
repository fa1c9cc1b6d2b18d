"""Fixtures of the Spark connector tests: one local[2,4] SparkSession (failed tasks retried) and one standalone
OrbitMQ per session, plus helpers to create topics and produce with batched sends. Every test here is marked
spark + integration."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.client import Admin, Message, MessageQueue, Producer
from orbitmq.testing.procs import Standalone


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: PySpark connector tests (need pyspark and Java 17)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


def spark_env() -> dict[str, str]:
    """JAVA_HOME (from the java on PATH when unset) and the venv's Python for Spark's Python workers."""
    env: dict[str, str] = {}
    if not os.environ.get("JAVA_HOME"):
        java = shutil.which("java")
        if java:
            env["JAVA_HOME"] = str(Path(os.path.realpath(java)).parents[1])
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"pyspark does not import ({exc}): install the spark extra (./dev test does)")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.fail("no Java runtime: Spark 4 needs Java 17 or 21 (java on PATH or JAVA_HOME)")
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    # local[2,4]: two cores, a failed task is retried (up to 4 attempts) as on a cluster (test_sink_idempotent)
    session = (SparkSession.builder.master("local[2,4]").appName("orbitmq-spark-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g").config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def mq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("orbitmq"))
    try:
        yield s.start()
    finally:
        s.close()


def create_topic(namesrv: str, topic: str, queues: int = 8) -> None:
    async def run() -> None:
        async with Admin(namesrv) as admin:
            await admin.update_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
            for _ in range(100):  # wait until the name server routes it
                try:
                    route = await admin.topic_route(topic)
                    if route.queue_datas:
                        return
                except Exception:  # noqa: BLE001 - not registered yet
                    pass
                await asyncio.sleep(0.1)
            raise AssertionError(f"topic {topic} never showed up on the name server")

    asyncio.run(run())


def message(topic: str, i: int) -> Message:
    m = Message(topic, f"msg-{i}".encode(), {"idx": str(i), "parity": "odd" if i % 2 else "even"})
    m.keys = f"k{i % 50}"
    m.tags = "TagA" if i % 3 == 0 else "TagB"
    return m


async def produce(namesrv: str, topic: str, start: int, count: int, queues: int = 8, batch: int = 200,
                  group: str = "spark-test-producer") -> dict[int, tuple[int, int]]:
    """Messages start..start+count-1 sent in batches round-robin over the queues (8 batches in flight);
    returns {i: (queueId, queueOffset)} from the send results."""
    where: dict[int, tuple[int, int]] = {}
    p = Producer(group, namesrv, instance_name=f"prod-{topic}-{start}", send_timeout_ms=10_000)
    await p.start()
    try:
        route = await p._instance().update_route(topic)  # noqa: SLF001 - test helper picks queues itself
        assert route is not None
        brokers = sorted({q.broker_name for q in route.subscribe_queues(topic)})
        sem = asyncio.Semaphore(8)

        async def send(k: int, ids: list[int]) -> None:
            mq = MessageQueue(topic, brokers[0], k % queues)
            async with sem:
                r = await p.send_batch([message(topic, i) for i in ids], queue=mq)
            for n, i in enumerate(ids):
                where[i] = (r.message_queue.queue_id, r.queue_offset + n)

        ids = list(range(start, start + count))
        await asyncio.gather(*(send(k, ids[j:j + batch]) for k, j in enumerate(range(0, count, batch))))
    finally:
        await p.shutdown()
    return where


@pytest.fixture(scope="session")
def helpers() -> SimpleNamespace:
    """create_topic(namesrv, topic, queues=8) and produce(namesrv, topic, start, count, ...) for test modules."""
    return SimpleNamespace(create_topic=create_topic, produce=produce, message=message)
