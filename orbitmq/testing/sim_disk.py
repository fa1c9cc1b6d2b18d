"""SimDisk: an in-memory Disk with a durable image per file, for crash and corruption tests.

Fault model (documented here, used by the crash sweep):
- Segment writes land in the file's live buffer (the "page cache") and are logged as pending ranges.
  `flush(start, end)` copies that range into the durable image and drops covered pending ranges.
- `crash(mode)` rebuilds every file from its durable image plus, depending on mode:
  "drop"   — no pending write survives;
  "tear"   — every pending write but the last survives, the last survives only up to a 512-byte
             boundary (file-position aligned) chosen with the seeded rng;
  "subset" — each pending write survives independently with probability 1/2 (seeded).
- Metadata operations (create, delete, mkdir, small atomic files, touch) are durable at once.
- `corrupt(path, position)` flips one bit in both the live and durable images.
- `arm_crash(at_write=k, mode)` captures the crash image right after the k-th logged write, so a workload can
  run on and a test can later restart from `SimDisk.from_image(...)` as if the machine died at that point.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field

from orbitmq.store.errors import StoreInUseError

SECTOR = 512
CRASH_MODES = ("drop", "tear", "subset")


@dataclass
class _File:
    live: bytearray
    durable: bytearray
    mtime_ms: int
    pending: list[tuple[int, int, int]] = field(default_factory=list)  # (write seq, start, end)


class SimBacking:
    __slots__ = ("path", "size", "buf", "_disk", "_file", "_closed")

    def __init__(self, disk: SimDisk, path: str, f: _File, size: int) -> None:
        self.path = path
        self.size = size
        self._disk = disk
        self._file = f
        self.buf = memoryview(f.live)
        self._closed = False

    def mark_written(self, start: int, end: int) -> None:
        if end > start:
            self._disk._log_write(self.path, self._file, start, end)

    def write(self, position: int, data: bytes | memoryview) -> None:
        n = len(data)
        self.buf[position : position + n] = data
        self.mark_written(position, position + n)

    def data_end(self, position: int) -> int:
        return self.size  # no holes in the simulator: callers scan to the end

    def flush(self, start: int, end: int) -> None:
        if self._closed or self._disk._files.get(self.path) is not self._file:
            return  # file deleted or disk crashed under us
        if self._disk.flush_delay_s:
            time.sleep(self._disk.flush_delay_s)  # a slow device (only with flush_in_thread)
        self._disk.flush_count += 1
        f = self._file
        f.durable[start:end] = f.live[start:end]
        f.pending = [w for w in f.pending if w[1] < start or w[2] > end]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.buf.release()


class _SimLock:
    __slots__ = ("_disk", "_path")

    def __init__(self, disk: SimDisk, path: str) -> None:
        self._disk = disk
        self._path = path

    def release(self) -> None:
        self._disk._locks.discard(self._path)


class SimDisk:
    """Deterministic fake disk (see module docstring for the fault model)."""

    flush_in_thread = False

    def __init__(self, seed: int = 0, *, now_ms=None, usage_ratio: float = 0.1) -> None:  # type: ignore[no-untyped-def]
        self.rng = random.Random(seed)
        self._now_ms = now_ms or (lambda: 0)
        self._files: dict[str, _File] = {}
        self._small: dict[str, bytes] = {}
        self._dirs: set[str] = set()
        self._locks: set[str] = set()
        self.write_count = 0
        self.flush_count = 0
        self.usage = usage_ratio
        self.flush_delay_s = 0.0
        self._armed: tuple[int, str] | None = None
        self.crash_image: dict[str, object] | None = None

    # ---- Disk protocol -------------------------------------------------------------------------------
    def create(self, path: str, size: int) -> SimBacking:
        path = os.path.normpath(path)
        if path in self._files or path in self._small:
            raise FileExistsError(path)
        self._add_dirs(os.path.dirname(path))
        f = _File(bytearray(size), bytearray(size), self._now_ms())
        self._files[path] = f
        return SimBacking(self, path, f, size)

    def open(self, path: str, size: int) -> SimBacking:
        path = os.path.normpath(path)
        f = self._files.get(path)
        if f is None:
            raise FileNotFoundError(path)
        if len(f.live) < size:
            f.live.extend(bytes(size - len(f.live)))
            f.durable.extend(bytes(size - len(f.durable)))
        return SimBacking(self, path, f, size)

    def exists(self, path: str) -> bool:
        path = os.path.normpath(path)
        return path in self._files or path in self._small or path in self._dirs

    def file_size(self, path: str) -> int:
        path = os.path.normpath(path)
        if path in self._small:
            return len(self._small[path])
        return len(self._files[path].live)

    def delete(self, path: str) -> None:
        path = os.path.normpath(path)
        self._files.pop(path, None)
        self._small.pop(path, None)

    def list_files(self, directory: str) -> list[str]:
        d = os.path.normpath(directory)
        names = {os.path.basename(p) for p in (*self._files, *self._small) if os.path.dirname(p) == d}
        return sorted(names)

    def list_dirs(self, directory: str) -> list[str]:
        d = os.path.normpath(directory)
        return sorted(os.path.basename(p) for p in self._dirs if os.path.dirname(p) == d)

    def makedirs(self, directory: str) -> None:
        self._add_dirs(os.path.normpath(directory))

    def remove_tree(self, directory: str) -> None:
        d = os.path.normpath(directory)
        pre = d + os.sep
        for table in (self._files, self._small):
            for p in [p for p in table if p.startswith(pre)]:
                del table[p]
        self._dirs = {p for p in self._dirs if p != d and not p.startswith(pre)}

    def mtime_ms(self, path: str) -> int:
        return self._files[os.path.normpath(path)].mtime_ms

    def set_mtime_ms(self, path: str, mtime_ms: int) -> None:
        self._files[os.path.normpath(path)].mtime_ms = mtime_ms

    def read_small(self, path: str) -> bytes | None:
        return self._small.get(os.path.normpath(path))

    def write_small_atomic(self, path: str, data: bytes) -> None:
        path = os.path.normpath(path)
        self._add_dirs(os.path.dirname(path))
        if path in self._small:
            self._small[path + ".bak"] = self._small[path]
        self._small[path] = bytes(data)

    def read_small_with_backup(self, path: str) -> list[bytes]:
        path = os.path.normpath(path)
        return [self._small[p] for p in (path, path + ".bak") if p in self._small]

    def touch(self, path: str) -> None:
        path = os.path.normpath(path)
        self._add_dirs(os.path.dirname(path))
        self._small.setdefault(path, b"")

    def lock(self, path: str) -> _SimLock:
        path = os.path.normpath(path)
        if path in self._locks:
            raise StoreInUseError(f"store is already in use by another process (lock file {path})")
        self._locks.add(path)
        self.touch(path)
        return _SimLock(self, path)

    def usage_ratio(self, directory: str) -> float:
        return self.usage

    # ---- fault injection -----------------------------------------------------------------------------
    def _add_dirs(self, d: str) -> None:
        while d and d not in self._dirs and d != os.sep:
            self._dirs.add(d)
            d = os.path.dirname(d)

    def _log_write(self, path: str, f: _File, start: int, end: int) -> None:
        self.write_count += 1
        f.pending.append((self.write_count, start, end))
        f.mtime_ms = self._now_ms()
        if self._armed is not None and self.write_count == self._armed[0]:
            self.crash_image = self._crashed_image(self._armed[1])
            self._armed = None

    def pending_writes(self, under: str = "") -> int:
        """Unflushed writes, optionally only for files under the directory `under`."""
        pre = os.path.normpath(under) + os.sep if under else ""
        return sum(len(f.pending) for p, f in self._files.items() if p.startswith(pre))

    def arm_crash(self, at_write: int, mode: str) -> None:
        if mode not in CRASH_MODES:
            raise ValueError(mode)
        self._armed = (at_write, mode)
        self.crash_image = None

    def _crashed_image(self, mode: str) -> dict[str, object]:
        """What would be on the platter if power failed now."""
        images = {p: bytearray(f.durable) for p, f in self._files.items()}
        pending = sorted((seq, p, f, s, e) for p, f in self._files.items() for (seq, s, e) in f.pending)
        for i, (_seq, p, f, s, e) in enumerate(pending):
            last = i == len(pending) - 1
            if mode == "drop":
                continue
            if mode == "subset" and self.rng.random() < 0.5:
                continue
            if mode == "tear" and last:
                bounds = [b for b in range((s // SECTOR + 1) * SECTOR, e, SECTOR)]
                cut = self.rng.choice([s, *bounds])
                e = cut
            images[p][s:e] = f.live[s:e]
        mtimes = {p: f.mtime_ms for p, f in self._files.items()}
        return {"files": images, "mtimes": mtimes, "small": dict(self._small), "dirs": set(self._dirs)}

    def crash(self, mode: str = "drop") -> None:
        """Power failure now: files revert to durable + surviving pending writes; open backings go stale."""
        self._apply_image(self._crashed_image(mode))

    def _apply_image(self, image: dict[str, object]) -> None:
        files: dict[str, bytearray] = image["files"]  # type: ignore[assignment]
        mtimes: dict[str, int] = image["mtimes"]  # type: ignore[assignment]
        self._files = {p: _File(bytearray(b), bytearray(b), mtimes[p]) for p, b in files.items()}
        self._small = dict(image["small"])  # type: ignore[call-overload]
        self._dirs = set(image["dirs"])  # type: ignore[call-overload]
        self._locks = set()

    @classmethod
    def from_image(cls, image: dict[str, object], seed: int = 0, **kw) -> SimDisk:  # type: ignore[no-untyped-def]
        d = cls(seed, **kw)
        d._apply_image(image)
        return d

    def corrupt(self, path: str, position: int, bit: int = 0) -> None:
        f = self._files[os.path.normpath(path)]
        f.live[position] ^= 1 << bit
        f.durable[position] ^= 1 << bit

    def durable_bytes(self, path: str) -> bytes:
        return bytes(self._files[os.path.normpath(path)].durable)
