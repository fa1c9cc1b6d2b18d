"""VersionedTable: what the topic and subscription-group tables share — a name → config table stamped with a
DataVersion, persisted atomically in RocketMQ's wrapper shape ({"dataVersion":…, "<tableKey>":{…}}), reloaded from
the file or its .bak, replaced wholesale by slave sync, and announced to a change callback.

Writes are coalesced and off the event loop (issue 12.2): a change made while a loop runs marks the table dirty and
makes sure one writer task is running; the writer takes a shallow snapshot on the loop, encodes and writes it in a
worker thread (asyncio.to_thread), and goes round again if more changes came meanwhile. So a burst of 10 000 group
creations costs a handful of whole-file writes, none of them on the loop. Without a running loop (tools, start-up,
tests) a change is written at once. persist() is the explicit synchronous write (stop); a sequence number keeps an
older snapshot from overwriting a newer one whichever thread gets the file lock first."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, TypeVar

import orjson

from orbitmq.base.fsio import atomic_write
from orbitmq.broker.metadata.data_version import DataVersion, load_config_file
from orbitmq.broker.metadata.quota import AutoCreateQuota

C = TypeVar("C")
R = TypeVar("R")
log = logging.getLogger("orbitmq.broker.metadata")


class VersionedTable(Generic[C]):
    FILE_NAME: ClassVar[str]
    TABLE_KEY: ClassVar[str]  # "topicConfigTable" / "subscriptionGroupTable"

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, self.FILE_NAME)
        self._table: dict[str, C] = {}
        self.data_version = DataVersion()
        self.on_change: Callable[[], None] | None = None
        self.quota: AutoCreateQuota | None = None  # per-client cap on auto-creation (topics on send, groups)
        self._dirty = False
        self._writer: asyncio.Task[None] | None = None
        self._seq = itertools.count(1)
        self._written_seq = 0
        self._write_lock = threading.Lock()
        self.writes = 0  # whole-file writes done (tests and bench: coalescing)
        self.background_writes = 0  # of which in a worker thread

    @property
    def path(self) -> str:
        return self._path

    def _decode(self, obj: Any) -> tuple[dict[str, C], DataVersion]:
        raise NotImplementedError

    def replace_all(self, table: dict[str, C], data_version: DataVersion) -> None:
        """Slave sync: adopt the master's table and version wholesale."""
        self._table = dict(table)
        self.data_version.assign(data_version)
        self._schedule_persist()

    def _changed(self) -> None:
        self.data_version.next_version()
        self._schedule_persist()
        if self.on_change is not None:
            self.on_change()

    def to_json_obj(self) -> dict[str, Any]:
        return self._snapshot_obj(self.data_version.to_json_obj(), self._table)

    def _snapshot_obj(self, version: Any, table: dict[str, C]) -> dict[str, Any]:
        return {
            "dataVersion": version,
            self.TABLE_KEY: {name: c.to_json_obj() for name, c in table.items()},  # type: ignore[attr-defined]
        }

    def encode(self, pretty: bool = False) -> bytes:
        return orjson.dumps(self.to_json_obj(), option=orjson.OPT_INDENT_2 if pretty else 0)

    def persist(self) -> None:
        """Write the current table now, synchronously (stop, tools)."""
        self._dirty = False
        self._write(next(self._seq), self.encode(pretty=True))

    def _write(self, seq: int, data: bytes) -> None:
        with self._write_lock:
            if seq < self._written_seq:
                return  # a newer snapshot is already on disk
            atomic_write(self._path, data)
            self._written_seq = seq
            self.writes += 1

    def _schedule_persist(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.persist()
            return
        self._dirty = True
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_behind(), name=f"persist {self.FILE_NAME}")

    async def _write_behind(self) -> None:
        while self._dirty:
            self._dirty = False
            seq = next(self._seq)
            version, table = self.data_version.to_json_obj(), dict(self._table)  # shallow, on the loop
            try:
                await asyncio.to_thread(self._encode_and_write, seq, version, table)
            except Exception:  # the next change (or stop's persist) tries again with the whole table
                log.exception("writing %s failed", self._path)
                return
            self.background_writes += 1

    def _encode_and_write(self, seq: int, version: Any, table: dict[str, C]) -> None:
        self._write(seq, orjson.dumps(self._snapshot_obj(version, table), option=orjson.OPT_INDENT_2))

    def write_pending(self) -> bool:
        """A background write of this table is scheduled or running (changes not yet on disk)."""
        return self._writer is not None and not self._writer.done()

    def answer_when_written(self, resp: R) -> R | Awaitable[R]:
        """`resp` as it is when nothing is waiting to be written, else an awaitable of it that completes once the
        table is on disk: an admin change (create/update/delete topic or group) is answered only when durable."""
        if not self.write_pending():
            return resp

        async def later() -> R:
            await self.flushed()
            return resp

        return later()

    async def flushed(self) -> None:
        """Wait until every change made so far is on disk."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def load(self) -> None:
        """Merge the file (or its .bak) over the built-ins; ConfigError if both copies are corrupt."""
        loaded = load_config_file(self._path, self._decode)
        if loaded is None:
            return
        table, version = loaded
        self._table.update(table)
        self.data_version.assign(version)
