"""Producer de-duplication (an OrbitMQ extension): a SendHook remembering recent UNIQ_KEYs per producer group with
their original send result, so a send retried after a lost response is answered with that result instead of being
stored twice. Persisted as an append-only journal (config/dedup/, see dedup_journal.py) plus a CommitLog tail scan
on start.

Batches are answered from memory only when every message of the batch was seen (otherwise stored again).
Why and formats: docs/design/filter-dedup.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import orjson

from orbitmq.base.errors import OrbitMQError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.dedup_journal import DedupJournal
from orbitmq.model.properties import Prop
from orbitmq.protocol import RemotingCommand, ResponseCode
from orbitmq.store import PutStatus

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
HITS_COUNTER = "dedupHits"
SNAPSHOT_SLICE = 1000  # entries encoded between two yields to the event loop
_SKIP_PREFIXES = ("%RETRY%", "%DLQ%")
_SKIP_TOPICS = frozenset({"RMQ_SYS_TRANS_OP_HALF_TOPIC"})
_STORED = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                     PutStatus.SLAVE_NOT_AVAILABLE})
_PUT_OK = PutStatus.PUT_OK
_UNIQ_KEY = Prop.UNIQ_KEY
_REAL_TOPIC = Prop.REAL_TOPIC
_OK = int(ResponseCode.SUCCESS)

# value: (producer group or None when rebuilt from the CommitLog, store time ms, offset msgId, queueId, queueOffset)
Entry = tuple[str | None, int, str, int, int]


class DedupTable:
    """UNIQ_KEY -> Entry, oldest first; entries older than the window or beyond max_entries are evicted.

    `entries` is a plain dict (insertion order = age order: a re-put key moves to the young end) and `order` the
    keys in insertion order from `head` on, so that eviction and the journal walk the table by list position. The
    journal reads it in slices between yields to the event loop: copying a 200k-entry OrderedDict at once stalled
    the loop for ~100 ms (paced-send p99 spikes). A re-put key appears more than once in `order`; `dups` counts its
    older (stale) positions, which eviction skips. Positions are absolute (`base` is the position of order[0]):
    `position` is where the next put goes, `evicted_position` where the live part starts.
    """

    def __init__(self, window_ms: int, max_entries: int) -> None:
        self.window_ms = window_ms
        self.max_entries = max_entries
        self.entries: dict[str, Entry] = {}
        self.order: list[str] = []
        self.head = 0  # order[:head] is evicted
        self.base = 0  # absolute position of order[0] (the log is compacted by dropping its evicted prefix)
        self.dups: dict[str, int] = {}  # key -> stale positions of it still in order[head:]

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def position(self) -> int:
        return self.base + len(self.order)

    @property
    def evicted_position(self) -> int:
        return self.base + self.head

    def clear(self) -> None:
        self.entries = {}
        self.order = []
        self.head = 0
        self.base = 0
        self.dups = {}

    def find(self, group: str, key: str, now: int) -> Entry | None:
        e = self.entries.get(key)
        if e is None or now - e[1] > self.window_ms:
            return None
        if e[0] is not None and e[0] != group:
            return None
        return e

    def put(self, key: str, entry: Entry, *, keep_existing: bool = False) -> None:
        entries = self.entries
        if key in entries:
            if keep_existing:
                return
            del entries[key]  # re-insert at the young end
            self.dups[key] = self.dups.get(key, 0) + 1
        entries[key] = entry
        self.order.append(key)

    def evict(self, now: int) -> None:
        entries = self.entries
        order = self.order
        head = self.head
        limit = now - self.window_ms
        end = len(order)
        dups = self.dups
        while head < end:
            key = order[head]
            if dups and key in dups:  # an older position of a re-put key: skip it
                n = dups.pop(key)
                if n > 1:
                    dups[key] = n - 1
            else:
                e = entries.get(key)
                if e is not None:
                    if e[1] >= limit and len(entries) <= self.max_entries:
                        break
                    del entries[key]
            head += 1
        if head > 4096 and head * 2 > end:  # compact: a new list, so a snapshot holding the old one stays valid
            self.order = order[head:]
            self.base += head
            head = 0
        self.head = head

    def slices(self, start: int, end: int, size: int) -> Iterator[list[str]]:
        """The keys at absolute positions [start, end) that are not evicted yet, oldest first, `size` at a time (the
        log as it is now: a compaction meanwhile replaces the list, not this one). Callers look each key up
        again: it may have been evicted or re-put meanwhile."""
        order, base = self.order, self.base
        lo, hi = max(start - base, self.head), min(end - base, len(order))
        for i in range(lo, hi, size):
            yield order[i : min(i + size, hi)]

    # ---- snapshot ----
    def to_json(self, phys_offset: int) -> bytes:
        return orjson.dumps({"version": SNAPSHOT_VERSION, "physOffset": phys_offset,
                             "entries": [[k, *v] for k, v in self.entries.items()]})

    def load_json(self, data: bytes, now: int) -> int:
        """Load a snapshot (expired entries skipped); returns the CommitLog offset it covers."""
        obj = orjson.loads(data)
        if not isinstance(obj, dict) or obj.get("version") != SNAPSHOT_VERSION:
            raise ValueError("not a dedup snapshot")
        limit = now - self.window_ms
        for k, group, ts, msg_id, qid, qoff in obj["entries"]:
            if ts >= limit:
                self.put(str(k), (group, int(ts), str(msg_id), int(qid), int(qoff)))
        return int(obj["physOffset"])


def _dedupable(topic: str, props: dict[str, str], reconsume_times: int) -> bool:
    """Consumer retries (same UNIQ_KEY on purpose) and system bookkeeping are never de-duplicated."""
    if reconsume_times > 0 or topic.startswith(_SKIP_PREFIXES) or topic in _SKIP_TOPICS:
        return False
    real = props.get(Prop.REAL_TOPIC)
    return real is None or not real.startswith(_SKIP_PREFIXES)


def _response_queue_id(props: dict[str, str], queue_id: int) -> int:
    """The queue the producer asked for (delay / half messages are stored elsewhere with REAL_QID)."""
    real = props.get(Prop.REAL_QID)
    if real is not None and Prop.REAL_TOPIC in props:
        try:
            return int(real)
        except ValueError:
            pass
    return queue_id


class DedupService:
    name = "dedup"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.env = env
        self.table = DedupTable(cfg.dedup_window_seconds * 1000, cfg.dedup_max_entries)
        self.journal = DedupJournal(env.config_dir)
        self.snapshot_interval_s = max(1, cfg.dedup_snapshot_interval_seconds)
        self._covered = 0  # CommitLog offset the previous journal tick saw (the next line claims only this)
        self._journaled = 0  # table positions before this are in the journal
        ctx.stats.counters.setdefault(HITS_COUNTER, 0)

    # ---- SendHook ----
    def before_put(self, conn: Any, req: RemotingCommand, msgs: list[Any]) -> RemotingCommand | None:
        if len(msgs) == 1:  # hot path: a single send whose key was never seen needs no more lookups
            key = msgs[0].properties.get(Prop.UNIQ_KEY)
            if key is None or key not in self.table.entries:
                return None
        ext = req.ext_fields or {}
        group = ext.get("producerGroup") or ext.get("a") or ""
        now = self.env.clock.now_ms()
        found: list[Entry] = []
        table = self.table
        for m in msgs:
            key = m.properties.get(Prop.UNIQ_KEY)
            if key is None:
                return None
            e = table.find(group, key, now)
            if e is None or not _dedupable(m.topic, m.properties, m.reconsume_times):
                return None
            found.append(e)
        if not found:
            return None
        counters = self.ctx.stats.counters
        counters[HITS_COUNTER] = counters.get(HITS_COUNTER, 0) + len(found)
        cfg = self.ctx.config
        resp = req.response(_OK)
        resp.ext_fields = {
            "MSG_REGION": cfg.region_id,
            "TRACE_ON": "true" if cfg.trace_on else "false",
            "msgId": ",".join(e[2] for e in found),
            "queueId": str(found[0][3]),
            "queueOffset": str(found[0][4]),
        }
        return resp

    def after_put(self, conn: Any, req: RemotingCommand, msgs: list[Any], result: Any) -> None:
        status = result.status
        if (status is not _PUT_OK and status not in _STORED) or not msgs:  # `is` first: Enum hashing is slow
            return
        ext = req.ext_fields or {}
        group = ext.get("producerGroup") or ext.get("a") or ""
        ts = result.store_timestamp or self.env.clock.now_ms()
        ids = result.msg_ids
        table = self.table
        put = table.put
        first = msgs[0]
        qid = _response_queue_id(first.properties, first.queue_id)
        queue_offset = result.queue_offset
        topic, reconsume = first.topic, first.reconsume_times
        # _dedupable's topic / reconsume part, once for the messages that share them (all of a batch)
        run_ok = reconsume <= 0 and not topic.startswith(_SKIP_PREFIXES) and topic not in _SKIP_TOPICS
        # a message without a msg id (ids shorter than msgs) is not remembered
        for i, (m, msg_id) in enumerate(zip(msgs, ids, strict=False)):
            props = m.properties
            key = props.get(_UNIQ_KEY)
            if key is None:
                continue
            if m.topic == topic and m.reconsume_times == reconsume:
                if not run_ok:
                    continue
                real = props.get(_REAL_TOPIC)
                if real is not None and real.startswith(_SKIP_PREFIXES):
                    continue
            elif not _dedupable(m.topic, props, m.reconsume_times):
                continue
            put(key, (group, ts, msg_id, qid, queue_offset + i))
        table.evict(ts)

    # ---- recovery ----
    def rebuild(self) -> int:
        """Journal + CommitLog tail scan, then a new journal generation holding the result; returns how many
        records the scan read."""
        now = self.env.clock.now_ms()
        start = -1
        bad = 0
        for line in self.journal.read():
            try:
                start = max(start, self.table.load_json(line, now))
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                bad += 1  # torn by a crash mid-append, or damaged: its entries are lost to dedup, nothing else
        if bad:
            log.warning("dedup journal in %s: %d unreadable line(s) skipped (a retry of their sends would be "
                        "stored again)", self.journal.dir, bad)
        store = self.ctx.store
        if start < 0:
            start = self._window_start(now)
        start = max(start, store.min_phys_offset)
        scanned = self._scan(start, store.confirm_offset, now)
        table = self.table
        table.evict(now)
        self._covered = store.confirm_offset
        try:
            self.journal.start_generation(table.to_json(self._covered), table.evicted_position, len(table))
            self._journaled = table.position
        except OSError:
            log.exception("dedup journal: cannot write %s (the next tick retries the whole table)", self.journal.dir)
            self._journaled = table.evicted_position
        return scanned

    def _segment_size(self) -> int:
        return max(1, int(self.env.store_config.mapped_file_size_commitlog))

    def _window_start(self, now: int) -> int:
        """No snapshot: the start of the last CommitLog segment whose first record is older than the window."""
        store = self.ctx.store
        seg = self._segment_size()
        pos = store.min_phys_offset - store.min_phys_offset % seg
        best = store.min_phys_offset
        limit = now - self.table.window_ms
        while pos < store.confirm_offset:
            msg = store.look_message_by_offset(max(pos, store.min_phys_offset))
            if msg is not None and msg.store_timestamp > limit:
                break
            best = max(pos, store.min_phys_offset)
            pos += seg
        return best

    def _scan(self, start: int, end: int, now: int) -> int:
        store = self.ctx.store
        seg = self._segment_size()
        limit = now - self.table.window_ms
        phys = start
        count = 0
        table = self.table
        while phys < end:
            try:
                msg = store.look_message_by_offset(phys)
            except OrbitMQError:
                msg = None
            if msg is None or msg.store_size <= 0:  # end-of-segment filler: continue in the next segment
                phys = phys - phys % seg + seg
                continue
            count += 1
            phys += msg.store_size
            key = msg.properties.get(Prop.UNIQ_KEY)
            if key is None or msg.store_timestamp < limit:
                continue
            if not _dedupable(msg.topic, msg.properties, msg.reconsume_times):
                continue
            qid = _response_queue_id(msg.properties, msg.queue_id)
            # the first record of a key is the original send (a delayed message re-delivered later keeps it)
            table.put(key, (None, msg.store_timestamp, msg.offset_msg_id, qid, msg.queue_offset),
                      keep_existing=True)
        return count

    # ---- journal ----
    def _encode_new_rows(self, start: int, end: int, parts: list[bytes], counts: list[int]) -> Iterator[None]:
        """Encode the live entries of positions [start, end) into `parts` (JSON array items, no brackets), one
        slice of SNAPSHOT_SLICE positions per step; the caller may yield to the event loop between steps."""
        table = self.table
        seen: set[str] = set()  # a key re-put during the walk: written once, with its current entry
        for keys in table.slices(start, end, SNAPSHOT_SLICE):
            entries = table.entries  # looked up per slice: evictions and re-puts happen between slices
            rows = [[k, *e] for k in keys if (e := entries.get(k)) is not None and k not in seen]
            seen.update(keys)
            if rows:
                parts.append(orjson.dumps(rows)[1:-1])
                counts.append(len(rows))
            yield

    def _begin_tick(self) -> tuple[int, int, int] | None:
        """(covered offset, first position, end position) of the next journal line, or None if nothing is new.
        The line claims only the offset seen one tick ago: sends still waiting for a flush then are re-scanned."""
        table = self.table
        table.evict(self.env.clock.now_ms())
        if table.position <= self._journaled:
            return None
        covered, self._covered = self._covered, self.ctx.store.confirm_offset
        return covered, max(self._journaled, table.evicted_position), table.position

    @staticmethod
    def _line(covered: int, parts: list[bytes]) -> bytes:
        return b'{"version":%d,"physOffset":%d,"entries":[%b]}' % (SNAPSHOT_VERSION, covered, b",".join(parts))

    async def snapshot(self) -> None:
        """Periodic journal tick: the entries added since the previous tick, encoded in slices with a yield
        between them, appended as one line from a worker thread. Its cost follows the send rate, not the table
        size (whole-table snapshots cost ~0.3 s of loop CPU every interval at 200k entries)."""
        tick = self._begin_tick()
        if tick is None:
            return
        covered, start, end = tick
        parts: list[bytes] = []
        counts: list[int] = []
        for _ in self._encode_new_rows(start, end, parts, counts):
            await asyncio.sleep(0)
        self._journaled = end
        if not parts:
            return  # all evicted meanwhile
        try:
            await asyncio.to_thread(self.journal.append, self._line(covered, parts), start, sum(counts),
                                    self.table.evicted_position)
        except OSError:
            log.exception("dedup journal append failed (the next tick writes these entries again)")
            self._journaled = min(self._journaled, start)

    # ---- BrokerService ----
    def handlers(self) -> dict[int, Any]:
        return {}

    async def start(self) -> None:
        scanned = self.rebuild()
        log.info("dedup: %d keys remembered (%d CommitLog records scanned)", len(self.table), scanned)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.snapshot_interval_s)
            await self.snapshot()

    async def stop(self) -> None:
        """The last journal line, synchronously: it claims everything confirmed so far."""
        self._covered = self.ctx.store.confirm_offset
        tick = self._begin_tick()
        if tick is None:
            return
        covered, start, end = tick
        parts: list[bytes] = []
        counts: list[int] = []
        for _ in self._encode_new_rows(start, end, parts, counts):
            pass
        if parts:
            try:
                self.journal.append(self._line(covered, parts), start, sum(counts), self.table.evicted_position)
            except OSError:
                log.exception("dedup journal append failed at stop")
                return
        self._journaled = end


def create(ctx: BrokerContext, env: ServiceEnv) -> DedupService | None:
    if not ctx.config.dedup_enable:
        return None
    svc = DedupService(ctx, env)
    ctx.send_hooks.append(svc)
    return svc
