"""Consumer offset stores: remote (broker-kept, clustering) and local JSON file (broadcasting).

Offsets here are always "the next queue offset to consume". The remote store talks to brokers only through the
two callables it is given, so it can be tested without a network.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from orbitmq.base.errors import ProtocolError
from orbitmq.base.fsio import atomic_write, read_with_backup
from orbitmq.model import MessageQueue
from orbitmq.protocol import fastjson

log = logging.getLogger(__name__)

FetchOffset = Callable[[MessageQueue], Awaitable[int]]  # -> stored offset, -1 if none
CommitOffset = Callable[[MessageQueue, int, bool], Awaitable[None]]  # (mq, offset, oneway)


class OffsetStore:
    """In-memory table shared by both kinds; subclasses decide where `persist` writes and `read_stored` reads."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self._dirty: set[MessageQueue] = set()

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        if offset < 0:
            return
        cur = self.table.get(mq)
        if cur is not None and increase_only and offset <= cur:
            return
        if cur != offset:
            self.table[mq] = offset
            self._dirty.add(mq)

    def read_memory(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    async def read(self, mq: MessageQueue, *, from_store: bool = False) -> int:
        """Memory first (unless from_store); -1 when unknown."""
        if not from_store and mq in self.table:
            return self.table[mq]
        off = await self.read_stored(mq)
        if off >= 0:
            self.table[mq] = off
        return off

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._dirty.discard(mq)

    async def read_stored(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        raise NotImplementedError

    def load(self) -> None:
        """Read persisted state at start (only the local store has any)."""


class RemoteOffsetStore(OffsetStore):
    """Clustering: offsets live on the broker (QUERY/UPDATE_CONSUMER_OFFSET)."""

    def __init__(self, fetch: FetchOffset, commit: CommitOffset) -> None:
        super().__init__()
        self._fetch = fetch
        self._commit = commit

    async def read_stored(self, mq: MessageQueue) -> int:
        return await self._fetch(mq)

    async def persist(self, mq: MessageQueue) -> None:
        off = self.table.get(mq)
        if off is None:
            return
        await self._commit(mq, off, False)
        self._dirty.discard(mq)

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        """Commit every assigned queue's offset (Java sends all of them every 5 s, changed or not)."""
        for mq in list(mqs):
            off = self.table.get(mq)
            if off is None:
                continue
            try:
                await self._commit(mq, off, oneway)
                self._dirty.discard(mq)
            except Exception as e:  # one broker down must not stop the others
                log.warning("persist offset %s=%d failed: %s", mq, off, e)


class LocalFileOffsetStore(OffsetStore):
    """Broadcasting: offsets in <base_dir>/<client_id>/<group>/offsets.json (Java OffsetSerializeWrapper form)."""

    def __init__(self, base_dir: str | os.PathLike[str], client_id: str, group: str) -> None:
        super().__init__()
        safe_cid = client_id.replace("/", "_").replace(os.sep, "_")
        self.path = Path(base_dir) / safe_cid / group / "offsets.json"

    def load(self) -> None:
        for raw in read_with_backup(self.path):
            try:
                table = decode_offsets_file(raw)
            except (ProtocolError, ValueError, KeyError, TypeError) as e:
                log.warning("offsets file %s unreadable (%s), trying backup", self.path, e)
                continue
            self.table.update(table)
            return

    async def read_stored(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    async def persist(self, mq: MessageQueue) -> None:
        self._write()

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        if self._dirty or not self.path.exists():
            self._write()

    def _write(self) -> None:
        atomic_write(self.path, encode_offsets_file(self.table))
        self._dirty.clear()


def encode_offsets_file(table: dict[MessageQueue, int]) -> bytes:
    return fastjson.dumps({"offsetTable": dict(sorted(table.items()))})


def decode_offsets_file(raw: bytes) -> dict[MessageQueue, int]:
    obj = fastjson.loads(raw)
    out: dict[MessageQueue, int] = {}
    for k, v in (obj.get("offsetTable") or {}).items():
        if isinstance(k, MessageQueue):
            out[k] = int(v)
    return out
