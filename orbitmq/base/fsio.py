"""Atomic metadata writes: write tmp, fsync, keep .bak of the previous file, rename, fsync the directory."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if target.exists():
        bak = target.with_name(target.name + ".bak")
        try:
            _copy_bytes(target, bak)
        except OSError:
            pass
    os.replace(tmp, target)
    fsync_dir(target.parent)


def _copy_bytes(src: Path, dst: Path) -> None:
    data = src.read_bytes()
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
