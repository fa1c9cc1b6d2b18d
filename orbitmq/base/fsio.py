"""Atomic metadata writes: write tmp, fsync, keep .bak of the previous file, rename, fsync the directory.
Directories it creates are made durable too (makedirs_durable fsyncs each new one's parent).

Writers of one path in one process take turns (a per-path lock), so two threads never share its .tmp or .bak.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_guard = threading.Lock()
_file_locks: dict[str, tuple[threading.Lock, list[int]]] = {}  # absolute path -> (lock, [users]); dropped unused


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: str | os.PathLike[str]) -> None:
    """os.makedirs(exist_ok=True), then fsync the parent of every directory it created (its entry is durable)."""
    target = Path(path)
    missing: list[Path] = []
    p = target
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    os.makedirs(target, exist_ok=True)
    for d in reversed(missing):
        fsync_dir(d.parent)


@contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the in-process lock of `path` (every atomic_write of it takes the same one)."""
    key = os.path.abspath(path)
    with _guard:
        entry = _file_locks.get(key)
        if entry is None:
            entry = _file_locks[key] = (threading.Lock(), [0])
        entry[1][0] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _guard:
            entry[1][0] -= 1
            if entry[1][0] == 0 and _file_locks.get(key) is entry:
                del _file_locks[key]


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content. Concurrent calls for
    one path (threads of this process) run one after the other; the last to take the lock wins."""
    target = Path(path)
    makedirs_durable(target.parent)
    with file_lock(target):
        tmp = target.with_name(target.name + ".tmp")
        _write_synced(tmp, data)
        if target.exists():
            bak = target.with_name(target.name + ".bak")
            try:
                _write_synced(bak, target.read_bytes())
            except OSError:
                pass
        os.replace(tmp, target)
        fsync_dir(target.parent)


def _write_synced(dst: Path, data: bytes) -> None:
    with open(dst, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_with_backup(path: str | os.PathLike[str]) -> list[bytes]:
    """Candidates to load, newest first: the file itself, then its .bak (missing ones are skipped)."""
    target = Path(path)
    out: list[bytes] = []
    for p in (target, target.with_name(target.name + ".bak")):
        try:
            out.append(p.read_bytes())
        except OSError:
            continue
    return out
