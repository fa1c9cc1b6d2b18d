"""Data versions of the offset tables (RIP-32) and the "never roll back" merge.

The consumer offset table and the delay offset table each carry a DataVersion. It advances every `step` changes
(5.x: consumerOffsetUpdateVersionStep = 500, delayOffsetUpdateVersionStep = 200) and, when anything changed since
the last advance, at persist, so a copy that saw more updates can be told from an older one. A restarting master
(services/preonline.py) and a slave (services/ha.py) compare versions to pick the newer copy.

Consumer offsets also carry a commit stamp per queue (ConsumerOffsetManager): the wall-clock ms of the commit,
never lower than the entry's previous stamp + 1, kept by every member a commit is forwarded or merged to. A merge
takes, per queue, the newer commit (an admin reset to a lower offset made after the other copy's value wins); for
an unstamped entry (4.x) the larger offset. Delay offsets merge by the larger offset (nothing resets them).

Bodies and files are RocketMQ 5.x-shaped: {"dataVersion":{...},"offsetTable":{...}}; 4.x copies without
"dataVersion" load as version (counter 0, timestamp 0), older than anything stamped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.protocol import fastjson

CONSUMER_OFFSET_VERSION_STEP = 500
DELAY_OFFSET_VERSION_STEP = 200


class VersionTracker:
    """Counts changes of one table and advances its DataVersion every `step` of them (and at settle())."""

    __slots__ = ("version", "step", "_pending")

    def __init__(self, step: int, version: DataVersion | None = None) -> None:
        if step <= 0:
            raise ValueError("version step must be positive")
        self.version = version if version is not None else DataVersion()
        self.step = step
        self._pending = 0  # changes since the last advance

    @property
    def pending(self) -> int:
        return self._pending

    def changed(self, n: int = 1) -> None:
        self._pending += n
        if self._pending >= self.step:
            self._advance()

    def settle(self) -> bool:
        """At persist: advance when anything changed since the last advance. True if it advanced."""
        if self._pending == 0:
            return False
        self._advance()
        return True

    def adopt(self, other: DataVersion) -> bool:
        """Take `other` when it is newer than ours (never go back to an older version). True if taken."""
        if other.newer_than(self.version):
            self.version.assign(other)
            return True
        return False

    def _advance(self) -> None:
        self.version.next_version()
        self._pending = 0


def version_of(obj: Any) -> DataVersion | None:
    """The "dataVersion" of a decoded wrapper body; None when absent (a 4.x body or file)."""
    if isinstance(obj, dict) and isinstance(obj.get("dataVersion"), dict):
        return DataVersion.from_json_obj(obj["dataVersion"])
    return None


def unversioned() -> DataVersion:
    """The version given to a table that carries none: older than any stamped table."""
    return DataVersion(0, 0, 0)


# ---- merge: the larger offset per queue wins ------------------------------------------------------------------
def merge_max_flat(local: Mapping[int, int], other: Mapping[int, int]) -> tuple[dict[int, int], bool]:
    """{key: offset} merged taking the larger offset per key; also True when `other` raised or added something."""
    merged = dict(local)
    changed = False
    for k, off in other.items():
        if off > merged.get(k, -1):
            merged[k] = off
            changed = True
    return merged, changed


def merge_max_nested(local: Mapping[str, Mapping[int, int]],
                     other: Mapping[str, Mapping[int, int]]) -> tuple[dict[str, dict[int, int]], bool]:
    """{"topic@group": {queue: offset}} merged per queue taking the larger offset; True when `other` added any."""
    merged = {k: dict(v) for k, v in local.items()}
    changed = False
    for key, queues in other.items():
        mine = merged.get(key)
        if mine is None:
            merged[key] = dict(queues)
            changed = changed or bool(queues)
            continue
        for q, off in queues.items():
            if off > mine.get(q, -1):
                mine[q] = off
                changed = True
    return merged, changed


Stamps = Mapping[str, Mapping[int, int]]  # {"topic@group": {queue: commit stamp}}; 0 or absent: unstamped


def newer_entry(mine: tuple[int, int] | None, theirs: tuple[int, int]) -> bool:
    """Does `theirs` (offset, stamp) replace `mine` in a merge? Both stamped: the newer commit wins (a tie goes to
    the larger offset), so an admin reset to a lower offset, committed after the other copy's value, survives.
    Either unstamped (a 4.x file or body): the larger offset wins, so nothing rolls back."""
    if mine is None:
        return True
    (off, stamp), (other_off, other_stamp) = mine, theirs
    if stamp > 0 and other_stamp > 0:
        return (other_stamp, other_off) > (stamp, off)
    return other_off > off


def merge_newest_nested(local: Mapping[str, Mapping[int, int]], local_stamps: Stamps,
                        other: Mapping[str, Mapping[int, int]], other_stamps: Stamps,
                        ) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]], bool]:
    """The consumer offset merge: per queue the newer commit (newer_entry). Returns (offsets, stamps, True when
    `other` changed any offset here). An entry keeps the larger of the two stamps (the winner's when both have one)."""
    merged = {k: dict(v) for k, v in local.items()}
    stamps = {k: dict(v) for k, v in local_stamps.items()}
    changed = False
    for key, queues in other.items():
        if not queues:
            continue
        mine = merged.setdefault(key, {})
        my_stamps = stamps.setdefault(key, {})
        their_stamps = other_stamps.get(key, {})
        for q, off in queues.items():
            their_stamp = their_stamps.get(q, 0)
            current = (mine[q], my_stamps.get(q, 0)) if q in mine else None
            if newer_entry(current, (off, their_stamp)):
                changed = changed or current is None or current[0] != off
                mine[q] = off
            stamp = max(their_stamp, current[1] if current is not None else 0)
            if stamp > 0:
                my_stamps[q] = stamp
    return merged, {k: v for k, v in stamps.items() if v}, changed


def needs_restamp(adopted: bool, changed: bool, same_as_other: bool) -> bool:
    """After a merge: does our content match no stamped copy (so the next persist must advance the version)?

    Adopted the other's version: only if our content differs from the other's. Kept ours: if the other added
    anything."""
    return not same_as_other if adopted else changed


# ---- the delay offset table -----------------------------------------------------------------------------------
class DelayOffsetTable(dict[int, int]):
    """delay level -> next schedule-queue offset, with a data version that follows its changes.

    A plain dict to its users (services/delay.py assigns `table[level] = offset`); every assignment that changes
    a value counts towards the version step.
    """

    def __init__(self, items: Mapping[int, int] | Iterable[tuple[int, int]] = (),
                 version: DataVersion | None = None, step: int = DELAY_OFFSET_VERSION_STEP) -> None:
        super().__init__(items)
        self.tracker = VersionTracker(step, version if version is not None else DataVersion())

    @property
    def data_version(self) -> DataVersion:
        return self.tracker.version

    def __setitem__(self, key: int, value: int) -> None:
        if self.get(key) != value:
            super().__setitem__(key, value)
            self.tracker.changed()

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key: int, default: int = 0) -> int:  # type: ignore[override]
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: int, *args: Any) -> Any:  # type: ignore[override]
        if key in self:
            self.tracker.changed()
        return super().pop(key, *args)

    def __delitem__(self, key: int) -> None:
        super().__delitem__(key)
        self.tracker.changed()

    def __reduce__(self) -> Any:  # copy/pickle keep the version
        return (DelayOffsetTable, (dict(self), self.tracker.version.copy(), self.tracker.step))

    def merge_from(self, other: Mapping[int, int], version: DataVersion | None) -> bool:
        """Adopt another copy (a master's or a slave's): per level the larger offset; the newer version."""
        merged, changed = merge_max_flat(self, other)
        for k, v in merged.items():
            if self.get(k) != v:
                super().__setitem__(k, v)
        adopted = version is not None and self.tracker.adopt(version)
        if needs_restamp(adopted, changed, dict(self) == dict(other)):
            self.tracker.changed()
        return changed

    def encode(self, settle: bool = False) -> bytes:
        """delayOffset.json / GET_ALL_DELAY_OFFSET body: {"dataVersion":{..},"offsetTable":{1:0,2:15}}.

        settle=True (persist) first advances the version when something changed since the last advance."""
        if settle:
            self.tracker.settle()
        return encode_delay_offsets(self, self.tracker.version)

    @classmethod
    def decode(cls, data: bytes, step: int = DELAY_OFFSET_VERSION_STEP) -> DelayOffsetTable:
        """Parse a body or file in 5.x or 4.x form (ValueError when there is no offsetTable)."""
        obj = fastjson.loads(data)
        table = obj.get("offsetTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError("no offsetTable")
        version = version_of(obj) or unversioned()
        return cls({int(k): int(v) for k, v in table.items()}, version, step)


def encode_delay_offsets(table: Mapping[int, int], version: DataVersion | None = None) -> bytes:
    body: dict[Any, Any] = {}
    if version is not None:
        body["dataVersion"] = version.to_json_obj()
    body["offsetTable"] = {int(k): int(v) for k, v in sorted(table.items())}
    return fastjson.dumps(body)

