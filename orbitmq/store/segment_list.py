"""SegmentList: an ordered run of equal-size Segments in one directory forming one logical byte log.

Used by the CommitLog (and exported for a Raft log). Owns file naming, lookup by offset, rolling to a new
segment, truncation and deletion of whole segments. It does not interpret bytes. The next segment can be created
ahead, off the event loop (`prepare_next`, allocate.py): `roll` then takes the ready file.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator

from orbitmq.base import marks
from orbitmq.base.errors import CorruptionError
from orbitmq.store.allocate import AheadAllocator
from orbitmq.store.disk import Disk
from orbitmq.store.layout import parse_segment_name, segment_name
from orbitmq.store.segment import Segment


class SegmentList:
    __slots__ = ("directory", "segment_size", "disk", "segments", "_starts", "_ahead", "ahead_of")

    def __init__(self, directory: str, segment_size: int, disk: Disk) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.disk = disk
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        self._ahead = AheadAllocator(disk)
        self.ahead_of = -1  # start offset of the segment whose successor is prepared ahead (-1: none)

    def load(self) -> None:
        """Open every segment file; a file of the wrong size or a gap between files is corruption."""
        self.disk.makedirs(self.directory)
        for name in self.disk.list_files(self.directory):
            start = parse_segment_name(name)
            if start is None:
                continue
            path = os.path.join(self.directory, name)
            size = self.disk.file_size(path)
            if size != self.segment_size:
                raise CorruptionError(path, 0, f"segment size {size} != configured {self.segment_size}")
            if self.segments and start != self.segments[-1].start_offset + self.segment_size:
                raise CorruptionError(path, 0, "segment files are not contiguous")
            self._push(Segment.open(self.disk, self.directory, start, self.segment_size))
        for seg in self.segments:  # until recovery says otherwise, every loaded segment counts as written
            seg.wrote_position = seg.flushed_position = seg.size

    def _push(self, seg: Segment) -> None:
        self.segments.append(seg)
        self._starts.append(seg.start_offset)

    def __len__(self) -> int:
        return len(self.segments)

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    @property
    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    @property
    def min_offset(self) -> int:
        return self.segments[0].start_offset if self.segments else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte (0 for an empty log)."""
        return self.segments[-1].end_offset if self.segments else 0

    @property
    def flushed_offset(self) -> int:
        for seg in reversed(self.segments):
            if seg.flushed_position:
                return seg.start_offset + seg.flushed_position
        return self.min_offset

    def find(self, offset: int) -> Segment | None:
        """The segment holding byte `offset` (None if before the first or past the last segment)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.start_offset + seg.size else None

    def roll(self, start_offset: int | None = None) -> Segment:
        """Create the next segment (at `start_offset` for an empty log) and return it."""
        if self.segments:
            start = self.segments[-1].start_offset + self.segment_size
        else:
            start = 0 if start_offset is None else start_offset - start_offset % self.segment_size
        path = os.path.join(self.directory, segment_name(start))
        if not self._ahead.is_prepared(path):
            self._ahead.discard()  # a file prepared for another start (none normally) must not stay behind
        self.ahead_of = -1
        seg = Segment(start, self.segment_size, path, self._ahead.take(path, self.segment_size))
        self._push(seg)
        return seg

    def prepare_next(self) -> None:
        """Start creating the segment after the last one off the event loop (roll() will take it)."""
        last = self.segments[-1] if self.segments else None
        if last is not None:
            nxt = last.start_offset + self.segment_size
            self._ahead.prepare(os.path.join(self.directory, segment_name(nxt)), self.segment_size)
            self.ahead_of = last.start_offset

    def discard_prepared(self) -> None:
        """Close and delete a segment prepared ahead and not rolled into."""
        self._ahead.discard()
        self.ahead_of = -1

    def set_end(self, offset: int) -> None:
        """After recovery/truncation: positions up to `offset` are written (and durable), beyond it nothing."""
        for seg in self.segments:
            if offset >= seg.start_offset + seg.size:
                seg.wrote_position = seg.flushed_position = seg.size
            elif offset <= seg.start_offset:
                seg.wrote_position = seg.flushed_position = 0
            else:
                seg.wrote_position = seg.flushed_position = offset - seg.start_offset

    def truncate(self, offset: int) -> None:
        """Drop every byte at/after `offset`: later segments are deleted, the rest of the holding one zeroed."""
        self.discard_prepared()
        while self.segments and self.segments[-1].start_offset > offset:
            seg = self.segments.pop()
            self._starts.pop()
            seg.close()
            self.disk.delete(seg.path)
            marks.hit("segment deleted by truncation")
        seg = self.find(offset) if self.segments else None
        if seg is not None:
            if seg.zero_from(offset - seg.start_offset):
                marks.hit("zeroed stale tail")
        self.set_end(offset)

    def delete_first(self) -> Segment:
        seg = self.segments.pop(0)
        self._starts.pop(0)
        seg.close()
        self.disk.delete(seg.path)
        return seg

    def close(self) -> None:
        self.discard_prepared()  # a file prepared ahead and never written is not left for the next start
        for seg in self.segments:
            seg.close()
        self.segments.clear()
        self._starts.clear()
