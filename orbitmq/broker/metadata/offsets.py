"""ConsumerOffsetManager: committed consumer offsets ("topic@group" -> {queueId: offset}), config/consumerOffset.json.

Commits only touch memory (O(1)) and set a dirty flag; the app calls persist() periodically and at stop, which
writes only when something changed. The file uses fastjson's form (unquoted int keys) and both forms load.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import orjson

from orbitmq.base.fsio import atomic_write
from orbitmq.broker.metadata.data_version import load_config_file

SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return topic + SEPARATOR + group


class ConsumerOffsetManager:
    FILE_NAME = "consumerOffset.json"

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, self.FILE_NAME)
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._latest: bytes | None = None  # newest snapshot not yet on disk
        self._io_lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    @property
    def dirty(self) -> bool:
        return self._dirty

    # ---- hot path --------------------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = topic + SEPARATOR + group
        queues = self._table.get(key)
        if queues is None:
            self._table[key] = {queue_id: offset}
            self._dirty = True
        elif queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        queues = self._table.get(topic + SEPARATOR + group)
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    # ---- admin queries ---------------------------------------------------------------------------------
    def query_all(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get(topic + SEPARATOR + group, {}))

    def table(self) -> dict[str, dict[int, int]]:
        return {k: dict(v) for k, v in self._table.items()}

    def groups_of_topic(self, topic: str) -> set[str]:
        out: set[str] = set()
        for key in self._table:
            t, _, g = key.partition(SEPARATOR)
            if t == topic:
                out.add(g)
        return out

    def topics_of_group(self, group: str) -> set[str]:
        out: set[str] = set()
        for key in self._table:
            t, _, g = key.partition(SEPARATOR)
            if g == group:
                out.add(t)
        return out

    # ---- removal ---------------------------------------------------------------------------------------
    def remove_group(self, group: str) -> bool:
        return self._remove_where(lambda t, g: g == group)

    def remove_topic(self, topic: str) -> bool:
        return self._remove_where(lambda t, g: t == topic)

    def remove(self, group: str, topic: str) -> bool:
        if self._table.pop(topic + SEPARATOR + group, None) is None:
            return False
        self._dirty = True
        return True

    def _remove_where(self, pred: Any) -> bool:
        doomed = [k for k in self._table if pred(*_split(k))]
        for k in doomed:
            del self._table[k]
        if doomed:
            self._dirty = True
        return bool(doomed)

    def replace_all(self, table: dict[str, dict[int, int]]) -> None:
        """Slave sync: adopt the master's offsets (only marks dirty when they differ)."""
        if table != self._table:
            self._table = {k: dict(v) for k, v in table.items()}
            self._dirty = True

    # ---- persistence -----------------------------------------------------------------------------------
    def encode(self) -> bytes:
        """ConsumerOffsetSerializeWrapper in fastjson's form: {"offsetTable":{"T@G":{0:12,1:7}}}."""
        parts: list[str] = []
        for key, queues in self._table.items():
            inner = ",".join(f"{q}:{o}" for q, o in queues.items())
            parts.append(orjson.dumps(key).decode() + ":{" + inner + "}")
        return ('{"offsetTable":{' + ",".join(parts) + "}}").encode()

    def snapshot_if_dirty(self) -> bytes | None:
        """Encoded table when something changed since the last snapshot (clears the dirty flag), else None.

        Lets the app encode on the loop thread and write the bytes in a worker thread with write_snapshot().
        """
        if not self._dirty:
            return None
        self._dirty = False
        data = self.encode()
        self._latest = data
        return data

    def write_snapshot(self, data: bytes) -> None:
        """Write a snapshot (thread-safe). A snapshot superseded by a newer one is skipped, so a slow writer
        can never put older offsets over newer ones."""
        with self._io_lock:
            if data is not self._latest:
                return
            try:
                atomic_write(self._path, data)
            except BaseException:
                self._dirty = True
                raise
            self._latest = None

    def persist(self) -> bool:
        """Write consumerOffset.json if anything changed (or a taken snapshot is still unwritten); True if so.

        Waits for an in-flight write_snapshot() in another thread, so after it returns the file is current.
        """
        data = self.snapshot_if_dirty()
        if data is None:
            data = self._latest
            if data is None:
                return False
        self.write_snapshot(data)
        return True

    def load(self) -> None:
        """Load consumerOffset.json (or .bak); ConfigError if both copies are corrupt."""
        loaded = load_config_file(self._path, decode_offset_wrapper)
        if loaded is not None:
            self._table = loaded
        self._dirty = False


def _split(key: str) -> tuple[str, str]:
    t, _, g = key.partition(SEPARATOR)
    return t, g


def decode_offset_wrapper(obj: Any) -> dict[str, dict[int, int]]:
    """Parse {"offsetTable":{"T@G":{"0":12}}} (keys already quoted by the lenient loader)."""
    if not isinstance(obj, dict):
        raise ValueError("top level is not a JSON object")
    raw = obj.get("offsetTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("offsetTable is not an object")
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw.items():
        if not isinstance(queues, dict):
            raise ValueError(f"offsets of {key!r} are not an object")
        table[str(key)] = {int(q): int(o) for q, o in queues.items()}
    return table
