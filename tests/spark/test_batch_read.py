"""Batch reads through spark.read.format("orbitmq"): a 100,000-message topic over 8 queues comes back exactly, with
the offsets the broker assigned and the properties sent; offset, timestamp and tag bounds select exact ranges."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

N = 100_000
TOPIC = "SparkBatchRead"


@pytest.fixture(scope="module")
def loaded(mq: Any, helpers: Any) -> dict[int, tuple[int, int]]:
    helpers.create_topic(mq.namesrv_addr, TOPIC)
    return asyncio.run(helpers.produce(mq.namesrv_addr, TOPIC, 0, N))


def _read(spark: Any, mq: Any, **opts: str) -> Any:
    r = spark.read.format("orbitmq").option("nameServer", mq.namesrv_addr).option("topic", TOPIC)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_reads_every_message_with_offsets_and_properties(spark: Any, mq: Any, loaded: dict[int, tuple[int, int]]
                                                        ) -> None:
    df = _read(spark, mq, maxRecordsPerPartition="10000")
    assert df.rdd.getNumPartitions() >= 8
    t = df.select("body", "queueId", "queueOffset", "key", "tags", "properties", "topic", "brokerName",
                  "msgId", "storeTimestamp", "bornTimestamp", "reconsumeTimes").toArrow()
    assert t.num_rows == N
    bodies = t.column("body").to_pylist()
    qids = t.column("queueId").to_pylist()
    offs = t.column("queueOffset").to_pylist()
    props = t.column("properties").to_pylist()
    keys = t.column("key").to_pylist()
    tags = t.column("tags").to_pylist()
    seen: set[int] = set()
    for body, q, o, p, k, tg in zip(bodies, qids, offs, props, keys, tags, strict=True):
        i = int(body[4:])
        assert i not in seen
        seen.add(i)
        assert (q, o) == loaded[i], f"message {i}"
        pd = dict(p)
        assert pd["idx"] == str(i) and pd["parity"] == ("odd" if i % 2 else "even")
        assert k == f"k{i % 50}"
        assert tg == ("TagA" if i % 3 == 0 else "TagB")
        assert "UNIQ_KEY" in pd
    assert seen == set(range(N))
    assert set(t.column("topic").to_pylist()) == {TOPIC}
    assert len(set(t.column("brokerName").to_pylist())) == 1
    assert len(set(t.column("msgId").to_pylist())) == N
    assert set(t.column("reconsumeTimes").to_pylist()) == {0}
    assert set(qids) == set(range(8))


def test_timestamp_bounds_select_exact_range(spark: Any, mq: Any, loaded: dict[int, tuple[int, int]]) -> None:
    full = _read(spark, mq).selectExpr("queueId", "queueOffset",
                                       "unix_millis(storeTimestamp) AS ts").toArrow().to_pylist()
    stamps = sorted({r["ts"] for r in full})
    assert len(stamps) >= 3, "produce spans too few milliseconds to test bounds"
    lo, hi = stamps[len(stamps) // 4], stamps[(3 * len(stamps)) // 4]
    expected = {(r["queueId"], r["queueOffset"]) for r in full if lo <= r["ts"] < hi}
    got_rows = _read(spark, mq, startingTimestamp=str(lo), endingTimestamp=str(hi)).select(
        "queueId", "queueOffset").toArrow().to_pylist()
    got = [(r["queueId"], r["queueOffset"]) for r in got_rows]
    assert len(got) == len(set(got))
    assert set(got) == expected and expected


def test_offset_json_bounds_and_tag_filter(spark: Any, mq: Any, loaded: dict[int, tuple[int, int]]) -> None:
    broker = _read(spark, mq).select("brokerName").first()[0]
    starting = json.dumps({broker: {"0": 100, "1": -2}})
    ending = json.dumps({broker: {"0": 250, "1": 50, "2": 0}})
    rows = _read(spark, mq, startingOffsets=starting, endingOffsets=ending).select(
        "queueId", "queueOffset").toArrow().to_pylist()
    got = sorted((r["queueId"], r["queueOffset"]) for r in rows)
    ends = {q: 1 + max(o for qq, o in loaded.values() if qq == q) for q in range(8)}
    expected = [(0, o) for o in range(100, 250)] + [(1, o) for o in range(50)]
    expected += [(q, o) for q in range(3, 8) for o in range(ends[q])]  # missing from endingOffsets = latest
    assert got == sorted(expected)

    tagged = _read(spark, mq, tags="TagA", endingOffsets=json.dumps({broker: {str(q): 300 for q in range(8)}}))
    bodies = [int(b[4:]) for b in tagged.select("body").toArrow().column("body").to_pylist()]
    expected_ids = sorted(i for i, (q, o) in loaded.items() if o < 300 and i % 3 == 0)
    assert sorted(bodies) == expected_ids
