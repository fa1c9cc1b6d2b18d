"""Segment: one fixed-size file of a segmented log (CommitLog or ConsumeQueue), named by its start offset.

Tracks how far it was written and flushed; all bytes go through its Backing (see disk.py). Knows nothing of
records: callers write, read and flush byte ranges by file position.
"""

from __future__ import annotations

import os

from orbitmq.store.disk import Backing, Disk
from orbitmq.store.layout import segment_name

_ZERO_CHUNK = bytes(1 << 20)


class Segment:
    __slots__ = ("start_offset", "size", "path", "backing", "buf", "wrote_position", "flushed_position")

    def __init__(self, start_offset: int, size: int, path: str, backing: Backing) -> None:
        self.start_offset = start_offset
        self.size = size
        self.path = path
        self.backing = backing
        self.buf = backing.buf
        self.wrote_position = 0
        self.flushed_position = 0

    @classmethod
    def create(cls, disk: Disk, directory: str, start_offset: int, size: int) -> Segment:
        path = os.path.join(directory, segment_name(start_offset))
        return cls(start_offset, size, path, disk.create(path, size))

    @classmethod
    def open(cls, disk: Disk, directory: str, start_offset: int, size: int) -> Segment:
        path = os.path.join(directory, segment_name(start_offset))
        return cls(start_offset, size, path, disk.open(path, size))

    @property
    def end_offset(self) -> int:
        """Offset just past the last written byte."""
        return self.start_offset + self.wrote_position

    @property
    def free_bytes(self) -> int:
        return self.size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.size

    def write_at(self, position: int, data: bytes | memoryview) -> None:
        n = len(data)
        self.buf[position : position + n] = data
        self.backing.mark_written(position, position + n)

    def append(self, data: bytes | memoryview) -> int:
        """Write at the current position; returns the position written at."""
        pos = self.wrote_position
        self.write_at(pos, data)
        self.wrote_position = pos + len(data)
        return pos

    def view(self, position: int, size: int) -> memoryview:
        return self.buf[position : position + size]

    def flush_range(self) -> tuple[int, int]:
        """The (start, end) positions that are written but not flushed."""
        return self.flushed_position, self.wrote_position

    def zero_from(self, position: int) -> int:
        """Zero every non-zero byte from `position` to the end of the file; returns bytes rewritten.

        Stale bytes past a truncation point must not look like records to a later recovery.
        """
        rewritten = 0
        pos = position
        end = self.backing.data_end(position)  # past a hole nothing was ever written: don't read it
        while pos < end:
            n = min(len(_ZERO_CHUNK), end - pos)
            chunk = self.buf[pos : pos + n]
            if chunk != _ZERO_CHUNK[:n]:
                self.write_at(pos, _ZERO_CHUNK[:n])
                rewritten += n
            pos += n
        if rewritten:
            self.backing.flush(position, self.size)
        return rewritten

    def close(self) -> None:
        self.buf = memoryview(b"")
        self.backing.close()
