"""AutoSwitchSlave (sans-IO): the slave side of RIP-44 AutoSwitch HA for one connection attempt at a time.

Owns the connection state (READY -> HANDSHAKE -> TRANSFER), the truncation decision at the master's handshake
(consistent point of the two epoch histories), the checks on transfer frames (offset continuity, stale epochs,
epoch changes recorded), the slave confirm offset and when to ack. It decides; the driver truncates, appends and
persists (store.truncate_dirty / append_raw / replace_epochs). No I/O and no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from orbitmq.base.invariant import check
from orbitmq.replication.autoswitch_frames import HAState, MasterHandshake, SlaveHandshake, TransferFrame
from orbitmq.replication.epoch import EpochCache


@dataclass(frozen=True, slots=True)
class Truncation:
    """Outcome of the handshake: ok=False -> close, wait, retry (`reason` says why). Otherwise cut the log at
    `truncate_to` when it is below the local max (and persist `epochs`), then ack `report_offset`."""

    ok: bool
    reason: str = ""
    truncate_to: int = -1
    report_offset: int = 0
    epochs: tuple[tuple[int, int], ...] = ()


class FrameVerdict(Enum):
    APPEND = "append"  # write frame.data at frame.offset (persist epochs first when new_epoch)
    HEARTBEAT = "heartbeat"  # nothing to write
    STALE_EPOCH = "stale epoch"  # close: a deposed master
    OFFSET_MISMATCH = "offset mismatch"  # close: the stream does not continue our log
    BAD_EPOCH = "bad epoch"  # close: the frame's (epoch, epochStartOffset) cannot extend our history
    NOT_TRANSFERRING = "not transferring"  # close: a transfer frame before the handshake (state mismatch)


class AutoSwitchSlave:
    def __init__(self, broker_id: int, epochs: EpochCache, *, sync_from_last_file: bool = False,
                 async_learner: bool = False, heartbeat_ms: int = 5_000, housekeeping_ms: int = 20_000) -> None:
        self.broker_id = broker_id
        self.epochs = epochs  # local history; the driver persists it whenever a verdict says so
        self.sync_from_last_file = sync_from_last_file
        self.async_learner = async_learner
        self.heartbeat_ms = heartbeat_ms
        self.housekeeping_ms = housekeeping_ms
        self.state = HAState.READY
        self.master_epoch = 0
        self.confirm_offset = 0
        self.last_reported = -1
        self.last_report_ms = 0
        self.last_read_ms = 0
        self.refused = 0  # frames refused (runtime info)
        self.truncations = 0  # handshakes that cut the log

    # ---- handshake ---------------------------------------------------------------------------------------
    def on_connected(self, now_ms: int) -> SlaveHandshake:
        self.state = HAState.HANDSHAKE
        self.last_reported = -1
        self.last_read_ms = now_ms
        return SlaveHandshake(self.sync_from_last_file, self.async_learner, self.broker_id)

    def on_disconnected(self) -> None:
        self.state = HAState.READY

    def on_master_handshake(self, hs: MasterHandshake, local_max: int, now_ms: int) -> Truncation:
        """Decide where the local log agrees with the master's; the caller applies it, then calls truncated()."""
        self.last_read_ms = now_ms
        if self.state is not HAState.HANDSHAKE:
            return Truncation(False, f"master handshake in state {self.state.name}")
        if hs.epoch < self.epochs.newest:
            self.refused += 1
            return Truncation(False, f"master epoch {hs.epoch} is older than ours ({self.epochs.newest})")
        if not self.epochs.entries:
            if local_max > 0:
                return Truncation(False, f"local log holds {local_max} bytes but no epoch history: cannot find a "
                                         "consistent point (move the store away to resync from scratch)")
            return Truncation(True, report_offset=0)
        master = EpochCache(list(hs.entries), max_offset=hs.max_offset)
        local = self.epochs.copy(max_offset=local_max)
        point = local.find_consistent_point(master)
        if point < 0 and local_max == 0:
            # nothing written locally (e.g. a master of an epoch that never took a write, restarted after a
            # whole-group crash): no byte can diverge, so forget the local history and copy the master's log
            return Truncation(True, report_offset=0, epochs=())
        if point < 0:
            return Truncation(False, f"failed to find a consistent point with the master (local epochs "
                                     f"{self.epochs.entries[-3:]}, master {list(hs.entries[-3:])})")
        check(point <= local_max, f"consistent point {point} beyond the local log end {local_max}")
        local.truncate_suffix_by_offset(point)  # also an empty epoch starting exactly at the point
        return Truncation(True, truncate_to=point if point < local_max else -1, report_offset=point,
                          epochs=tuple(local.entries))

    def truncated(self, t: Truncation) -> None:
        """The driver applied `t` (log cut, epochs persisted): enter TRANSFER."""
        check(t.ok, "truncated() after a failed handshake")
        self.epochs.entries = list(t.epochs)
        if t.truncate_to >= 0:
            self.truncations += 1
        self.confirm_offset = min(self.confirm_offset, t.report_offset)  # never past what we still hold
        self.state = HAState.TRANSFER

    # ---- transfer ---------------------------------------------------------------------------------------
    def on_frame(self, frame: TransferFrame, local_max: int, now_ms: int) -> tuple[FrameVerdict, bool]:
        """(verdict, new_epoch): new_epoch = the frame opened an epoch now in self.epochs (persist them)."""
        self.last_read_ms = now_ms
        if self.state is not HAState.TRANSFER:
            self.refused += 1
            return FrameVerdict.NOT_TRANSFERRING, False
        if frame.epoch < self.epochs.newest:
            self.refused += 1
            return FrameVerdict.STALE_EPOCH, False
        self.master_epoch = frame.epoch
        if frame.is_heartbeat:
            self._confirm(frame.confirm_offset, local_max)
            return FrameVerdict.HEARTBEAT, False
        if local_max != 0 and frame.offset != local_max:
            self.refused += 1
            return FrameVerdict.OFFSET_MISMATCH, False
        new_epoch = False
        if self.epochs.entries and frame.epoch == self.epochs.newest and frame.epoch_start != self.epochs.entries[-1][1]:
            self.refused += 1
            return FrameVerdict.BAD_EPOCH, False
        if frame.epoch != self.epochs.newest or not self.epochs.entries:
            new_epoch = self.epochs.append(frame.epoch, frame.epoch_start)
            if not new_epoch:
                self.refused += 1
                return FrameVerdict.BAD_EPOCH, False
        return FrameVerdict.APPEND, new_epoch

    def after_append(self, frame: TransferFrame, local_max: int) -> None:
        self._confirm(frame.confirm_offset, local_max)

    def _confirm(self, master_confirm: int, local_max: int) -> None:
        self.confirm_offset = max(0, min(master_confirm, local_max))

    def report_due(self, local_max: int, now_ms: int) -> bool:
        return self.state is HAState.TRANSFER and (
            local_max != self.last_reported or now_ms - self.last_report_ms >= self.heartbeat_ms)

    def on_reported(self, offset: int, now_ms: int) -> None:
        self.last_reported = offset
        self.last_report_ms = now_ms

    def silent_too_long(self, now_ms: int) -> bool:
        return now_ms - self.last_read_ms > self.housekeeping_ms
