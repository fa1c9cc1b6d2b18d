"""atomic_write_paced: chunked content, previous file kept as .bak, readable through read_with_backup."""

from __future__ import annotations

import os
from pathlib import Path

from orbitmq.base.fsio import atomic_write_paced, read_with_backup


def test_paced_write_replaces_and_keeps_the_previous_file_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "snap.json"
    first = os.urandom(10_000)
    atomic_write_paced(path, first, chunk=3_000)  # several chunks, the last one short
    assert path.read_bytes() == first and not path.with_name("snap.json.bak").exists()
    second = b"x" * 7
    atomic_write_paced(path, second, chunk=3_000)
    assert read_with_backup(path) == [second, first]
    assert not path.with_name("snap.json.tmp").exists()


def test_crash_between_the_renames_leaves_the_old_content_readable(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    atomic_write_paced(path, b"old")
    os.replace(path, path.with_name("snap.json.bak"))  # the state after the first rename of a later write
    assert read_with_backup(path) == [b"old"]
