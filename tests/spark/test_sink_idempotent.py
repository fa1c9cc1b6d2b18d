"""Issue 15 item 3: the orbitmq sink is idempotent across task retries and re-run micro-batches. Each row's
UNIQ_KEY is derived from (write id, partition, row position), so the rows a failed attempt already sent are
answered by the broker's de-duplication when the retry sends them again: every row is stored once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.spark.sink import row_key
from orbitmq.testing.procs import blocking_request

N = 400
PAD = "x" * 4000


def _dedup_hits(broker_addr: str) -> int:
    resp = blocking_request(broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert resp.code == 0, resp.remark
    return int(KVTable.from_json(resp.body).table["dedupHits"])


def _bodies(spark: Any, namesrv: str, topic: str) -> Counter[str]:
    rows = (spark.read.format("orbitmq").option("nameServer", namesrv).option("topic", topic).load()
            .selectExpr("cast(body as string) AS body").collect())
    return Counter(r["body"] for r in rows)


def test_row_keys_are_stable_and_rocketmq_shaped() -> None:
    k = row_key("job/3", 17)
    assert k == row_key("job/3", 17) and len(k) == 32 and k == k.upper() and int(k, 16) >= 0
    assert len({row_key("job/3", i) for i in range(1000)} | {row_key("job/4", 0)}) == 1001


@pytest.mark.timeout(300)
def test_task_failing_mid_write_is_retried_and_each_row_stored_once(spark: Any, mq: Any, helpers: Any,
                                                                   tmp_path: Path) -> None:
    """The first attempt of a write task dies at row 300 of its 400, once the broker holds at least 200 of its rows
    (small batches, one in flight); Spark retries the task, which sends all 400 rows again. (A UDF runs in its own
    Python worker, upstream of the writer's.)"""
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    topic, namesrv = "SparkSinkRetry", mq.namesrv_addr
    helpers.create_topic(namesrv, topic, 4)
    marker = tmp_path / "failed"

    @F.udf("string")
    def fail_once(i: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and i == 300:
            import time

            from orbitmq.spark.sync import client_for

            client = client_for(namesrv)
            deadline = time.monotonic() + 90
            while sum(hi for _, hi in client.offset_bounds(client.queues(topic)).values()) < 200:
                if time.monotonic() > deadline:
                    raise TimeoutError("the writer never sent the first rows")
                time.sleep(0.05)
            marker.touch()
            raise RuntimeError("first attempt of this task dies mid-write")
        return f"row-{i}/" + PAD  # big rows: the UDF worker's output buffer passes them on while it waits

    hits = _dedup_hits(mq.broker_addr)
    df = spark.range(0, N, 1, 1).select(fail_once(F.col("id")).alias("body"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")  # rows reach the writer as they come
    try:
        (df.write.format("orbitmq").option("nameServer", namesrv).option("topic", topic)
         .option("batchSize", "10").option("maxInFlightBatches", "1").mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists(), "the first attempt was to fail"
    assert _dedup_hits(mq.broker_addr) >= hits + 200, "the retry's re-sends were not answered by de-duplication"
    got = _bodies(spark, namesrv, topic)
    assert sum(got.values()) == N, (sum(got.values()), got.most_common(3))
    assert set(got) == {f"row-{i}/" + PAD for i in range(N)} and max(got.values()) == 1


@pytest.mark.timeout(300)
def test_rerun_micro_batch_is_stored_once(spark: Any, mq: Any, helpers: Any, tmp_path: Path) -> None:
    """A streaming query orbitmq -> orbitmq whose last batch ran but whose commit is lost (the driver died between
    the sink's write and the commit log): the restarted query runs that batch again, same query id and batch id."""
    src, dst = "SparkSinkRerunIn", "SparkSinkRerunOut"
    helpers.create_topic(mq.namesrv_addr, src, 4)
    helpers.create_topic(mq.namesrv_addr, dst, 4)
    asyncio.run(helpers.produce(mq.namesrv_addr, src, 0, 500, queues=4, batch=50))
    ckpt = tmp_path / "ckpt"

    def run_query() -> None:
        q = (spark.readStream.format("orbitmq").option("nameServer", mq.namesrv_addr).option("topic", src)
             .option("startingOffsets", "earliest").load()
             .selectExpr("body", "key")
             .writeStream.format("orbitmq").option("nameServer", mq.namesrv_addr).option("topic", dst)
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert not q.isActive and q.exception() is None, q.exception()

    run_query()
    hits = _dedup_hits(mq.broker_addr)
    first = _bodies(spark, mq.namesrv_addr, dst)
    assert sum(first.values()) == 500 and max(first.values()) == 1
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert commits, "the query committed no batch"
    last = commits[-1]
    for f in (last, last.with_name(f".{last.name}.crc")):
        f.unlink(missing_ok=True)  # the batch's commit never happened
    run_query()
    assert last.exists(), "the restarted query did not re-run the uncommitted batch"
    again = _bodies(spark, mq.namesrv_addr, dst)
    assert again == first, (sum(again.values()), again.most_common(3))
    assert _dedup_hits(mq.broker_addr) >= hits + 500
