"""Writers of the `orbitmq` data source: DataFrame rows (body required; key, tags, properties, topic optional) become
messages sent with SEND_BATCH_MESSAGE, several batches in flight; any delivery failure fails the Spark task.

Idempotent re-sends: each row's UNIQ_KEY is derived from (write id, partition id, row position in the partition),
where the write id is the streaming query id + micro-batch id, or a batch job's id drawn once on the driver. A
retried task or a re-run micro-batch rebuilds the same keys, the same batches and sends each batch to the same
queue, so the broker's de-duplication (within its window) stores every row once. docs/spark.md "Writing".
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import Row, StructType

from orbitmq.client import Message
from orbitmq.model import Prop
from orbitmq.spark.sync import DEFAULT_PRODUCER_GROUP, client_for

# local properties Spark sets on the tasks of a micro-batch (StreamExecution / MicroBatchExecution)
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

log = logging.getLogger("orbitmq.spark")

COLUMNS = ("body", "key", "tags", "properties", "topic")
# properties a reader surfaces that must not be copied onto a new message
_SKIP_PROPS = frozenset({Prop.UNIQ_KEY, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.TAGS, Prop.KEYS,
                         Prop.CONSUME_START_TIME, Prop.DELAY, Prop.WAIT})


@dataclass(frozen=True, slots=True)
class WriteOptions:
    namesrv: str
    topic: str | None
    group: str
    batch_size: int
    batch_bytes: int
    in_flight: int

    @staticmethod
    def of(options: dict[str, str], schema: StructType) -> WriteOptions:
        namesrv = options.get("nameServer") or options.get("namesrvAddr")
        if not namesrv:
            raise ValueError("orbitmq sink needs the option nameServer")
        names = set(schema.fieldNames())
        if "body" not in names:
            raise ValueError(f"orbitmq sink needs a body column; the DataFrame has {sorted(names)}")
        topic = options.get("topic")
        if not topic and "topic" not in names:
            raise ValueError("orbitmq sink needs the option topic or a topic column")
        return WriteOptions(namesrv=namesrv, topic=topic, group=options.get("producerGroup", DEFAULT_PRODUCER_GROUP),
                            batch_size=int(options.get("batchSize", "128")),
                            batch_bytes=int(options.get("batchBytes", str(1024 * 1024))),
                            in_flight=int(options.get("maxInFlightBatches", "8")))


@dataclass
class SentCount(WriterCommitMessage):
    messages: int


def _to_bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return str(v).encode("utf-8")


def row_key(prefix: str, row: int) -> str:
    """A row's UNIQ_KEY: 32 upper-case hex digits (the shape of RocketMQ's), a hash of prefix and row position."""
    return hashlib.blake2b(f"{prefix}/{row}".encode(), digest_size=16).hexdigest().upper()


def task_prefix(write_id: str | None) -> str:
    """`<write id>/<partition id>` for the running Spark task. write_id None (a stream writer): the query id and
    micro-batch id from the task's local properties. Outside a Spark task (tests): the write id alone."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if write_id is None:
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if query is None or batch is None:  # not inside a micro-batch: no key survives a re-run, say so
            log.warning("orbitmq stream sink: no query/batch id in the task; re-sends will not be de-duplicated")
            write_id = uuid.uuid4().hex
        else:
            write_id = f"{query}/{batch}"
    return f"{write_id}/{ctx.partitionId()}" if ctx is not None else write_id


def make_message(opts: WriteOptions, body: Any, key: Any, tags: Any, props: Any, topic: Any,
                 uniq: str | None = None) -> Message:
    if body is None:
        raise ValueError("orbitmq sink: a row has a null body")
    t = topic or opts.topic
    if not t:
        raise ValueError("orbitmq sink: a row has a null topic and no topic option is set")
    p: dict[str, str] = {}
    if props:
        items = props.items() if isinstance(props, dict) else props
        for k, v in items:
            if v is not None and k not in _SKIP_PROPS:
                p[str(k)] = str(v)
    if uniq is not None:
        p[Prop.UNIQ_KEY] = uniq
    m = Message(t, _to_bytes(body), p)
    if key:
        m.properties[Prop.KEYS] = str(key)
    if tags:
        m.properties[Prop.TAGS] = str(tags)
    return m


class _Sender:
    """Groups messages per topic into batches (count and byte caps) and ships them in waves."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.client = client_for(opts.namesrv)
        self.open: dict[str, tuple[list[Message], int]] = {}
        self.ready: list[list[Message]] = []
        self.sent = 0

    def add(self, m: Message) -> None:
        msgs, size = self.open.get(m.topic, ([], 0))
        if msgs and (len(msgs) >= self.opts.batch_size or size + len(m.body) > self.opts.batch_bytes):
            self.ready.append(msgs)
            msgs, size = [], 0
        msgs.append(m)
        self.open[m.topic] = (msgs, size + len(m.body) + 64)
        if len(self.ready) >= self.opts.in_flight * 4:
            self.flush_ready()

    def flush_ready(self) -> None:
        if self.ready:
            batches, self.ready = self.ready, []
            self.client.send_batches(batches, self.opts.group, self.opts.in_flight)
            self.sent += sum(len(b) for b in batches)

    def finish(self) -> int:
        self.ready.extend(msgs for msgs, _ in self.open.values() if msgs)
        self.open.clear()
        self.flush_ready()
        return self.sent


def write_arrow(opts: WriteOptions, batches: Iterable[pa.RecordBatch], prefix: str) -> int:
    sender = _Sender(opts)
    row = 0
    for rb in batches:
        names = rb.schema.names
        n = rb.num_rows
        cols = [rb.column(names.index(c)).to_pylist() if c in names else [None] * n for c in COLUMNS]
        for body, key, tags, props, topic in zip(*cols, strict=True):
            sender.add(make_message(opts, body, key, tags, props, topic, row_key(prefix, row)))
            row += 1
    return sender.finish()


def write_rows(opts: WriteOptions, schema: StructType, rows: Iterator[Row], prefix: str) -> int:
    names = schema.fieldNames()
    idx = [names.index(c) if c in names else -1 for c in COLUMNS]
    sender = _Sender(opts)
    for n, row in enumerate(rows):
        v = [row[i] if i >= 0 else None for i in idx]
        sender.add(make_message(opts, *v, uniq=row_key(prefix, n)))
    return sender.finish()


class OrbitMQBatchWriter(DataSourceArrowWriter):
    """Created on the driver once per write job: its write id is the same in every attempt of a task."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = WriteOptions.of(CaseInsensitiveDict(options), schema)
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return SentCount(write_arrow(self.opts, iterator, task_prefix(self.write_id)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.messages for m in messages if isinstance(m, SentCount))
        log.info("orbitmq sink wrote %d messages", total)


class OrbitMQStreamWriter(DataSourceStreamWriter):
    """A retried task or a re-run micro-batch sends its rows again with the same UNIQ_KEYs (query id, batch id,
    partition, row position): the broker stores them once within its de-duplication window."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.schema = schema
        self.opts = WriteOptions.of(CaseInsensitiveDict(options), schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return SentCount(write_rows(self.opts, self.schema, iterator, task_prefix(None)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.messages for m in messages if isinstance(m, SentCount))
        log.info("orbitmq sink batch %d wrote %d messages", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("orbitmq sink batch %d aborted; messages already sent stay in the topic (its re-run's "
                    "re-sends are de-duplicated by the broker within its window)", batchId)
