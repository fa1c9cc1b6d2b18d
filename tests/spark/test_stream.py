"""Structured Streaming from an orbitmq topic that keeps receiving messages, maxMessagesPerTrigger=1000, into
Parquet: the job is killed with kill -9 mid-stream and restarted from its checkpoint (Trigger.AvailableNow); the
Parquet output holds every message exactly once and the consumer group's offsets reach the end of the topic."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, MessageQueue
from orbitmq.spark import offsets as ofs
from orbitmq.spark.source import DataLossError, QueueRange, ReadOptions, read_range

JOB = Path(__file__).with_name("stream_job.py")
ROOT = Path(__file__).resolve().parents[2]


def _batches(progress: Path) -> list[dict[str, int]]:
    if not progress.exists():
        return []
    return [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]


def _job(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(JOB), *args], cwd=ROOT, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.timeout(480)
def test_stream_killed_and_restarted_writes_each_message_once(spark: Any, mq: Any, helpers: Any,
                                                             tmp_path: Path) -> None:
    topic, group = "SparkStream", "spark-stream-test"
    helpers.create_topic(mq.namesrv_addr, topic)
    sent = [3000]
    asyncio.run(helpers.produce(mq.namesrv_addr, topic, 0, sent[0]))
    stop = threading.Event()

    def keep_producing() -> None:  # the topic keeps receiving messages while the first run works
        while not stop.is_set():
            asyncio.run(helpers.produce(mq.namesrv_addr, topic, sent[0], 64, batch=8, group="spark-stream-feeder"))
            sent[0] += 64
            time.sleep(0.5)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    feeder.start()
    ckpt, out, progress, log = tmp_path / "ckpt", tmp_path / "out", tmp_path / "progress.jsonl", tmp_path / "job.log"
    args = [mq.namesrv_addr, topic, str(ckpt), str(out), str(progress), group]
    p = _job([*args, "processing"], log)
    try:
        deadline = time.monotonic() + 150
        while sum(1 for b in _batches(progress) if b["rows"] > 0) < 3:
            assert p.poll() is None, f"job died: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no progress: {log.read_text()[-3000:]}"
            time.sleep(0.3)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the Python driver and its JVM, mid-batch
        p.wait(30)
        stop.set()
        feeder.join(60)
    total = sent[0]
    p2 = _job([*args, "availableNow"], log)
    try:
        assert p2.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if p2.poll() is None:
            os.killpg(p2.pid, signal.SIGKILL)
    batches = _batches(progress)
    assert max(b["rows"] for b in batches) <= 1000, batches
    bodies = [r[0] for r in spark.read.parquet(str(out)).select("body").collect()]
    assert len(bodies) == total, (len(bodies), total, len(set(bodies)))
    assert set(bodies) == {f"msg-{i}" for i in range(total)}

    async def lag() -> list[tuple[MessageQueue, int, int, int, int]]:
        async with Admin(mq.namesrv_addr) as admin:
            return await admin.consumer_progress(group, topic)

    progress_rows = asyncio.run(lag())
    assert len(progress_rows) == 8 and all(r[3] == 0 for r in progress_rows), progress_rows


def test_fail_on_data_loss(mq: Any, helpers: Any) -> None:
    """Offsets the checkpoint points to but the broker no longer has: a clear error, or skipped and logged."""
    topic = "SparkDataLoss"
    helpers.create_topic(mq.namesrv_addr, topic, 1)
    asyncio.run(helpers.produce(mq.namesrv_addr, topic, 0, 10, queues=1))
    from orbitmq.spark.source import ARROW_SCHEMA as schema
    from orbitmq.spark.sync import client_for

    broker = client_for(mq.namesrv_addr).queues(topic)[0].broker_name
    part = QueueRange(broker, 0, 5, 40)  # the checkpoint expects offsets up to 40, the queue ends at 10
    strict = ReadOptions.of({"nameServer": mq.namesrv_addr, "topic": topic})
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        list(read_range(strict, part, schema))
    lenient = ReadOptions.of({"nameServer": mq.namesrv_addr, "topic": topic, "failOnDataLoss": "false"})
    rows = [o for b in read_range(lenient, part, schema) for o in b.column("queueOffset").to_pylist()]
    assert rows == list(range(5, 10))
    assert ofs.from_json_obj(ofs.to_json_obj({(broker, 0): 10})) == {(broker, 0): 10}
