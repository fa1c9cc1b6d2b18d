"""Run by test_discovery.py in a fresh process: a SparkSession that never imports orbitmq reads
format("orbitmq") in batch and streaming mode. Prints one JSON line {"batch": n, "stream": n}.
Usage: discovery_job.py NAMESRV TOPIC CHECKPOINT."""

from __future__ import annotations

import json
import sys


def main() -> None:
    namesrv, topic, checkpoint = sys.argv[1:4]
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("orbitmq-discovery")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    batch = spark.read.format("orbitmq").option("nameServer", namesrv).option("topic", topic).load().count()
    seen: list[int] = []
    q = (spark.readStream.format("orbitmq").option("nameServer", namesrv).option("topic", topic)
         .option("startingOffsets", "earliest").load()
         .writeStream.foreachBatch(lambda df, _: seen.append(df.count()))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(300)
    if q.exception() is not None:
        raise SystemExit(f"stream failed: {q.exception()}")
    print(json.dumps({"batch": batch, "stream": sum(seen), "orbitmq_imported": "orbitmq" in sys.modules}))
    spark.stop()


if __name__ == "__main__":
    main()
