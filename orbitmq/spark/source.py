"""The `orbitmq` PySpark data source (Python Data Source API, pyspark >= 4.0): batch reader, micro-batch stream
reader (offsets per broker/queue in Spark's checkpoint, committed back to a consumer group); the DataSource class
is in datasource.py, the writers in sink.py. Executors pull with the SDK through sync.SyncClient and hand Arrow
record batches to Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python stream readers
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    _MIXINS: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # pyspark 4.0/4.1: latestOffset() without arguments, the reader tracks its position itself
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    _MIXINS = ()

from orbitmq.client import MessageExt, MessageQueue, PullResult, PullStatus
from orbitmq.model import Prop
from orbitmq.spark import offsets as ofs
from orbitmq.spark.datasource import SCHEMA, OrbitMQDataSource  # noqa: F401 - where they were before
from orbitmq.spark.sync import DEFAULT_GROUP, SyncClient, client_for

log = logging.getLogger("orbitmq.spark")

_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("key", pa.string()), ("body", pa.binary()), ("topic", pa.string()), ("brokerName", pa.string()),
    ("queueId", pa.int32()), ("queueOffset", pa.int64()), ("msgId", pa.string()), ("tags", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())), ("bornTimestamp", _TS), ("storeTimestamp", _TS),
    ("reconsumeTimes", pa.int32()),
])
_HIDDEN_PROPS = frozenset({Prop.MIN_OFFSET, Prop.MAX_OFFSET})
_TRUE = ("true", "1", "yes")


class DataLossError(RuntimeError):
    """Offsets the query needs are no longer on the broker (retention) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: str
    topic: str
    expression: str
    group: str
    pull_batch: int
    parallel_pulls: int
    arrow_batch: int
    fail_on_data_loss: bool

    @staticmethod
    def of(options: dict[str, str]) -> ReadOptions:
        namesrv = options.get("nameServer") or options.get("namesrvAddr")
        topic = options.get("topic")
        if not namesrv or not topic:
            raise ValueError("orbitmq source needs the options nameServer and topic")
        return ReadOptions(
            namesrv=namesrv, topic=topic, expression=options.get("tags", "*") or "*",
            group=options.get("readerGroup", DEFAULT_GROUP),
            pull_batch=int(options.get("pullBatchSize", "32")),
            parallel_pulls=int(options.get("pullParallelism", "4")),
            arrow_batch=int(options.get("arrowBatchSize", "4096")),
            fail_on_data_loss=options.get("failOnDataLoss", "true").lower() in _TRUE)


class QueueRange(InputPartition):
    """Offsets [start, end) of one queue; `fresh` when the queue was new to the stream (its start is a guess)."""

    def __init__(self, broker: str, queue_id: int, start: int, end: int, fresh: bool = False) -> None:
        super().__init__((broker, queue_id, start, end))
        self.broker, self.queue_id, self.start, self.end, self.fresh = broker, queue_id, start, end, fresh


