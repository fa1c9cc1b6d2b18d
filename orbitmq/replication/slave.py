"""HASlave (sans-IO): the slave's decisions about frames from its master and when to report its offset.

A data frame is appended only if its epoch is not stale and it starts exactly at the slave's max offset (an
empty slave accepts any start: it adopts the master's last segment). Reports go out after every append that
grew the log and at least every heartbeat interval. No I/O and no clock: callers pass now_ms.
"""

from __future__ import annotations

from enum import Enum

from orbitmq.replication.epoch import EpochCache
from orbitmq.replication.frames import DataFrame
from orbitmq.replication.master import DEFAULT_HEARTBEAT_MS, DEFAULT_HOUSEKEEPING_MS


class Verdict(Enum):
    APPEND = "append"  # write frame.data at frame.phys_offset
    HEARTBEAT = "heartbeat"  # nothing to write
    STALE_EPOCH = "stale epoch"  # refuse: a deposed master; close the connection
    OFFSET_MISMATCH = "offset mismatch"  # refuse: the stream does not continue our log; close and reconnect


class HASlave:
    def __init__(self, epochs: EpochCache, *, heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
                 housekeeping_ms: int = DEFAULT_HOUSEKEEPING_MS) -> None:
        self.epochs = epochs
        self.heartbeat_ms = heartbeat_ms
        self.housekeeping_ms = housekeeping_ms
        self.last_reported = -1
        self.last_report_ms = 0
        self.last_read_ms = 0
        self.refused = 0  # frames refused since start (runtime info, tests)

    def on_connected(self, now_ms: int) -> None:
        self.last_reported = -1  # first report right away
        self.last_read_ms = now_ms

    def on_frame(self, frame: DataFrame, local_max_offset: int, now_ms: int) -> tuple[Verdict, bool]:
        """(verdict, new_epoch): new_epoch is True when the frame opened a newer epoch (persist it)."""
        self.last_read_ms = now_ms
        if self.epochs.is_stale(frame.epoch):
            self.refused += 1
            return Verdict.STALE_EPOCH, False
        if frame.is_heartbeat:
            return Verdict.HEARTBEAT, False
        if local_max_offset != 0 and frame.phys_offset != local_max_offset:
            self.refused += 1
            return Verdict.OFFSET_MISMATCH, False
        return Verdict.APPEND, self.epochs.observe(frame.epoch, frame.phys_offset)

    def report_due(self, local_max_offset: int, now_ms: int) -> bool:
        return local_max_offset != self.last_reported or now_ms - self.last_report_ms >= self.heartbeat_ms

    def on_reported(self, offset: int, now_ms: int) -> None:
        self.last_reported = offset
        self.last_report_ms = now_ms

    def silent_too_long(self, now_ms: int) -> bool:
        return now_ms - self.last_read_ms > self.housekeeping_ms
