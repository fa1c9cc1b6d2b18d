"""ConsumerOffsetManager: committed consumer offsets ("topic@group" -> {queueId: offset}), config/consumerOffset.json.

Commits only touch memory (O(1)) and set a dirty flag; the app calls persist() periodically and at stop, which
writes only when something changed. The file uses fastjson's form (unquoted int keys) and both forms load.
The table carries a DataVersion (RIP-32, metadata/offset_versions.py): it advances every
CONSUMER_OFFSET_VERSION_STEP changes and at each persist that writes changes; file and GET_ALL_CONSUMER_OFFSET
body are {"dataVersion":{...},"offsetTable":{...}} (a 4.x file without dataVersion loads as the oldest version).
With a publish gate (controller-mode master, set_gate()) commits stay pending until publish(): query, encode and
the file only ever show published values.
Every entry also carries a commit stamp (wall-clock ms of the commit, at least the previous stamp + 1), kept when
the commit is forwarded to (commit_if_newer) or merged into (merge_from) another member's table: a merge takes, per
queue, the newer commit, so a returning master never serves an offset lower than one committed later elsewhere,
while an admin reset to a lower offset still wins over the older values. File and body add
"offsetStamps":{"T@G":{0:1700000000000}} (ignored by RocketMQ; a copy without it is unstamped: larger offset wins).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import orjson

from orbitmq.base.clock import now_ms
from orbitmq.base.fsio import atomic_write
from orbitmq.broker.metadata.data_version import DataVersion, load_config_file
from orbitmq.broker.metadata.name_filter import drop_illegal
from orbitmq.broker.metadata.offset_versions import (
    CONSUMER_OFFSET_VERSION_STEP,
    Stamps,
    VersionTracker,
    merge_newest_nested,
    needs_restamp,
    newer_entry,
    unversioned,
    version_of,
)
from orbitmq.model.names import group_error, topic_error

SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return topic + SEPARATOR + group


class ConsumerOffsetManager:
    FILE_NAME = "consumerOffset.json"

    def __init__(self, config_dir: str, version_step: int = CONSUMER_OFFSET_VERSION_STEP,
                 clock: Callable[[], int] = now_ms) -> None:
        self._path = os.path.join(config_dir, self.FILE_NAME)
        self._table: dict[str, dict[int, int]] = {}
        self._stamps: dict[str, dict[int, int]] = {}  # "topic@group" -> {queueId: commit stamp}
        self._clock = clock
        self._versions = VersionTracker(version_step)
        self._dirty = False
        self._latest: bytes | None = None  # newest snapshot not yet on disk
        self._io_lock = threading.Lock()
        self._gate: Callable[[str, int, int], None] | None = None
        self._pending: dict[tuple[str, int], int] = {}  # gated: ("topic@group", queueId) -> latest unpublished
        self.on_commit: Callable[[str, int, int], None] | None = None  # ("topic@group", queueId, offset) per commit

    @property
    def path(self) -> str:
        return self._path

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def data_version(self) -> DataVersion:
        """The table's version (a live object: copy() it to keep a value)."""
        return self._versions.version

    # ---- hot path --------------------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = topic + SEPARATOR + group
        if self.on_commit is not None:
            self.on_commit(key, queue_id, offset)
        if self._gate is not None:
            self._commit_gated(key, queue_id, offset)
            return
        self._set(key, queue_id, offset)

    def _set(self, key: str, queue_id: int, offset: int, stamp: int = 0) -> None:
        """Store a commit; `stamp` 0: a commit made here, stamped now (never below the entry's last stamp + 1)."""
        queues = self._table.get(key)
        if queues is None:
            self._table[key] = {queue_id: offset}
        elif queues.get(queue_id) != offset:
            queues[queue_id] = offset
        else:
            return
        stamps = self._stamps.get(key)
        if stamps is None:
            stamps = self._stamps[key] = {}
        if not stamp:
            stamp = self._clock()
            last = stamps.get(queue_id, 0)
            if stamp <= last:
                stamp = last + 1
        stamps[queue_id] = stamp
        self._dirty = True
        self._versions.changed()

    def commit_if_newer(self, group: str, topic: str, queue_id: int, offset: int, stamp: int) -> bool:
        """A commit forwarded by another member of the group with its stamp: taken only when newer than ours
        (merge rule), so forwards arriving late or out of order never move an entry back. True if taken."""
        if stamp <= 0 or self._gate is not None:  # from a member without stamps: as a plain commit
            self.commit(group, topic, queue_id, offset)
            return True
        key = topic + SEPARATOR + group
        current = self._table.get(key, {}).get(queue_id)
        mine = None if current is None else (current, self._stamps.get(key, {}).get(queue_id, 0))
        if not newer_entry(mine, (offset, stamp)):
            return False
        if mine is not None and mine[0] == offset:
            self._stamps.setdefault(key, {})[queue_id] = stamp
            self._dirty = True
            return True
        self._set(key, queue_id, offset, stamp)
        return True

    def stamp(self, group: str, topic: str, queue_id: int) -> int:
        """The commit stamp of an entry (0: none, or unstamped)."""
        return self._stamps.get(topic + SEPARATOR + group, {}).get(queue_id, 0)

    def _commit_gated(self, key: str, queue_id: int, offset: int) -> None:
        slot = (key, queue_id)
        if slot not in self._pending and self._table.get(key, {}).get(queue_id) == offset:
            return
        self._pending[slot] = offset
        assert self._gate is not None
        self._gate(key, queue_id, offset)

    # ---- publish gate (controller-mode master) ---------------------------------------------------------
    def set_gate(self, gate: Callable[[str, int, int], None] | None) -> None:
        """gate(key, queueId, offset) is told of every commit, which stays pending (invisible) until publish().
        None: commits apply at once again; values still pending are dropped (they were never published)."""
        self._gate = gate
        self._pending.clear()

    @property
    def gated(self) -> bool:
        return self._gate is not None

    def publish(self, key: str, queue_id: int, offset: int) -> None:
        """Make `offset` the visible value of ("topic@group", queueId); the pending value goes once it is reached."""
        if self._pending.get((key, queue_id)) == offset:
            del self._pending[(key, queue_id)]
        self._set(key, queue_id, offset)

    def latest(self, group: str, topic: str, queue_id: int) -> int:
        """The newest commit, published or not (-1: none)."""
        pending = self._pending.get((topic + SEPARATOR + group, queue_id))
        return pending if pending is not None else self.query(group, topic, queue_id)

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
        self._stamps.pop(topic + SEPARATOR + group, None)
        if self._table.pop(topic + SEPARATOR + group, None) is None:
            return False
        self._dirty = True
        self._versions.changed()
        return True

    def _remove_where(self, pred: Any) -> bool:
        doomed = [k for k in self._table if pred(*_split(k))]
        for k in doomed:
            del self._table[k]
            self._stamps.pop(k, None)
        if doomed:
            self._dirty = True
            self._versions.changed(len(doomed))
        return bool(doomed)

    def replace_all(self, table: dict[str, dict[int, int]]) -> None:
        """Adopt a table wholesale (only marks dirty when it differs). Offsets may go down: replication uses
        merge_from() instead."""
        if table != self._table:
            self._table = {k: dict(v) for k, v in table.items()}
            self._stamps = {}  # unstamped: a later merge falls back to the larger offset
            self._dirty = True
            self._versions.changed()

    def merge_from(self, table: dict[str, dict[int, int]], version: DataVersion | None,
                   stamps: Stamps | None = None) -> bool:
        """Take in another copy of the table (the master's on a slave, a slave's on a pre-online master): per queue
        the newer commit by stamp (unstamped: the larger offset), so no offset moves back unless it was reset
        later; the newer of the two versions. True if any offset changed here."""
        merged, merged_stamps, changed = merge_newest_nested(self._table, self._stamps, table, stamps or {})
        if merged_stamps != self._stamps:
            self._stamps = merged_stamps
            self._dirty = True
        if changed:
            self._table = merged
            self._dirty = True
        adopted = version is not None and self._versions.adopt(version)
        if adopted:
            self._dirty = True  # the file must carry the adopted version
        if needs_restamp(adopted, changed, self._table == table):
            self._versions.changed()
        return changed

    # ---- persistence -----------------------------------------------------------------------------------
    def encode(self) -> bytes:
        """ConsumerOffsetSerializeWrapper in fastjson's form:
        {"dataVersion":{"counter":3,"timestamp":1700000000000},"offsetTable":{"T@G":{0:12,1:7}}}."""
        parts: list[str] = []
        for key, queues in self._table.items():
            inner = ",".join(f"{q}:{o}" for q, o in queues.items())
            parts.append(orjson.dumps(key).decode() + ":{" + inner + "}")
        version = orjson.dumps(self._versions.version.to_json_obj()).decode()
        stamps = ",".join(orjson.dumps(key).decode() + ":{" + ",".join(f"{q}:{t}" for q, t in queues.items()) + "}"
                          for key, queues in self._stamps.items() if key in self._table)
        return ('{"dataVersion":' + version + ',"offsetTable":{' + ",".join(parts) + '},"offsetStamps":{'
                + stamps + "}}").encode()

    def snapshot_if_dirty(self) -> bytes | None:
        """Encoded table when something changed since the last snapshot (clears the dirty flag), else None.

        Lets the app encode on the loop thread and write the bytes in a worker thread with write_snapshot().
        """
        if not self._dirty:
            return None
        self._dirty = False
        self._versions.settle()
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
        loaded = load_config_file(self._path, _decode_stamped_file)
        if loaded is not None:
            self._table, version, self._stamps = loaded
            self._versions.version.assign(version)
        self._dirty = False


