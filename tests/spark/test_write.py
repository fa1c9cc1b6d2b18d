"""Batch writes through df.write.format("orbitmq"): a 100,000-row DataFrame becomes exactly those messages (read
back with the batch reader), with key, tags, properties and per-row topic columns honoured."""

from __future__ import annotations

from typing import Any

import pytest

N = 100_000


def _readback(spark: Any, mq: Any, topic: str) -> list[dict[str, Any]]:
    return (spark.read.format("orbitmq").option("nameServer", mq.namesrv_addr).option("topic", topic).load()
            .select("body", "key", "tags", "properties").toArrow().to_pylist())


@pytest.mark.timeout(300)  # the first test of the module also starts the SparkSession (40-80 s on a busy 2-core box)
def test_write_100k_rows_then_read_them_back(spark: Any, mq: Any, helpers: Any) -> None:
    topic = "SparkWrite100k"
    helpers.create_topic(mq.namesrv_addr, topic)
    df = spark.range(N).selectExpr(
        "cast(concat('row-', id) as binary) AS body", "concat('k', id % 10) AS key",
        "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS tags",
        "map('id', cast(id as string), 'src', 'spark') AS properties").repartition(4)
    df.write.format("orbitmq").option("nameServer", mq.namesrv_addr).option("topic", topic).mode("append").save()
    rows = _readback(spark, mq, topic)
    assert len(rows) == N
    seen: set[int] = set()
    for r in rows:
        i = int(r["body"][4:])
        assert i not in seen
        seen.add(i)
        props = dict(r["properties"])
        assert props["id"] == str(i) and props["src"] == "spark"
        assert r["key"] == f"k{i % 10}"
        assert r["tags"] == ("even" if i % 2 == 0 else "odd")
    assert seen == set(range(N))


def test_topic_column_routes_rows_and_body_is_required(spark: Any, mq: Any, helpers: Any) -> None:
    a, b = "SparkWriteTopicA", "SparkWriteTopicB"
    helpers.create_topic(mq.namesrv_addr, a, 4)
    helpers.create_topic(mq.namesrv_addr, b, 4)
    df = spark.range(100).selectExpr("concat('v', id) AS body",
                                     f"CASE WHEN id < 30 THEN '{a}' ELSE '{b}' END AS topic")
    df.write.format("orbitmq").option("nameServer", mq.namesrv_addr).mode("append").save()
    got_a = sorted(r["body"].decode() for r in _readback(spark, mq, a))
    got_b = sorted(r["body"].decode() for r in _readback(spark, mq, b))
    assert got_a == sorted(f"v{i}" for i in range(30))
    assert got_b == sorted(f"v{i}" for i in range(30, 100))
    with pytest.raises(Exception, match="body"):
        spark.range(3).selectExpr("cast(id as string) AS value").write.format("orbitmq") \
            .option("nameServer", mq.namesrv_addr).option("topic", a).mode("append").save()