# ---- executor side ---------------------------------------------------------------------------------------------
class _Columns:
    __slots__ = ("keys", "bodies", "qids", "offs", "ids", "tags", "props", "born", "store", "recon", "n")

    def __init__(self) -> None:
        self.keys: list[str | None] = []
        self.bodies: list[bytes] = []
        self.qids: list[int] = []
        self.offs: list[int] = []
        self.ids: list[str] = []
        self.tags: list[str | None] = []
        self.props: list[list[tuple[str, str]]] = []
        self.born: list[int] = []
        self.store: list[int] = []
        self.recon: list[int] = []
        self.n = 0

    def add(self, m: MessageExt) -> None:
        p = m.properties
        self.keys.append(p.get(Prop.KEYS))
        self.bodies.append(m.body)
        self.qids.append(m.queue_id)
        self.offs.append(m.queue_offset)
        self.ids.append(m.msg_id)
        self.tags.append(p.get(Prop.TAGS))
        self.props.append([(k, v) for k, v in p.items() if k not in _HIDDEN_PROPS])
        self.born.append(m.born_timestamp * 1000)
        self.store.append(m.store_timestamp * 1000)
        self.recon.append(m.reconsume_times)
        self.n += 1

    def batch(self, schema: pa.Schema, topic: str, broker: str) -> pa.RecordBatch:
        n = self.n
        f = schema.field
        arrays = [
            pa.array(self.keys, f("key").type), pa.array(self.bodies, f("body").type),
            pa.array([topic] * n, f("topic").type), pa.array([broker] * n, f("brokerName").type),
            pa.array(self.qids, f("queueId").type), pa.array(self.offs, f("queueOffset").type),
            pa.array(self.ids, f("msgId").type), pa.array(self.tags, f("tags").type),
            pa.array(self.props, f("properties").type), pa.array(self.born, f("bornTimestamp").type),
            pa.array(self.store, f("storeTimestamp").type), pa.array(self.recon, f("reconsumeTimes").type),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _lost(opts: ReadOptions, part: QueueRange, want: int, got: int, why: str) -> None:
    msg = (f"OrbitMQ data loss on topic {opts.topic} broker {part.broker} queue {part.queue_id}: offsets "
           f"[{want}, {got}) are no longer available ({why}); they were probably deleted by retention. Set "
           f"failOnDataLoss=false to skip them.")
    if opts.fail_on_data_loss:
        raise DataLossError(msg)
    log.warning("%s Skipping.", msg)


def _step(opts: ReadOptions, part: QueueRange, r: PullResult, off: int, filtered: bool, cols: _Columns
          ) -> tuple[int, bool]:
    """Apply one pull result requested at `off`: rows go into cols. Returns (next offset, stop reading)."""
    end = part.end
    if r.status is PullStatus.OFFSET_ILLEGAL:
        nxt = r.next_begin_offset
        if nxt > off:  # below the queue's min offset
            if not part.fresh:
                _lost(opts, part, off, min(nxt, end), f"earliest offset is now {r.min_offset}")
            return nxt, False
        _lost(opts, part, off, end, f"queue max offset is {r.max_offset}, below the planned end")
        return off, True
    if r.status is PullStatus.NO_NEW_MSG:
        _lost(opts, part, off, end, f"queue max offset is {r.max_offset}, below the planned end")
        return off, True
    if r.status is PullStatus.NO_MATCHED_MSG:
        return (r.next_begin_offset if r.next_begin_offset > off else off + 1), False
    for m in r.msgs:
        qo = m.queue_offset
        if qo < off:
            continue
        if qo >= end:
            break
        if qo > off and not filtered and not part.fresh:
            _lost(opts, part, off, qo, "offset gap in the queue")
        cols.add(m)
        off = qo + 1
    return max(off, r.next_begin_offset), False


def read_range(opts: ReadOptions, part: QueueRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Pull [start, end) of one queue and yield Arrow batches of about opts.arrow_batch rows.

    Queue offsets are dense, so without a tag filter up to `pullParallelism` pulls for consecutive windows of
    pullBatchSize offsets are sent at once (the broker caps one pull at 32 messages); a window that does not start
    where the previous one ended (a gap, or a filter) makes the rest be re-asked from the right offset."""
    client = client_for(opts.namesrv)
    mq = MessageQueue(opts.topic, part.broker, part.queue_id)
    filtered = opts.expression.strip() not in ("", "*")
    width = 1 if filtered else max(1, opts.parallel_pulls)
    pb = max(1, opts.pull_batch)
    off, end = part.start, part.end
    cols = _Columns()
    while off < end:
        starts = [off + i * pb for i in range(width) if off + i * pb < end]
        results = client.pull_many(mq, [(st, min(pb, end - st)) for st in starts], opts.expression, opts.group)
        for st, r in zip(starts, results, strict=True):
            if st != off:
                break
            off, stop = _step(opts, part, r, off, filtered, cols)
            if stop:
                off = end
                break
        if cols.n >= opts.arrow_batch:
            yield cols.batch(schema, opts.topic, part.broker)
            cols = _Columns()
    if cols.n:
        yield cols.batch(schema, opts.topic, part.broker)


# ---- driver side: planning ---------------------------------------------------------------------------------------
def first_offset_at(client: SyncClient, opts: ReadOptions, mq: MessageQueue, ts: int, lo: int, hi: int) -> int:
    """The first queue offset in [lo, hi] whose store timestamp is >= ts (hi when none). The broker's
    SEARCH_OFFSET_BY_TIMESTAMP answer is a nearest-match hint; neighbouring messages are read to make it exact."""
    if lo >= hi:
        return hi
    o = max(lo, min(client.search_offset(mq, ts, opts.group), hi))
    step = 32
    while o > lo:  # walk back while the previous message is already at/after ts
        s = max(lo, o - step)
        msgs = [m for m in client.pull(mq, s, o - s, "*", opts.group).msgs if s <= m.queue_offset < o]
        if not msgs or msgs[-1].store_timestamp < ts:
            break
        first = next(m for m in msgs if m.store_timestamp >= ts)
        o = first.queue_offset
        if first is not msgs[0] or o == lo:
            break
    while o < hi:  # walk forward past messages stored before ts
        r = client.pull(mq, o, min(step, hi - o), "*", opts.group)
        msgs = [m for m in r.msgs if o <= m.queue_offset < hi]
        if not msgs:
            return o if r.status is PullStatus.FOUND else hi
        hit = next((m for m in msgs if m.store_timestamp >= ts), None)
        if hit is not None:
            return hit.queue_offset
        o = msgs[-1].queue_offset + 1
    return min(o, hi)


def _bounds(client: SyncClient, opts: ReadOptions) -> dict[tuple[str, int], tuple[MessageQueue, int, int]]:
    mqs = client.queues(opts.topic, opts.group)
    return {ofs.mq_key(mq): (mq, lo, hi) for mq, (lo, hi) in client.offset_bounds(mqs, opts.group).items()}


def plan_offsets(client: SyncClient, opts: ReadOptions, options: dict[str, str], which: str,
                 bounds: dict[tuple[str, int], tuple[MessageQueue, int, int]], default: str) -> ofs.OffsetMap:
    """Concrete offsets from <which>Offsets / <which>Timestamp options (which = 'starting' or 'ending')."""
    ts_opt = options.get(f"{which}Timestamp")
    out: ofs.OffsetMap = {}
    if ts_opt is not None:
        ts = int(ts_opt)
        for key, (mq, lo, hi) in bounds.items():
            out[key] = first_offset_at(client, opts, mq, ts, lo, hi)
        return out
    spec = ofs.parse_offsets_option(options.get(f"{which}Offsets"), default)
    for key, (_, lo, hi) in bounds.items():
        out[key] = ofs.resolve(spec, key, (lo, hi), default)
    return out


class OrbitMQBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = CaseInsensitiveDict(options)
        self.opts = ReadOptions.of(self.options)
        self.schema = schema
        self.max_per_partition = int(self.options.get("maxRecordsPerPartition", "100000"))

    def partitions(self) -> list[InputPartition]:
        client = client_for(self.opts.namesrv)
        bounds = _bounds(client, self.opts)
        starts = plan_offsets(client, self.opts, self.options, "starting", bounds, "earliest")
        ends = plan_offsets(client, self.opts, self.options, "ending", bounds, "latest")
        ranges = ofs.split_ranges(starts, ends, self.max_per_partition)
        parts: list[InputPartition] = [QueueRange(r.broker, r.queue_id, r.start, r.end) for r in ranges]
        return parts or [QueueRange("", -1, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        if partition.start >= partition.end:
            return iter(())
        return read_range(self.opts, partition, ARROW_SCHEMA)


class OrbitMQStreamReader(DataSourceStreamReader, *_MIXINS):  # type: ignore[misc]
    """Micro-batch reader. Offsets live in Spark's checkpoint; commit() mirrors them to the broker under
    `consumerGroup` (unless commitOffsetsToBroker=false) so consumerProgress shows the query's lag.

    maxMessagesPerTrigger is enforced by latestOffset's own planning (offsets.cap_offsets). With pyspark >= 4.2
    Spark passes the batch start and a ReadLimit (ReadAllAvailable for Trigger.Once) and calls
    prepareForTriggerAvailableNow; with 4.0/4.1 latestOffset() gets no arguments and the reader continues from the
    newest end offset it has seen (initialOffset, partitions(), or Spark's restore call partitions(X, X))."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = CaseInsensitiveDict(options)
        self.opts = ReadOptions.of(self.options)
        self.schema = schema
        limit = self.options.get("maxMessagesPerTrigger")
        self.limit = int(limit) if limit else None
        self.max_per_partition = int(self.options.get("maxRecordsPerPartition", "100000"))
        self.group = self.options.get("consumerGroup") or f"spark-{self.opts.topic}"
        self.commit_to_broker = self.options.get("commitOffsetsToBroker", "true").lower() in _TRUE
        self._initial: ofs.OffsetMap | None = None
        self._last: ofs.OffsetMap | None = None  # end of the newest batch Spark planned/restored
        self._target: ofs.OffsetMap | None = None  # Trigger.AvailableNow: never read past these offsets
        self._committed: ofs.OffsetMap | None = None  # last offsets mirrored to the broker
        self._planned = False  # a batch was planned or run by this reader: the next plan is not the query's first

    def _client(self) -> SyncClient:
        return client_for(self.opts.namesrv)

    def _initial_offsets(self) -> ofs.OffsetMap:
        if self._initial is None:
            client = self._client()
            self._initial = plan_offsets(client, self.opts, self.options, "starting", _bounds(client, self.opts),
                                         "latest")
        return self._initial

    def initialOffset(self) -> dict[str, Any]:
        init = self._initial_offsets()
        if self._last is None:
            self._last = dict(init)
        return ofs.to_json_obj(init)

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.limit) if self.limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: hi for key, (_, _, hi) in _bounds(self._client(), self.opts).items()}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        bounds = _bounds(self._client(), self.opts)  # fresh route: new queues and brokers show up here
        if start is not None:
            base = ofs.from_json_obj(start)
            # Spark asks for the next batch only once the batch ending at `start` is in the commit log; mirroring
            # it now also covers the last batch of Trigger.AvailableNow, which never gets a commit() call
            self._commit_to_broker(base)
            max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        else:
            base = dict(self._last) if self._last is not None else dict(self._initial_offsets())
            max_rows = self.limit
        # the first batch of the query (planned from the offsets initialOffset resolved): its end carries them, so
        # they are in the checkpoint's offset log before the batch runs (see partitions)
        first = (not self._planned and self._initial is not None and base == self._initial
                 and ofs.carried_start(start) is None)
        self._planned = True
        planned_from = dict(base)
        for key, (_, lo, _) in bounds.items():
            base.setdefault(key, lo)  # a queue new to the stream is read from its earliest offset
        latest = {key: hi for key, (_, _, hi) in bounds.items()}
        if self._target is not None:
            latest = {key: min(hi, self._target.get(key, base[key])) for key, hi in latest.items()}
        end = ofs.cap_offsets(base, latest, max_rows)
        self._last = end
        if first:
            return ofs.with_start(end, planned_from)
        if start is not None and end == ofs.from_json_obj(start):
            return start  # nothing new: the same offsets (Spark runs no batch), even when they carry a start
        return ofs.to_json_obj(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        e = ofs.from_json_obj(end)
        # a first batch re-run after a restart (it never committed): Spark passes a freshly resolved
        # initialOffset() as its start; the start it was planned from is the one its end offsets carry
        carried = ofs.carried_start(end)
        s = carried if carried is not None else ofs.from_json_obj(start)
        self._last = dict(e)
        self._planned = True
        parts: list[InputPartition] = []
        for r in ofs.split_ranges(s, e, self.max_per_partition):
            parts.append(QueueRange(r.broker, r.queue_id, r.start, r.end, fresh=(r.broker, r.queue_id) not in s))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return read_range(self.opts, partition, ARROW_SCHEMA)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_broker(ofs.from_json_obj(end))

    def _commit_to_broker(self, offsets: ofs.OffsetMap) -> None:
        if not self.commit_to_broker or not offsets or offsets == self._committed:
            return
        table = {MessageQueue(self.opts.topic, b, q): off for (b, q), off in offsets.items()}
        try:
            self._client().commit_offsets(self.group, table)
            self._committed = dict(offsets)
        except Exception as exc:  # noqa: BLE001 - the checkpoint is the source of truth; lag display can lag
            log.warning("committing offsets of %s to consumer group %s failed: %s", self.opts.topic, self.group, exc)

    def stop(self) -> None:
        pass
