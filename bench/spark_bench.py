"""Throughput of the `orbitmq` Spark connector in local[2]: batch write of N rows and batch read of them back
(rows/s). One command: `.venv/bin/python bench/spark_bench.py [--rows 200000] [--body-bytes 100]`; starts its own
OrbitMQ standalone in a temp dir unless --namesrv is given."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--body-bytes", type=int, default=100)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--namesrv")
    args = ap.parse_args()
    if not os.environ.get("JAVA_HOME") and shutil.which("java"):
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(shutil.which("java") or "")).parents[1])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from orbitmq.client import Admin
    from orbitmq.spark import register

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    server = None
    namesrv = args.namesrv
    if namesrv is None:
        from orbitmq.testing.procs import Standalone

        server = Standalone(work / "orbitmq").start()
        namesrv = server.namesrv_addr
    topic = f"SparkBench{int(time.time())}"
    try:
        async def create() -> None:
            async with Admin(namesrv) as admin:
                await admin.update_topic(topic, read_queue_nums=args.queues, write_queue_nums=args.queues)
                for _ in range(100):
                    try:
                        if (await admin.topic_route(topic)).queue_datas:
                            return
                    except Exception:  # noqa: BLE001
                        pass
                    await asyncio.sleep(0.1)

        asyncio.run(create())
        spark = (SparkSession.builder.master("local[2]").appName("orbitmq-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        pad = "x" * max(0, args.body_bytes - 12)
        df = (spark.range(args.rows, numPartitions=2)
              .selectExpr(f"cast(concat(lpad(cast(id as string), 12, '0'), '{pad}') as binary) AS body",
                          "concat('k', id % 100) AS key").cache())
        df.count()  # materialise the input so the timing is the sink's
        t = time.perf_counter()
        df.write.format("orbitmq").option("nameServer", namesrv).option("topic", topic).mode("append").save()
        write_s = time.perf_counter() - t
        reader = spark.read.format("orbitmq").option("nameServer", namesrv).option("topic", topic).load()
        t = time.perf_counter()
        n = reader.selectExpr("length(body) AS n").agg({"n": "count"}).first()[0]
        read_s = time.perf_counter() - t
        assert n == args.rows, f"read {n} of {args.rows}"
        print(f"rows={args.rows} body={args.body_bytes}B queues={args.queues} local[2]")
        print(f"batch write: {write_s:.1f} s = {args.rows / write_s:,.0f} rows/s")
        print(f"batch read:  {read_s:.1f} s = {args.rows / read_s:,.0f} rows/s")
        spark.stop()
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
