"""Files of the dedup table: an append-only journal of entries in segment files, one generation at a time.

Each line of a segment is one JSON object (its rows are dedup.py's, this module never parses them):
`{"version":3,"physOffset":P,"rows":[[tableKey, entry], ...]}` (tableKey: UNIQ_KEY and topic, entry: encode_entry);
P is the CommitLog offset the rows cover (a restart scans the CommitLog from the last line's P). Lines of versions
1 and 2 (keys without the topic) are skipped by dedup.py, which then scans the CommitLog's window. Segments are named
`<generation>-<position>.jsonl`: `position` is the table's order-log position of the segment's first row, so a
segment whose successor starts at or before the table's evicted position holds only evicted rows and is deleted.

Why a journal: writing the whole table (200k entries, ~20 MB) every interval cost ~0.3 s of event-loop CPU and a
20 MB write + fsync beside the SYNC_FLUSH group commits, every 10 s, at any send rate. A journal tick costs what
was added since the previous tick.

A start writes the table loaded so far as the first segment of a new generation (tmp + rename, so a generation
exists only complete) and then deletes the older generations. A torn or corrupt line (crash mid-write, bit rot) is
skipped with a warning: the entries it held are lost to dedup (a retry of them would be stored again), nothing else.
File operations take a lock: a tick's append runs in a worker thread while stop() may append from the loop.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from orbitmq.base.fsio import atomic_write, fsync_dir

log = logging.getLogger(__name__)

JOURNAL_DIR = "dedup"
LEGACY_SNAPSHOT = "dedup.json"  # the whole-table snapshot of earlier versions: read once, then removed
SEGMENT_ROWS = 20_000  # rows per segment before the next append starts a new one
_NAME = re.compile(r"^(\d{10})-(\d{20})\.jsonl$")
_IOV_MAX = 512  # buffers per writev call (Linux allows 1024)


def _write_all(fd: int, bufs: list[bytes]) -> None:
    """writev until every byte is written (a regular file may take less on a signal or a full disk → OSError)."""
    views = [memoryview(b) for b in bufs]
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]


def _name(generation: int, position: int) -> str:
    return f"{generation:010d}-{position:020d}.jsonl"


class DedupJournal:
    def __init__(self, config_dir: str, segment_rows: int = SEGMENT_ROWS) -> None:
        self.dir = Path(config_dir) / JOURNAL_DIR
        self.legacy = Path(config_dir) / LEGACY_SNAPSHOT
        self.segment_rows = segment_rows
        self.generation = 0
        self._segments: list[int] = []  # first positions of the current generation's segments, ascending
        self._active_rows = 0
        self._lock = threading.Lock()

    # ---- reading ----
    def _generations(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        for name in names:
            m = _NAME.match(name)
            if m:
                out.setdefault(int(m.group(1)), []).append(int(m.group(2)))
        for positions in out.values():
            positions.sort()
        return out

    def read(self) -> Iterator[bytes]:
        """Every stored line, oldest first (later lines override earlier ones), unparsed: a legacy snapshot's
        .bak and file, then the newest generation's segments."""
        for p in (self.legacy.with_name(LEGACY_SNAPSHOT + ".bak"), self.legacy):
            try:
                yield p.read_bytes()
            except OSError:
                continue
        gens = self._generations()
        if not gens:
            return
        gen = max(gens)
        for pos in gens[gen]:
            path = self.dir / _name(gen, pos)
            try:
                data = path.read_bytes()
            except OSError as e:
                log.warning("dedup journal %s unreadable (%s): its entries are not remembered", path, e)
                continue
            yield from (line for line in data.split(b"\n") if line.strip())

    # ---- writing ----
    def start_generation(self, line: bytes, position: int, rows: int) -> None:  # line: ends with a newline
        """Make `line` (the whole table: `rows` entries, the first at `position`) the first segment of a new
        generation, then delete every older generation and the legacy snapshot."""
        with self._lock:
            gens = self._generations()
            self.generation = max(gens, default=0) + 1
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.dir / _name(self.generation, position), line)
            for gen, positions in gens.items():
                for pos in positions:
                    (self.dir / _name(gen, pos)).unlink(missing_ok=True)
            for p in (self.legacy, self.legacy.with_name(LEGACY_SNAPSHOT + ".bak")):
                p.unlink(missing_ok=True)
            self._segments = [position]
            self._active_rows = rows
            fsync_dir(self.dir)

    def append(self, lines: list[bytes], position: int, rows: int, evicted: int) -> None:
        """Append `lines` (each ending with a newline) holding `rows` entries, the first at `position` (a new
        segment when the active one is full), make them durable, and delete segments holding only rows before
        `evicted`. os.writev, not a join: the kernel copies the lines without the GIL (the loop keeps running)."""
        with self._lock:
            if self.generation == 0:  # no start_generation (it failed): this line opens the newest generation
                self.generation = max(self._generations(), default=0) + 1
                self.dir.mkdir(parents=True, exist_ok=True)
            # a new segment needs a new name: its first position must be past the active segment's
            new_segment = not self._segments or (self._active_rows >= self.segment_rows
                                                 and position > self._segments[-1])
            if new_segment:
                self._segments.append(position)
                self._active_rows = 0
            path = self.dir / _name(self.generation, self._segments[-1])
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                for i in range(0, len(lines), _IOV_MAX):
                    _write_all(fd, lines[i : i + _IOV_MAX])
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._active_rows += rows
            dropped = False
            while len(self._segments) > 1 and self._segments[1] <= evicted:
                (self.dir / _name(self.generation, self._segments.pop(0))).unlink(missing_ok=True)
                dropped = True
            if new_segment or dropped:
                fsync_dir(self.dir)

    @property
    def segment_count(self) -> int:
        return len(self._segments)
