"""Issue 15 item 3: a stream whose first batch never committed does not re-resolve `latest` on restart. The first
batch's end offsets (which Spark writes to the checkpoint's offset log before running it) carry the start offsets
initialOffset resolved; a restarted query re-runs that batch from them, whatever initialOffset answers now."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orbitmq.spark import offsets as ofs
from orbitmq.spark.source import ARROW_SCHEMA, OrbitMQStreamReader, QueueRange, read_range

try:
    from pyspark.sql.streaming.datasource import ReadAllAvailable
except ImportError:  # pyspark 4.0/4.1: latestOffset() takes no arguments
    ReadAllAvailable = None  # type: ignore[assignment,misc]


def _latest(reader: OrbitMQStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    return reader.latestOffset(start, ReadAllAvailable()) if ReadAllAvailable is not None else reader.latestOffset()


def _read(reader: OrbitMQStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for part in reader.partitions(start, end):
        assert isinstance(part, QueueRange)
        for rb in read_range(reader.opts, part, ARROW_SCHEMA):
            out += [b.decode() for b in rb.column("body").to_pylist()]
    return out


def test_first_batch_rerun_after_restart_starts_where_it_was_planned(mq: Any, helpers: Any) -> None:
    topic = "SparkStartLatest"
    ns = mq.namesrv_addr
    helpers.create_topic(ns, topic, 4)
    asyncio.run(helpers.produce(ns, topic, 0, 100, queues=4, batch=25))  # before the query: not read (latest)
    options = {"nameServer": ns, "topic": topic, "startingOffsets": "latest", "commitOffsetsToBroker": "false"}

    first = OrbitMQStreamReader(options, None)  # type: ignore[arg-type]
    init = first.initialOffset()
    assert sum(ofs.from_json_obj(init).values()) == 100
    asyncio.run(helpers.produce(ns, topic, 100, 60, queues=4, batch=15))  # between the start and the first plan
    end = _latest(first, init)  # Spark writes this to the offset log, then the query dies before its commit
    assert ofs.carried_start(end) == ofs.from_json_obj(init)
    assert sum(ofs.from_json_obj(end).values()) == 160

    asyncio.run(helpers.produce(ns, topic, 160, 40, queues=4, batch=10))  # while the query was down
    restarted = OrbitMQStreamReader(options, None)  # type: ignore[arg-type]
    fresh_start = restarted.initialOffset()  # what Spark passes as the re-run first batch's start: latest now
    assert sum(ofs.from_json_obj(fresh_start).values()) == 200
    rerun = _read(restarted, fresh_start, end)
    assert sorted(rerun) == sorted(f"msg-{i}" for i in range(100, 160))

    # the next batch continues from the first one's end; the carried start does not leak into it
    nxt = _latest(restarted, end)
    assert ofs.carried_start(nxt) is None
    assert sorted(_read(restarted, end, nxt)) == sorted(f"msg-{i}" for i in range(160, 200))
    restarted.commit(nxt)
    assert _latest(restarted, nxt) == nxt  # nothing new: the same offsets, so Spark plans no batch


def test_first_batch_without_new_messages_still_records_its_start(mq: Any, helpers: Any) -> None:
    topic = "SparkStartEmpty"
    ns = mq.namesrv_addr
    helpers.create_topic(ns, topic, 2)
    asyncio.run(helpers.produce(ns, topic, 0, 10, queues=2, batch=5))
    reader = OrbitMQStreamReader({"nameServer": ns, "topic": topic}, None)  # type: ignore[arg-type]
    init = reader.initialOffset()
    end = _latest(reader, init)
    assert ofs.from_json_obj(end) == ofs.from_json_obj(init) and ofs.carried_start(end) == ofs.from_json_obj(init)
    assert _read(reader, init, end) == []
    assert _latest(reader, end) == end


@pytest.mark.timeout(300)
def test_query_stopped_before_its_first_commit_reads_what_arrived_meanwhile(spark: Any, mq: Any, helpers: Any,
                                                                          tmp_path: Path) -> None:
    """End to end: a `latest` query whose first batch fails (nothing committed), 50 new messages, a restart from the
    same checkpoint: the restarted query reads those 50 (re-resolving `latest` would skip them)."""
    from pyspark.errors import StreamingQueryException

    topic, ns = "SparkStartE2E", mq.namesrv_addr
    helpers.create_topic(ns, topic, 4)
    asyncio.run(helpers.produce(ns, topic, 0, 100, queues=4, batch=25))
    ckpt = str(tmp_path / "ckpt")

    def fail(df: Any, batch_id: int) -> None:
        raise RuntimeError(f"batch {batch_id} dies before its commit")

    reader = (spark.readStream.format("orbitmq").option("nameServer", ns).option("topic", topic)
              .option("startingOffsets", "latest").option("commitOffsetsToBroker", "false"))
    q1 = reader.load().writeStream.foreachBatch(fail).option("checkpointLocation", ckpt).start()
    with pytest.raises(StreamingQueryException, match="dies before its commit"):
        q1.awaitTermination(120)
    assert not (tmp_path / "ckpt" / "commits" / "0").exists()
    assert "@start" in (tmp_path / "ckpt" / "offsets" / "0").read_text()

    asyncio.run(helpers.produce(ns, topic, 100, 50, queues=4, batch=10))
    seen: list[str] = []
    q2 = (reader.load().selectExpr("cast(body AS string) AS body").writeStream
          .foreachBatch(lambda df, _: seen.extend(r["body"] for r in df.collect()))
          .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q2.awaitTermination(180)
    assert q2.exception() is None, q2.exception()
    assert sorted(seen) == sorted(f"msg-{i}" for i in range(100, 150))
