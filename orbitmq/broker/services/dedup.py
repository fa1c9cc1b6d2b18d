"""Producer de-duplication (an OrbitMQ extension): a SendHook remembering recent (UNIQ_KEY, topic) pairs per producer
group with their original send result, so a send retried after a lost response is answered with that result instead
of being stored twice. Persisted as an append-only journal (config/dedup/, see dedup_journal.py) plus a CommitLog
tail scan on start; a slave learns the keys of the records it receives by replication (a dispatch listener).

Batches are answered from memory only when every message of the batch was seen (otherwise stored again).
Why and formats: docs/design/filter-dedup.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import orjson

from orbitmq.base.errors import OrbitMQError
from orbitmq.base.native import speedups
from orbitmq.broker.context import BrokerContext, after_put_each
from orbitmq.broker.services import ServiceEnv
from orbitmq.broker.services.dedup_journal import DedupJournal
from orbitmq.model.msg_id import offset_msg_id_from_host
from orbitmq.model.properties import Prop
from orbitmq.protocol import RemotingCommand, ResponseCode
from orbitmq.store import STORED_STATUSES, PutStatus
from orbitmq.store.dispatch import DispatchRequest

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 3  # rows [[table_key, encode_entry value], ...]
# earlier formats, keyed by UNIQ_KEY alone (no topic): their rows are not loaded, the start scans the CommitLog's
# window instead. 2: rows [[uniqKey, encode_entry value], ...]; 1: the whole-table dedup.json,
# entries [[uniqKey, group, ts, msgId, qid, qoff], ...]
OLD_VERSIONS = frozenset({1, 2})
HITS_COUNTER = "dedupHits"
SNAPSHOT_SLICE = 1000  # entries encoded between two yields to the event loop
_SKIP_PREFIXES = ("%RETRY%", "%DLQ%")
_SKIP_TOPICS = frozenset({"RMQ_SYS_TRANS_OP_HALF_TOPIC"})
_PUT_OK = PutStatus.PUT_OK
_UNIQ_KEY = Prop.UNIQ_KEY
_REAL_TOPIC = Prop.REAL_TOPIC
_OK = int(ResponseCode.SUCCESS)
# the answer of a retry whose original waited: the original's stored status as the send handler maps it
_WAIT_CODES = {PutStatus.FLUSH_DISK_TIMEOUT: int(ResponseCode.FLUSH_DISK_TIMEOUT),
               PutStatus.FLUSH_SLAVE_TIMEOUT: int(ResponseCode.FLUSH_SLAVE_TIMEOUT),
               PutStatus.SLAVE_NOT_AVAILABLE: int(ResponseCode.SLAVE_NOT_AVAILABLE)}

# an entry as callers see it: (producer group or None when rebuilt from the CommitLog, store time ms, offset msgId,
# queueId, queueOffset)
Entry = tuple[str | None, int, str, int, int]
SEP = "\x1f"  # field separator of a stored entry and of a table key (not in group names, topics, msg ids or numbers)
LAZY_ID = "@"  # msgId field "@<physOffset>": a replicated record's offset msgId, resolved from the CommitLog on a hit
CHUNK = 1024  # order-log positions per frozen chunk
_native = speedups()
_remember = _native.dedup_remember if _native is not None else None
_DedupMap = _native.DedupMap if _native is not None else None


def encode_entry(group: str | None, ts: int, msg_id: str, queue_id: int, queue_offset: int) -> str:
    """An entry as the table stores it: one str "ts SEP queueId SEP queueOffset SEP msgId [SEP group]" (no group
    field: None, which matches any group). A str, not a tuple, so that the table's dict holds no GC-tracked object."""
    head = f"{ts}{SEP}{queue_id}{SEP}{queue_offset}{SEP}{msg_id}"
    return head if group is None else f"{head}{SEP}{group}"


