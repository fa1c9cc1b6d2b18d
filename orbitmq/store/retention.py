"""Retention: delete expired CommitLog segments (age, delete hour, disk pressure) and flag a full disk.

Decides with an injected clock, local-hour function and disk-usage function so tests drive it without a real
disk; the owner then trims ConsumeQueues and index files below the new CommitLog min offset (on_deleted).
Never deletes the segment being written.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from orbitmq.base import marks
from orbitmq.base.clock import Clock
from orbitmq.store.config import StoreConfig
from orbitmq.store.disk import Disk
from orbitmq.store.segment_list import SegmentList

DELETE_BATCH_MAX = 10


def local_hour(now_ms: int) -> int:
    return datetime.datetime.fromtimestamp(now_ms / 1000).hour


@dataclass(slots=True)
class CleanDecision:
    time_to_delete: bool
    space_to_delete: bool
    force: bool  # delete even unexpired segments (oldest first): the disk is nearly full
    disk_full: bool  # refuse writes


def decide_clean(config: StoreConfig, hour: int, usage_ratio: float, manual: bool = False) -> CleanDecision:
    pct = usage_ratio * 100
    return CleanDecision(
        time_to_delete=manual or hour in config.delete_hours,
        space_to_delete=pct > config.disk_max_used_space_ratio,
        force=pct > config.disk_force_clean_ratio,
        disk_full=pct > config.disk_warning_ratio,
    )


class RetentionService:
    def __init__(
        self,
        config: StoreConfig,
        segments: SegmentList,
        disk: Disk,
        clock: Clock,
        usage_ratio: Callable[[], float],
        on_deleted: Callable[[int], None],
        hour_of: Callable[[int], int] = local_hour,
    ) -> None:
        self.config = config
        self.segments = segments
        self.disk = disk
        self.clock = clock
        self.usage_ratio = usage_ratio
        self.on_deleted = on_deleted  # (new CommitLog min phys offset)
        self.hour_of = hour_of
        self.disk_full = False
        self.deleted_count = 0
        self._manual = False

    def request_manual_delete(self) -> None:
        self._manual = True

    def run_once(self) -> int:
        """One cleaning round; returns how many CommitLog segments were deleted."""
        now = self.clock.now_ms()
        d = decide_clean(self.config, self.hour_of(now), self.usage_ratio(), self._manual)
        self._manual = False
        if d.disk_full != self.disk_full:
            marks.hit("disk full: writes refused" if d.disk_full else "disk full cleared")
        self.disk_full = d.disk_full
        if not (d.time_to_delete or d.space_to_delete or d.force):
            return 0
        keep_ms = self.config.file_reserved_time_hours * 3600 * 1000
        deleted = 0
        while len(self.segments) > 1 and deleted < DELETE_BATCH_MAX:
            first = self.segments.segments[0]
            expired = self.disk.mtime_ms(first.path) + keep_ms <= now
            if not expired and not d.force:
                break
            self.segments.delete_first()
            marks.hit("commitlog segment expired" if expired else "commitlog segment force deleted")
            deleted += 1
        if deleted:
            self.deleted_count += deleted
            self.on_deleted(self.segments.min_offset)
        return deleted