def _split(key: str) -> tuple[str, str]:
    t, _, g = key.partition(SEPARATOR)
    return t, g


def decode_offset_file(obj: Any) -> tuple[dict[str, dict[int, int]], DataVersion]:
    """consumerOffset.json (or a GET_ALL_CONSUMER_OFFSET body): the table and its version (4.x: the oldest)."""
    return decode_offset_wrapper(obj), version_of(obj) or unversioned()


def _decode_stamped_file(obj: Any) -> tuple[dict[str, dict[int, int]], DataVersion, dict[str, dict[int, int]]]:
    table, version = decode_offset_file(obj)
    return table, version, decode_offset_stamps(obj)


def decode_offset_stamps(obj: Any) -> dict[str, dict[int, int]]:
    """The "offsetStamps" of a file or GET_ALL_CONSUMER_OFFSET body ({} when absent or malformed: unstamped)."""
    raw = obj.get("offsetStamps") if isinstance(obj, dict) else None
    out: dict[str, dict[int, int]] = {}
    if not isinstance(raw, dict):
        return out
    for key, queues in raw.items():
        if isinstance(queues, dict):
            try:
                out[str(key)] = {int(q): int(t) for q, t in queues.items()}
            except (TypeError, ValueError):
                continue
    return out


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
    return drop_illegal(table, offset_key_error, "offsetTable")


def offset_key_error(key: str) -> str | None:
    """None if "topic@group" holds a legal topic and a legal group."""
    topic, sep, group = key.partition(SEPARATOR)
    if not sep:
        return "not of the form topic@group"
    return topic_error(topic) or group_error(group)
