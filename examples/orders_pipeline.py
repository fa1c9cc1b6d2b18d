"""Orders pipeline on Spark Structured Streaming with OrbitMQ as source and sink (one command):

    .venv/bin/python examples/orders_pipeline.py            # starts a throwaway local OrbitMQ too
    .venv/bin/python examples/orders_pipeline.py --namesrv 127.0.0.1:9876 --orders 20000

Without --namesrv the script runs `orbitmq standalone` (the public CLI) as a subprocess on free ports with its data
in a temporary folder, and stops it with SIGTERM at the end (a clean stop). A producer thread publishes JSON orders
to `orders`; one streaming query parses them, aggregates per 1-minute event-time window and customer with a 30 s
watermark and appends the closed windows to Parquet; a second query (same aggregation) writes them as JSON
messages to `order-stats`. At the end the script prints a summary of both and removes its temporary folders
(output and checkpoints stay when --workdir is given).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import orjson

from orbitmq.client import Admin, Message, NoRouteError, Producer, ResponseError

ORDERS, STATS = "orders", "order-stats"
CUSTOMERS = [f"c{i:02d}" for i in range(12)]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_ports() -> tuple[int, int]:
    """(name server port, broker port) on 127.0.0.1; a broker also listens on port-2 (VIP) and port+1 (HA)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as a, socket.socket(socket.AF_INET,
                                                                                  socket.SOCK_STREAM) as b:
            a.bind(("127.0.0.1", 0))
            b.bind(("127.0.0.1", 0))
            ns, broker = a.getsockname()[1], b.getsockname()[1]
        if broker < 1026 or broker > 65534 or ns in range(broker - 2, broker + 2):
            continue
        if all(_port_free(p) for p in (broker - 2, broker + 1)):
            return ns, broker
    raise RuntimeError("no free ports for a local OrbitMQ")


class LocalOrbitMQ:
    """`orbitmq standalone` in a subprocess, data in `data_dir`; stopped with SIGTERM (the server's clean stop)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ns_port, self.broker_port = _free_ports()
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        self.log_path = data_dir / "standalone.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout_s: float = 90.0) -> str:
        cli = Path(sys.executable).with_name("orbitmq")
        exe = str(cli) if cli.exists() else (shutil.which("orbitmq") or "orbitmq")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [exe, "standalone", "--data", str(self.data_dir), "--namesrv-port", str(self.ns_port),
             "--broker-port", str(self.broker_port), "--broker-ip", "127.0.0.1"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while b"Ready." not in self.log_path.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"orbitmq standalone did not become ready:\n{tail}")
            time.sleep(0.2)
        return self.namesrv

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                print(f"warning: orbitmq standalone (pid {self.proc.pid}) still stopping after {timeout_s:.0f} s; "
                      f"its log: {self.log_path}", file=sys.stderr)
                return
        if self._log is not None:
            self._log.close()
            self._log = None


async def create_topics(namesrv: str, timeout_s: float = 30.0) -> None:
    async with Admin(namesrv) as admin:
        for t in (ORDERS, STATS):
            await admin.update_topic(t, read_queue_nums=4, write_queue_nums=4)
        deadline = time.monotonic() + timeout_s
        pending = [ORDERS, STATS]
        while pending:  # until the name server routes both
            try:
                if (await admin.topic_route(pending[0])).queue_datas:
                    pending.pop(0)
                    continue
            except (ResponseError, NoRouteError):  # not routed yet (TOPIC_NOT_EXIST)
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"topics {pending} are not routed by the name server after {timeout_s:.0f} s")
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


def run_pipeline(namesrv: str, orders: int, work: Path) -> None:
    asyncio.run(create_topics(namesrv))
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    spark = (SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]")).appName("orders-pipeline")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)  # optional with PySpark 4 (format("orbitmq") is found by itself); also checks the workers' Python
    try:
        feeder = threading.Thread(target=lambda: asyncio.run(produce_orders(namesrv, orders)), daemon=True)
        feeder.start()
        queries = build_queries(spark, namesrv, work)
        feeder.join()
        print(f"produced {orders} orders; waiting for the queries to catch up")
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
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="name server host:port (default: start a local OrbitMQ)")
    ap.add_argument("--orders", type=int, default=12_000)
    ap.add_argument("--workdir", help="where Parquet output and checkpoints go, kept (default: a temp dir, removed)")
    args = ap.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="orders-pipeline-"))
    work = Path(args.workdir) if args.workdir else temp / "work"
    server = None
    try:
        namesrv = args.namesrv
        if namesrv is None:
            server = LocalOrbitMQ(temp / "orbitmq")
            namesrv = server.start()
            print(f"started orbitmq standalone (pid {server.proc.pid if server.proc else '?'}), name server "
                  f"{namesrv}")
        run_pipeline(namesrv, args.orders, work)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