def table_key(uniq_key: str, topic: str, props: dict[str, str]) -> str:
    """The table's key of a message: its UNIQ_KEY and the topic the producer sent it to (REAL_TOPIC of a delayed or
    half message, which is stored under a system topic)."""
    return f"{uniq_key}{SEP}{props.get(_REAL_TOPIC) or topic}"


def decode_entry(value: str) -> Entry:
    f = value.split(SEP, 4)
    return (f[4] if len(f) == 5 else None, int(f[0]), f[3], int(f[1]), int(f[2]))


def _entry_ts(value: str) -> int:
    return int(value[: value.index(SEP)])


class PyDedupMap:
    """The de-dup table's map in Python (the twin of the native `DedupMap`, orbitmq/base/_dedupmap.c, which the
    table uses when the extension is built): str key -> str entry (encode_entry, its store time first) in age order,
    with absolute positions, one per put.

    Built to be invisible to Python's cyclic GC, which otherwise walked the whole table in every full collection
    (30–60 ms stalls of the event loop with 200k entries): `_entries` maps str to str, so the dict is never
    GC-tracked, and the order log is a list of frozen tuples of CHUNK keys (tuples of str are untracked by the first
    collection that sees them) plus one short `tail` list.

    `_entries`' insertion order is age order (a re-put key moves to the young end); the order log holds the keys in
    insertion order, so that eviction and the journal walk the map by position. A re-put (or deleted) key appears
    more than once in the log; `dups` counts its stale positions, which eviction skips, and `live_at` holds the
    live position of such a key. Positions are absolute: `base` is the position of chunks[0][0] (whole chunks below
    `head` are dropped), `head` the first one not evicted, `position` where the next put goes.
    """

    def __init__(self) -> None:
        self._entries: dict[str, str] = {}
        self.chunks: list[tuple[str, ...]] = []
        self.tail: list[str] = []
        self.base = 0
        self.head = 0
        self.dups: dict[str, int] = {}  # key -> stale positions of it still at or after head
        self.live_at: dict[str, int] = {}  # key in dups -> its live position (if it has one)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __getitem__(self, key: str) -> str:
        return self._entries[key]

    def __delitem__(self, key: str) -> None:
        del self._entries[key]
        self.dups[key] = self.dups.get(key, 0) + 1  # its live position is stale now
        self.live_at.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._entries.get(key, default)

    def keys(self) -> list[str]:
        return list(self._entries)

    def items(self) -> list[tuple[str, str]]:
        return list(self._entries.items())

    @property
    def position(self) -> int:
        return self.base + len(self.chunks) * CHUNK + len(self.tail)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def put(self, key: str, entry: str, *, keep_existing: bool = False) -> None:
        """Remember `entry` for `key` at the young end (an existing key moves there unless keep_existing)."""
        _entry_ts(entry)  # as the native map: an entry without a store time is refused (ValueError)
        entries = self._entries
        if key in entries:
            if keep_existing:
                return
            del entries[key]
            self.dups[key] = self.dups.get(key, 0) + 1
        if key in self.dups:
            self.live_at[key] = self.position
        entries[key] = entry
        tail = self.tail
        tail.append(key)
        if len(tail) >= CHUNK:
            self.chunks.append(tuple(tail))
            self.tail = []

    def _key_at(self, pos: int, frozen_end: int) -> str:
        return self.chunks[(pos - self.base) // CHUNK][(pos - self.base) % CHUNK] if pos < frozen_end \
            else self.tail[pos - frozen_end]

    def evict(self, limit: int, max_entries: int) -> int | None:
        """Drop entries from the old end while there are more than max_entries or the oldest is older than `limit`;
        returns the store time of the oldest kept, or None when none is left."""
        entries, dups = self._entries, self.dups
        base = self.base
        frozen_end = base + len(self.chunks) * CHUNK
        pos, end = self.head, frozen_end + len(self.tail)
        kept = None
        while pos < end:
            key = self._key_at(pos, frozen_end)
            if dups and key in dups:  # a stale position of a re-put key: skip it
                n = dups.pop(key)
                if n > 1:
                    dups[key] = n - 1
                else:
                    self.live_at.pop(key, None)
            else:
                v = entries.get(key)
                if v is not None:
                    if len(entries) <= max_entries and (ts := _entry_ts(v)) >= limit:
                        kept = ts
                        break
                    del entries[key]
            pos += 1
        self.head = pos
        drop = (pos - base) // CHUNK
        if drop >= 16:
            self.chunks = self.chunks[drop:]
            self.base = base + drop * CHUNK
        return kept

    def rows(self, start: int, end: int) -> list[tuple[str, str]]:
        """(key, entry) of each live position in [start, end), oldest first."""
        entries, live_at = self._entries, self.live_at
        frozen_end = self.base + len(self.chunks) * CHUNK
        out = []
        for p in range(max(start, self.head), min(end, self.position)):
            key = self._key_at(p, frozen_end)
            if key in self.dups and live_at.get(key) != p:
                continue
            v = entries.get(key)
            if v is not None:
                out.append((key, v))
        return out


class DedupTable:
    """UNIQ_KEY and topic -> entry, oldest first; entries older than the window or beyond max_entries are evicted.

    `entries` is the native `DedupMap` (records in one arena, an open-addressing index: no Python object per entry,
    ≈ 230 B each against ≈ 340 in a dict of str) when the extension is built, else `PyDedupMap`; `native` forces
    one (tests)."""

    def __init__(self, window_ms: int, max_entries: int, *, native: bool | None = None) -> None:
        self.window_ms = window_ms
        self.max_entries = max_entries
        if native is None:
            native = _native is not None
        self.entries: Any = _native.DedupMap() if native else PyDedupMap()
        # store time of the entry evict() stopped at: while it is inside the window and the table not over its
        # size, evict() returns at once (entries are put in store-time order, so the others are younger)
        self._head_ts = -1

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def position(self) -> int:
        return self.entries.position

    @property
    def evicted_position(self) -> int:
        return self.entries.head

    def clear(self) -> None:
        self.entries.clear()
        self._head_ts = -1

    def get(self, key: str) -> Entry | None:
        v = self.entries.get(key)
        return None if v is None else decode_entry(v)

    def find(self, group: str, key: str, now: int) -> Entry | None:
        e = self.get(key)
        if e is None or now - e[1] > self.window_ms:
            return None
        if e[0] is not None and e[0] != group:
            return None
        return e

    def put(self, key: str, value: str, *, keep_existing: bool = False) -> None:
        """Remember `value` (an encode_entry str) for `key`, at the young end."""
        if keep_existing:
            self.entries.put(key, value, keep_existing=True)
        else:
            self.entries.put(key, value)  # positional: no keyword parsing on the send path

    def evict(self, now: int) -> None:
        entries = self.entries
        limit = now - self.window_ms
        if self._head_ts >= limit and len(entries) <= self.max_entries:
            return
        ts = entries.evict(limit, self.max_entries)
        self._head_ts = -1 if ts is None else ts

    def rows(self, start: int, end: int) -> list[tuple[str, str]]:
        """Journal rows (key, stored entry) of the live positions in [start, end): the stored str as it is, no
        decoding (decoding each entry made the first tick after a 1M-message fill hold the loop for ~2 ms per
        slice)."""
        return self.entries.rows(start, end)

    def to_json(self, phys_offset: int) -> bytes:
        return orjson.dumps({"version": SNAPSHOT_VERSION, "physOffset": phys_offset,
                             "rows": self.rows(self.evicted_position, self.position)})

    def load_json(self, data: bytes, now: int) -> int | None:
        """Load a journal line (expired entries skipped); returns the CommitLog offset it covers, or None for a line
        of an earlier format (OLD_VERSIONS: keys without the topic, not loaded). Malformed content raises
        ValueError (or KeyError/TypeError/IndexError from a damaged row)."""
        obj = orjson.loads(data)
        version = obj.get("version") if isinstance(obj, dict) else None
        limit = now - self.window_ms
        if version == SNAPSHOT_VERSION:
            for k, v in obj["rows"]:
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError("dedup row is not two strings")
                if decode_entry(v)[1] >= limit:  # decoding validates the entry
                    self.put(k, v)
        elif version in OLD_VERSIONS:
            return None
        else:
            raise ValueError("not a dedup snapshot")
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
        self.rebuild_seconds = 0.0  # the start-up rebuild's wall time (logged)
        # puts still waiting for their flush / slave (SYNC_FLUSH, SYNC_MASTER): key -> future of the final status,
        # and id(req) -> (req, future, keys) to settle them in after_put
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._appended: dict[int, tuple[Any, asyncio.Future[Any], list[str]]] = {}
        # CommitLog end when this broker last became master: every record below it came by replication, including
        # a received tail that is dispatched only after the switch (no confirm offset came from the dead master)
        self._replicated_end = 0
        # on_dispatch's gate (DispatchListeners' while_nonempty): non-empty while it may have something to learn (a
        # slave, or a new master until its dispatch passes _replicated_end); a master's own records skip the call
        self._listening: set[int] = {1} if ctx.config.is_slave else set()
        ctx.stats.counters.setdefault(HITS_COUNTER, 0)
        ctx.role_listeners.append(self._on_role)

    # ---- SendHook ----
    def before_put(self, conn: Any, req: RemotingCommand, msgs: list[Any]) -> RemotingCommand | None:
        if len(msgs) == 1:  # hot path: a single send whose key was never seen needs no more lookups
            m = msgs[0]
            props = m.properties
            uniq = props.get(_UNIQ_KEY)
            if uniq is None or f"{uniq}{SEP}{props.get(_REAL_TOPIC) or m.topic}" not in self.table.entries:
                return None
        ext = req.ext_fields or {}
        group = ext.get("producerGroup") or ext.get("a") or ""
        now = self.env.clock.now_ms()
        found: list[Entry] = []
        keys: list[str] = []
        table = self.table
        for m in msgs:
            uniq = m.properties.get(_UNIQ_KEY)
            if uniq is None:
                return None
            key = table_key(uniq, m.topic, m.properties)
            keys.append(key)
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
            "msgId": ",".join(self._resolve(e[2]) for e in found),
            "queueId": str(found[0][3]),
            "queueOffset": str(found[0][4]),
        }
        if self._waiting:
            waits = {f for k in keys if (f := self._waiting.get(k)) is not None}
            if waits:  # the original is stored but still waits for its flush / slave: answer when it is settled
                return self._answer_when_settled(resp, waits)
        return resp

    def _resolve(self, msg_id: str) -> str:
        """The offset msgId of an entry: a replicated record's ("@<physOffset>") is read from the CommitLog (the
        bytes are the master's: its store host); this broker's host if the record is gone (same offset here)."""
        if not msg_id.startswith(LAZY_ID):
            return msg_id
        phys = int(msg_id[1:])
        try:
            msg = self.ctx.store.look_message_by_offset(phys)
        except OrbitMQError:
            msg = None
        return msg.offset_msg_id if msg is not None else offset_msg_id_from_host(self.ctx.store_host, phys)

    async def _answer_when_settled(self, resp: RemotingCommand, waits: set[asyncio.Future[Any]]) -> RemotingCommand:
        """A retry of a put that is still waiting: the same answer as the original, once it has one (a retry must
        not report SEND_OK for a SYNC_FLUSH message that is not flushed yet)."""
        limit = self.env.store_config.sync_flush_timeout_ms if self.env.store_config is not None else 5000
        for fut in waits:
            try:
                status = await asyncio.wait_for(asyncio.shield(fut), (limit + 1000) / 1000)
            except TimeoutError:  # the original's wait never settled (its connection went away): stored, unconfirmed
                status = PutStatus.FLUSH_DISK_TIMEOUT
            code = _WAIT_CODES.get(status, _OK)
            if code != _OK:
                resp.code = code
        return resp

    def after_append(self, conn: Any, req: RemotingCommand, msgs: list[Any], result: Any) -> None:
        """The put is in the CommitLog and now waits for its flush or slave (the send handler calls this before
        waiting): remember its keys at once, so that a retry arriving meanwhile is not stored again; the retry is
        answered when the original settles (after_put)."""
        self.after_put(conn, req, msgs, result)
        entries = self.table.entries
        keys = [k for m in msgs if (u := m.properties.get(_UNIQ_KEY)) is not None
                and (k := table_key(u, m.topic, m.properties)) in entries]
        if keys:
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            for k in keys:
                self._waiting[k] = fut
            self._appended[id(req)] = (req, fut, keys)

    def _settle(self, req: RemotingCommand, status: Any) -> bool:
        """after_put of a put that after_append saw: wake the retries waiting for it; True if it was one."""
        entry = self._appended.get(id(req))
        if entry is None or entry[0] is not req:
            return False
        del self._appended[id(req)]
        _, fut, keys = entry
        for k in keys:
            if self._waiting.get(k) is fut:
                del self._waiting[k]
        if not fut.done():
            fut.set_result(status)
        return True

    def after_put(self, conn: Any, req: RemotingCommand, msgs: list[Any], result: Any) -> None:
        if self._appended and self._settle(req, result.status):
            return  # remembered by after_append already
        status = result.status
        if (status is not _PUT_OK and status not in STORED_STATUSES) or not msgs:  # `is` first: Enum hashing is slow
            return
        ts = result.store_timestamp or self.env.clock.now_ms()
        ids = result.msg_ids
        table = self.table
        if len(msgs) == 1:  # a single send: the loop below for one message, without its per-run set-up
            if ids:
                self._remember_single(req, msgs[0], result, ts)
            table.evict(ts)
            return
        ext = req.ext_fields or {}
        group = ext.get("producerGroup") or ext.get("a") or ""
        put = table.put
        first = msgs[0]
        qid = _response_queue_id(first.properties, first.queue_id)
        queue_offset = result.queue_offset
        head = f"{ts}{SEP}{qid}{SEP}"  # encode_entry's fields shared by the whole put
        tail = f"{SEP}{group}"
        topic, reconsume = first.topic, first.reconsume_times
        # _dedupable's topic / reconsume part, once for the messages that share them (all of a batch)
        run_ok = reconsume <= 0 and not topic.startswith(_SKIP_PREFIXES) and topic not in _SKIP_TOPICS
        # a message without a msg id (ids shorter than msgs) is not remembered
        for i, (m, msg_id) in enumerate(zip(msgs, ids, strict=False)):
            props = m.properties
            uniq = props.get(_UNIQ_KEY)
            if uniq is None:
                continue
            real = props.get(_REAL_TOPIC)
            if m.topic == topic and m.reconsume_times == reconsume:
                if not run_ok:
                    continue
                if real is not None and real.startswith(_SKIP_PREFIXES):
                    continue
            elif not _dedupable(m.topic, props, m.reconsume_times):
                continue
            # table_key and encode_entry, inlined
            put(f"{uniq}{SEP}{real or m.topic}", f"{head}{queue_offset + i}{SEP}{msg_id}{tail}")
        table.evict(ts)

    def after_put_many(self, conn: Any, items: list[tuple[RemotingCommand, list[Any], Any]]
                       ) -> list[BaseException | None] | None:
        """after_put of each (req, msgs, result) in turn (the single puts of one read, Router.many), with one
        eviction at the end instead of one per put: the same table afterwards (eviction drops the oldest entries,
        and a key is never put twice in one run: the send handler stores a repeated UNIQ_KEY in a later run).
        Returns None, or per item the exception its after_put raised (the others are remembered).
        The common item is taken by the native dedup_remember, the others by _remember_one, in order; without the
        extension after_put_many_py (the reference) does it all."""
        if self._appended:  # a put waiting for its flush is being settled: the general path, one by one
            return after_put_each(self.after_put, conn, items)
        table = self.table
        if _remember is None or type(table.entries) is not _DedupMap:
            return self.after_put_many_py(conn, items)
        errors: list[BaseException | None] | None = None
        last_ts = -1
        k, n = 0, len(items)
        while k < n:
            try:
                k, ts = _remember(items, k, table.entries, _PUT_OK, _SKIP_PREFIXES, _SKIP_TOPICS)
            except Exception as e:  # out of memory: the items from k on are reported failed (some may be remembered)
                errors = errors or [None] * n
                errors[k:] = [e] * (n - k)
                break
            if ts >= 0:
                last_ts = ts
            if k < n:
                try:
                    ts = self._remember_one(conn, *items[k])
                    if ts >= 0:
                        last_ts = ts
                except Exception as e:
                    errors = errors or [None] * n
                    errors[k] = e
                k += 1
        if last_ts >= 0:
            table.evict(last_ts)
        return errors

    def _remember_one(self, conn: Any, req: RemotingCommand, msgs: list[Any], result: Any) -> int:
        """One item of after_put_many: a stored single is remembered (no eviction) and its store time returned;
        anything else goes through after_put (which evicts itself) and gives -1."""
        if result.status is not _PUT_OK or len(msgs) != 1 or not result.msg_ids:
            self.after_put(conn, req, msgs, result)
            return -1
        ts = result.store_timestamp or self.env.clock.now_ms()
        self._remember_single(req, msgs[0], result, ts)
        return ts

    def _remember_single(self, req: RemotingCommand, m: Any, result: Any, ts: int) -> None:
        """Put the entry of stored single message `m` (result.msg_ids not empty) at store time `ts`, unless it has no
        UNIQ_KEY or de-dup skips it (a consumer retry, a system topic); no eviction."""
        props = m.properties
        uniq = props.get(_UNIQ_KEY)
        if uniq is None:
            return
        topic = m.topic
        real = props.get(_REAL_TOPIC)
        if (m.reconsume_times > 0 or topic.startswith(_SKIP_PREFIXES) or topic in _SKIP_TOPICS
                or (real is not None and real.startswith(_SKIP_PREFIXES))):
            return
        ext = req.ext_fields or {}
        group = ext.get("producerGroup") or ext.get("a") or ""
        qid = m.queue_id if real is None else _response_queue_id(props, m.queue_id)
        self.table.put(f"{uniq}{SEP}{real or topic}",
                       f"{ts}{SEP}{qid}{SEP}{result.queue_offset}{SEP}{result.msg_ids[0]}{SEP}{group}")

    def after_put_many_py(self, conn: Any, items: list[tuple[RemotingCommand, list[Any], Any]]
                          ) -> list[BaseException | None] | None:
        """after_put_many without the extension (and the reference the native loop is tested against)."""
        if self._appended:
            return after_put_each(self.after_put, conn, items)
        errors: list[BaseException | None] | None = None
        last_ts = -1
        for k, (req, msgs, result) in enumerate(items):
            try:
                ts = self._remember_one(conn, req, msgs, result)
                if ts >= 0:
                    last_ts = ts
            except Exception as e:
                if errors is None:
                    errors = [None] * len(items)
                errors[k] = e
        if last_ts >= 0:
            self.table.evict(last_ts)
        return errors

    # ---- recovery ----
    def rebuild(self) -> int:
        """Journal + CommitLog tail scan, then a new journal generation holding the result; returns how many
        records the scan read. Synchronous: start() runs it in a worker thread."""
        return self._rebuild(self.ctx.store.confirm_offset)

    def _rebuild(self, end: int) -> int:
        now = self.env.clock.now_ms()
        start = -1
        bad = 0
        old = False
        for line in self.journal.read():
            try:
                covered = self.table.load_json(line, now)
            except (ValueError, KeyError, TypeError, IndexError, orjson.JSONDecodeError):
                bad += 1  # torn by a crash mid-append, or damaged: its entries are lost to dedup, nothing else
                continue
            if covered is None:
                old = True  # an earlier format: its keys lack the topic, the CommitLog's window is scanned instead
            else:
                start = max(start, covered)
        if bad:
            log.warning("dedup journal in %s: %d unreadable line(s) skipped (a retry of their sends would be "
                        "stored again)", self.journal.dir, bad)
        store = self.ctx.store
        if start < 0 or old:
            start = self._window_start(now)
        start = max(start, store.min_phys_offset)
        log.info("dedup: rebuilding from the journal (%d keys) and a CommitLog scan of %d bytes (%d to %d)",
                 len(self.table), max(0, end - start), start, end)
        scanned = self._scan(start, end, now)
        table = self.table
        table.evict(now)
        self._covered = end
        try:
            self.journal.start_generation(table.to_json(self._covered) + b"\n", table.evicted_position, len(table))
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
            uniq = msg.properties.get(_UNIQ_KEY)
            if uniq is None or msg.store_timestamp < limit:
                continue
            if not _dedupable(msg.topic, msg.properties, msg.reconsume_times):
                continue
            qid = _response_queue_id(msg.properties, msg.queue_id)
            # the first record of a key is the original send (a delayed message re-delivered later keeps it)
            entry = encode_entry(None, msg.store_timestamp, msg.offset_msg_id, qid, msg.queue_offset)
            table.put(table_key(uniq, msg.topic, msg.properties), entry, keep_existing=True)
        return count

    # ---- replication ----
    def on_dispatch(self, req: DispatchRequest) -> None:
        """Dispatch listener: on a slave (classic HA or AutoSwitch), a record received by replication becomes
        visible; remember its key as the start-up scan would (any group, the first record of a key wins), so that
        after a failover this broker answers a retry of it; also on a new master for the records it received as a
        slave (below _replicated_end). On a master its own puts are remembered by after_put.
        The msgId is resolved from the CommitLog only on a hit (LAZY_ID): the record holds the master's host."""
        if req.phys_offset >= self._replicated_end and not self.ctx.config.is_slave:
            self._listening.clear()  # a master past what it received as a slave: nothing more to learn
            return
        uniq = req.uniq_key
        if uniq is None:
            return
        props = req.properties
        topic = req.topic
        real = props.get(_REAL_TOPIC)
        if real is None:
            qid = req.queue_id
            key = f"{uniq}{SEP}{topic}"  # table_key, inlined
        else:
            if real.startswith(_SKIP_PREFIXES):
                return
            qid = _response_queue_id(props, req.queue_id)
            key = f"{uniq}{SEP}{real or topic}"
        table = self.table
        # _dedupable with reconsume times 0 (not in the request: a consumer retry goes to a %RETRY% topic anyway)
        if key in table.entries or topic.startswith(_SKIP_PREFIXES) or topic in _SKIP_TOPICS:
            return
        ts = req.store_timestamp
        table.put(key, f"{ts}{SEP}{qid}{SEP}{req.queue_offset}{SEP}{LAZY_ID}{req.phys_offset}")  # encode_entry(None..)
        if ts - table._head_ts > table.window_ms or len(table.entries) > table.max_entries:
            table.evict(ts)  # evict()'s own fast exit, without the call

    def _on_role(self, acting_master: bool) -> None:
        """Role listener: on becoming master, the records received as a slave and not dispatched yet are still
        remembered when they are (a producer's retry of one of them, sent to this new master after the old one
        died before answering, is then answered instead of stored twice)."""
        self._listening.add(1)  # a slave learns every record; a new master those below _replicated_end
        if not self.ctx.config.is_slave:
            self._replicated_end = self.ctx.store.max_phys_offset
            # received but not visible yet (a gate waiting for this new master's own confirmation): remembered now,
            # so a retry that arrives before they are dispatched is answered too
            pending = getattr(self.ctx.store, "pending_requests", None)
            for req in pending() if pending is not None else ():
                self.on_dispatch(req)

    # ---- journal ----
    def _encode_new_rows(self, covered: int, start: int, end: int, lines: list[bytes],
                         counts: list[int]) -> Iterator[None]:
        """Encode the live entries of positions [start, end) into journal `lines`, one line per slice of
        SNAPSHOT_SLICE positions and one slice per step; the caller may yield to the event loop between steps.
        One line per slice, not one per tick: joining a tick's lines (20 MB after a fill) held the loop ~25 ms."""
        table = self.table
        for p in range(start, end, SNAPSHOT_SLICE):
            rows = table.rows(p, min(p + SNAPSHOT_SLICE, end))  # live positions only: a re-put key once
            if rows:
                lines.append(self._line(covered, orjson.dumps(rows)[1:-1]))
                counts.append(len(rows))
            yield

    def _tick_steps(self, out: list[tuple[int, int, list[bytes], int]]) -> Iterator[None]:
        """One journal tick, one step per slice: appends (first position, end position, lines, rows) to `out`, or
        nothing if no entry is new. The lines claim only the CommitLog offset seen one tick ago: sends still waiting
        for a flush then are re-scanned at the next start."""
        table = self.table
        table.evict(self.env.clock.now_ms())
        if table.position <= self._journaled:
            return
        covered, self._covered = self._covered, self.ctx.store.confirm_offset
        start, end = max(self._journaled, table.evicted_position), table.position
        lines: list[bytes] = []
        counts: list[int] = []
        yield from self._encode_new_rows(covered, start, end, lines, counts)
        out.append((start, end, lines, sum(counts)))

    @staticmethod
    def _line(covered: int, rows: bytes) -> bytes:
        return b'{"version":%d,"physOffset":%d,"rows":[%b]}\n' % (SNAPSHOT_VERSION, covered, rows)

    async def snapshot(self) -> None:
        """Periodic journal tick: the entries added since the previous tick, encoded in slices with a yield
        between them, appended from a worker thread. Its cost follows the send rate, not the table size
        (whole-table snapshots cost ~0.3 s of loop CPU every interval at 200k entries)."""
        out: list[tuple[int, int, list[bytes], int]] = []
        for _ in self._tick_steps(out):
            await asyncio.sleep(0)
        if not out:
            return
        start, end, lines, rows = out[0]
        self._journaled = end
        if not lines:
            return  # all evicted meanwhile
        try:
            await self.env.writes.run(self.journal.append, lines, start, rows, self.table.evicted_position)
        except OSError:
            log.exception("dedup journal append failed (the next tick writes these entries again)")
            self._journaled = min(self._journaled, start)

    # ---- BrokerService ----
    def handlers(self) -> dict[int, Any]:
        return {}

    async def start(self) -> None:
        # The journal read and the tail scan run in a worker thread (the loop keeps answering: a standalone's name
        # server, "starting" replies); nothing puts into the table meanwhile (the routers do not accept requests
        # yet and the dispatch listener is not registered). Records confirmed during the scan (a slave's
        # replication) are caught up on the loop afterwards.
        store = self.ctx.store
        end = store.confirm_offset
        t0 = time.monotonic()
        scanned = await asyncio.to_thread(self._rebuild, end)
        if store.confirm_offset > end:
            scanned += self._scan(end, store.confirm_offset, self.env.clock.now_ms())
        # at once after the scan (no await between): every record dispatched from now on is past what it read
        store.add_dispatch_listener(self.on_dispatch, while_nonempty=self._listening)
        self.rebuild_seconds = time.monotonic() - t0
        log.info("dedup: %d keys remembered (%d CommitLog records scanned, %.1f s off the event loop)", len(self.table),
                 scanned, self.rebuild_seconds)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.snapshot_interval_s)
            await self.snapshot()

    async def stop(self) -> None:
        """The last journal tick, synchronously: it claims everything confirmed so far."""
        self._covered = self.ctx.store.confirm_offset
        out: list[tuple[int, int, list[bytes], int]] = []
        for _ in self._tick_steps(out):
            pass
        if not out:
            return
        start, end, lines, rows = out[0]
        if lines:
            try:
                self.journal.append(lines, start, rows, self.table.evicted_position)
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
