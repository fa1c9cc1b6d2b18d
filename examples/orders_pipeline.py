"""Orders pipeline on Spark Structured Streaming with OrbitMQ as source and sink (one command):

    .venv/bin/python examples/orders_pipeline.py            # starts a throwaway local OrbitMQ too
    .venv/bin/python examples/orders_pipeline.py --namesrv 127.0.0.1:9876 --orders 20000

A producer thread publishes JSON orders to `orders`; one streaming query parses them, aggregates per 1-minute
event-time window and customer with a 30 s watermark and appends the closed windows to Parquet; a second query
(same aggregation) writes them as JSON messages to `order-stats`. At the end the script prints a summary of both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from orbitmq.client import Admin, Message, Producer

ORDERS, STATS = "orders", "order-stats"
CUSTOMERS = [f"c{i:02d}" for i in range(12)]


def spark_env() -> None:
    if not os.environ.get("JAVA_HOME") and shutil.which("java"):
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(shutil.which("java") or "")).parents[1])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


async def create_topics(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        for t in (ORDERS, STATS):
            await admin.update_topic(t, read_queue_nums=4, write_queue_nums=4)
        for _ in range(100):
            try:
                if all((await admin.topic_route(t)).queue_datas for t in (ORDERS, STATS)):
                    return
            except Exception:  # noqa: BLE001 - not routed yet
                pass
            await asyncio.sleep(0.1)


async def produce_orders(namesrv: str, count: int, per_batch: int = 100) -> None:
    """Orders whose event time advances 100 ms per order (a minute of event time every 600 orders), sent in
    batches of per_batch with the customer as key and the order's size class as tag."""
    rnd = random.Random(7)
    t0 = int(time.time() * 1000)
    async with Producer("orders-producer", namesrv) as p:
        for start in range(0, count, per_batch):
            msgs = []
            for i in range(start, min(count, start + per_batch)):
                customer = rnd.choice(CUSTOMERS)
                amount = round(rnd.uniform(1, 500), 2)
                body = orjson.dumps({"orderId": i, "customer": customer, "amount": amount,
                                     "eventTime": t0 + i * 100})
                m = Message(ORDERS, body)
                m.keys = customer
                m.tags = "big" if amount > 250 else "small"
                msgs.append(m)
            await p.send_batch(msgs)
            await asyncio.sleep(0.01)


def build_queries(spark, namesrv: str, work: Path):  # noqa: ANN001, ANN201 - pyspark objects
    from pyspark.sql import functions as F

    orders = (spark.readStream.format("orbitmq").option("nameServer", namesrv).option("topic", ORDERS)
              .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "5000"))
    schema = "orderId long, customer string, amount double, eventTime long"

    def aggregates(reader):  # noqa: ANN001, ANN202
        parsed = (reader.load().select(F.from_json(F.col("body").cast("string"), schema).alias("o")).select("o.*")
                  .withColumn("eventTime", F.timestamp_millis("eventTime")))
        return (parsed.withWatermark("eventTime", "30 seconds")
                .groupBy(F.window("eventTime", "1 minute"), "customer")
                .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue")))

    to_parquet = (aggregates(orders.option("consumerGroup", "orders-to-parquet"))
                  .selectExpr("window.start AS windowStart", "window.end AS windowEnd", "customer", "orders",
                              "revenue")
                  .writeStream.format("parquet").outputMode("append").option("path", str(work / "stats"))
                  .option("checkpointLocation", str(work / "ckpt-parquet")).trigger(processingTime="2 seconds")
                  .start())
    to_topic = (aggregates(orders.option("consumerGroup", "orders-to-topic"))
                .select(F.to_json(F.struct(F.col("window.start").alias("windowStart"), "customer", "orders",
                                           "revenue")).alias("body"),
                        F.col("customer").alias("key"), F.lit("minute").alias("tags"))
                .writeStream.format("orbitmq").outputMode("append").option("nameServer", namesrv)
                .option("topic", STATS).option("checkpointLocation", str(work / "ckpt-topic"))
                .trigger(processingTime="2 seconds").start())
    return to_parquet, to_topic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="name server host:port (default: start a local OrbitMQ)")
    ap.add_argument("--orders", type=int, default=12_000)
    ap.add_argument("--workdir", help="where Parquet output and checkpoints go (default: a temp dir)")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="orders-pipeline-"))
    server = None
    namesrv = args.namesrv
    if namesrv is None:
        from orbitmq.testing.procs import Standalone

        server = Standalone(work / "orbitmq").start()
        namesrv = server.namesrv_addr
        print(f"started a local OrbitMQ, name server {namesrv}")
    try:
        asyncio.run(create_topics(namesrv))
        spark_env()
        from pyspark.sql import SparkSession

        from orbitmq.spark import register

        spark = (SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]")).appName("orders-pipeline")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        feeder = threading.Thread(target=lambda: asyncio.run(produce_orders(namesrv, args.orders)), daemon=True)
        feeder.start()
        queries = build_queries(spark, namesrv, work)
        feeder.join()
        print(f"produced {args.orders} orders; waiting for the queries to catch up")
        for q in queries:
            q.processAllAvailable()
            q.stop()
        stats = spark.read.parquet(str(work / "stats"))
        closed = stats.count()
        print(f"Parquet {work / 'stats'}: {closed} closed (window, customer) rows; orders counted "
              f"{stats.agg({'orders': 'sum'}).first()[0]} (windows still open at the watermark are not final)")
        stats.orderBy("windowStart", "customer").show(10, truncate=False)
        out = spark.read.format("orbitmq").option("nameServer", namesrv).option("topic", STATS).load()
        print(f"topic {STATS}: {out.count()} aggregate messages, e.g.")
        out.selectExpr("key", "cast(body as string) AS body").show(5, truncate=False)
        spark.stop()
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
