"""A Structured Streaming job run as a subprocess by test_stream.py (so it can be killed with kill -9):
orbitmq topic -> Parquet with a checkpoint, maxMessagesPerTrigger=1000; appends each batch's input row count to a
progress file. Usage: stream_job.py NAMESRV TOPIC CHECKPOINT OUT PROGRESS GROUP {processing|availableNow}."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time


def main() -> None:
    namesrv, topic, checkpoint, out, progress, group, trigger = sys.argv[1:8]
    if not os.environ.get("JAVA_HOME") and shutil.which("java"):
        os.environ["JAVA_HOME"] = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("java") or "")))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("orbitmq-stream-job")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (spark.readStream.format("orbitmq").option("nameServer", namesrv).option("topic", topic)
          .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "1000")
          .option("consumerGroup", group).load()
          .selectExpr("cast(body as string) AS body", "brokerName", "queueId", "queueOffset"))
    w = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    w = w.trigger(availableNow=True) if trigger == "availableNow" else w.trigger(processingTime="200 milliseconds")
    q = w.start()
    logged: set[int] = set()

    def log_progress() -> None:
        with open(progress, "a", encoding="utf-8") as f:
            for p in q.recentProgress:
                if p.batchId not in logged:
                    logged.add(p.batchId)
                    f.write(json.dumps({"batchId": p.batchId, "rows": p.numInputRows}) + "\n")

    while q.isActive:
        log_progress()
        time.sleep(0.2)
    log_progress()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    spark.stop()


if __name__ == "__main__":
    main()
