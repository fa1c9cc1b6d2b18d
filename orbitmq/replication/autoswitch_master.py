"""AutoSwitchMaster (sans-IO): the master side of RIP-44 AutoSwitch HA for one master term.

Owns per-slave connection state (HANDSHAKE -> TRANSFER), the start-offset rule, transfer planning (one epoch per
frame, batch size, segment end, heartbeats), caught-up times, the confirm offset (min over the SyncStateSet), the
SyncStateSet shrink/expand proposals with the in-flight union rule, and the ack counting of SYNC puts.
No I/O and no clock: callers pass now_ms and the log bounds. Rules: docs/design/autoswitch-ha.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbitmq.base.invariant import check
from orbitmq.replication.autoswitch_frames import HAState, MasterHandshake, SlaveHandshake
from orbitmq.replication.epoch import EpochCache

ALL_ACK_IN_SYNC_STATE_SET = -1  # needed_acks() in allAckInSyncStateSet mode
IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
PRE_HISTORY_EPOCH = 0  # controller epochs start at 1


@dataclass(frozen=True, slots=True)
class MasterConfig:
    segment_size: int
    batch_size: int = 32 * 1024  # haTransferBatchSize
    heartbeat_ms: int = 5_000  # haSendHeartbeatInterval
    housekeeping_ms: int = 20_000  # haHousekeepingInterval
    max_time_slave_not_catchup_ms: int = 15_000  # haMaxTimeSlaveNotCatchup
    all_ack_in_sync_state_set: bool = False  # allAckInSyncStateSet
    in_sync_replicas: int = 1  # inSyncReplicas
    min_in_sync_replicas: int = 1  # minInSyncReplicas


@dataclass(frozen=True, slots=True)
class LogBounds:
    """The master's CommitLog as the planner needs it."""

    min_offset: int
    max_offset: int
    last_file_start: int  # start of the last CommitLog segment (syncFromLastFile)


@dataclass(frozen=True, slots=True)
class Chunk:
    """What to send next on a connection: `size` bytes from `offset` (0 = heartbeat), all of one epoch."""

    offset: int
    size: int
    epoch: int
    epoch_start: int


@dataclass(slots=True)
class SlaveConn:
    conn_id: int
    connected_ms: int
    state: HAState = HAState.HANDSHAKE
    broker_id: int = -1
    learner: bool = False
    sync_from_last_file: bool = False
    ack_offset: int = -1  # last acked slave max offset (-1 = none yet)
    next_offset: int = -1  # next byte to stream (-1 until the first ack)
    last_master_max_offset: int = -1  # master max offset when the last frame was sent
    last_transfer_ms: int = 0
    caught_up_ms: int = 0  # 0 = never caught up on this connection
    last_read_ms: int = 0
    last_write_ms: int = 0


class AutoSwitchMaster:
    def __init__(self, config: MasterConfig, broker_id: int, epochs: EpochCache, sync_state_set: set[int],
                 sss_epoch: int, confirm_offset: int) -> None:
        check(bool(epochs.entries), "a master needs at least its own epoch entry")
        if epochs.entries[0][1] > 0 and epochs.entries[0][0] > PRE_HISTORY_EPOCH:
            # bytes written before the first recorded epoch (a store that ran without controller mode) are
            # served as the pre-history epoch 0 starting at 0, so every frame still names one epoch
            epochs.entries.insert(0, (PRE_HISTORY_EPOCH, 0))
        self.config = config
        self.broker_id = broker_id
        self.epochs = epochs  # the master's history; the driver keeps it equal to the store's epoch file
        self.sync_state_set: set[int] = set(sync_state_set) | {broker_id}
        self.sss_epoch = sss_epoch
        self.proposed: set[int] | None = None  # in flight to the controller (isSynchronizingSyncStateSet)
        self.confirm_offset = confirm_offset
        self.conns: dict[int, SlaveConn] = {}
        self._next_id = 0

    @property
    def epoch(self) -> int:
        return self.epochs.newest

    # ---- connections ---------------------------------------------------------------------------------
    def on_connect(self, now_ms: int) -> int:
        self._next_id += 1
        cid = self._next_id
        self.conns[cid] = SlaveConn(cid, now_ms, last_read_ms=now_ms, last_write_ms=now_ms)
        return cid

    def on_handshake(self, cid: int, hs: SlaveHandshake, master_max: int, now_ms: int) -> MasterHandshake:
        """The slave introduced itself: answer with our epoch history (it truncates, then acks its offset)."""
        c = self.conns[cid]
        c.last_read_ms = now_ms
        c.broker_id, c.learner, c.sync_from_last_file = hs.broker_id, hs.async_learner, hs.sync_from_last_file
        c.state = HAState.TRANSFER
        entries = tuple(self.epochs.entries_for_handshake())
        return MasterHandshake(master_max, self.epoch, entries)

    def on_disconnect(self, cid: int, master_max: int) -> set[int] | None:
        """A connection ended: its member leaves the set at once (removeConnection); returns a proposal or None."""
        c = self.conns.pop(cid, None)
        if c is None or c.broker_id not in self.sync_state_set or self._connected(c.broker_id):
            return None
        return self._propose(self.sync_state_set - {c.broker_id}, master_max)

    def _connected(self, broker_id: int) -> bool:
        return any(c.broker_id == broker_id for c in self.conns.values())

    def expired(self, now_ms: int) -> list[int]:
        """Connections silent for longer than haHousekeepingInterval (the driver closes them)."""
        return [cid for cid, c in self.conns.items() if now_ms - c.last_read_ms > self.config.housekeeping_ms]

    # ---- acks ------------------------------------------------------------------------------------------
    def on_ack(self, cid: int, offset: int, log: LogBounds, now_ms: int) -> tuple[str, set[int] | None]:
        """A slave acked its max offset. Returns (error, proposal): error non-empty = close the connection."""
        c = self.conns[cid]
        c.last_read_ms = now_ms
        if c.state is not HAState.TRANSFER:
            return "ack before handshake", None
        if offset > log.max_offset:
            return f"slave offset {offset} beyond the master's {log.max_offset} (not truncated)", None
        if c.next_offset < 0:
            start = self._start_offset(c, offset, log)
            if start < log.min_offset:
                return f"slave offset {offset} is below the master's min offset {log.min_offset}", None
            c.next_offset = start
        if offset < c.ack_offset:
            return f"slave offset went back from {c.ack_offset} to {offset}", None
        c.ack_offset = offset
        if not c.learner and offset >= self._reference_max(c, log.max_offset):
            c.caught_up_ms = now_ms if offset >= log.max_offset else c.last_transfer_ms
        self.refresh_confirm(log.max_offset)
        return "", self._maybe_expand(c, log.max_offset)

    @staticmethod
    def _reference_max(c: SlaveConn, master_max: int) -> int:
        """lastMasterMaxOffset: the master's max when the last data frame left (its current max before any)."""
        return c.last_master_max_offset if c.last_master_max_offset >= 0 else master_max

    def _start_offset(self, c: SlaveConn, offset: int, log: LogBounds) -> int:
        if offset > 0:
            return offset
        return log.last_file_start if c.sync_from_last_file else log.min_offset

    # ---- transfer --------------------------------------------------------------------------------------
    def next_chunk(self, cid: int, log: LogBounds, now_ms: int) -> Chunk | None:
        """What to send next (size 0 = heartbeat), None = nothing now. Never crosses an epoch or segment end."""
        c = self.conns[cid]
        if c.state is not HAState.TRANSFER or c.next_offset < 0:
            return None
        start = c.next_offset
        idx = self.epochs.index_at(start)
        check(idx >= 0, f"offset {start} lies before the first epoch {self.epochs.entries[:1]}")
        epoch, epoch_start = self.epochs.entries[idx]
        available = log.max_offset - start
        if available > 0:
            seg = self.config.segment_size
            limit = min(available, self.config.batch_size, seg - start % seg, self.epochs.end_of(idx) - start)
            if limit > 0:
                return Chunk(start, limit, epoch, epoch_start)
        if available <= 0 and c.ack_offset >= log.max_offset and not c.learner:
            c.caught_up_ms = now_ms  # idle and fully acked: still caught up
        if now_ms - c.last_write_ms >= self.config.heartbeat_ms:
            return Chunk(start, 0, epoch, epoch_start)
        return None

    def on_sent(self, cid: int, chunk: Chunk, master_max: int, now_ms: int) -> None:
        c = self.conns[cid]
        check(chunk.offset == c.next_offset, f"sent {chunk.offset} but the stream is at {c.next_offset}")
        c.next_offset = chunk.offset + chunk.size
        c.last_write_ms = now_ms
        if chunk.size:
            c.last_master_max_offset = master_max
            c.last_transfer_ms = now_ms

    # ---- confirm offset and SYNC acks --------------------------------------------------------------------
    def effective_set(self) -> set[int]:
        """The set used for acks: the union of local and proposed while a change is in flight (#5663)."""
        return self.sync_state_set | self.proposed if self.proposed is not None else set(self.sync_state_set)

    def _member_acks(self) -> dict[int, int]:
        acks: dict[int, int] = {}
        for c in self.conns.values():
            if c.state is HAState.TRANSFER and c.ack_offset >= 0:
                acks[c.broker_id] = max(acks.get(c.broker_id, -1), c.ack_offset)
        return acks

    def compute_confirm(self, master_max: int) -> int:
        """min over set members' acks starting from master_max; the old value while a member has no acked
        connection (a member that is not connected, or connected and not acked yet, could hold less)."""
        acks = self._member_acks()
        value = master_max
        for member in self.effective_set():
            if member == self.broker_id:
                continue
            if member not in acks:
                return self.confirm_offset
            value = min(value, acks[member])
        return value

    def refresh_confirm(self, master_max: int) -> bool:
        """Recompute the confirm offset (never backwards within a term); True if it moved."""
        value = min(self.compute_confirm(master_max), master_max)
        if value > self.confirm_offset:
            self.confirm_offset = value
            return True
        return False

    def needed_acks(self) -> int:
        """Acks a SYNC put waits for, the master included: ALL_ACK_IN_SYNC_STATE_SET (-1) or inSyncReplicas."""
        return ALL_ACK_IN_SYNC_STATE_SET if self.config.all_ack_in_sync_state_set else self.config.in_sync_replicas

    def in_sync_replicas_nums(self) -> int:
        size = len(self.sync_state_set)
        return max(size, len(self.proposed)) if self.proposed is not None else size

    def check_put(self) -> str | None:
        """Before an append that needs HA: IN_SYNC_REPLICAS_NOT_ENOUGH when the set is below minInSyncReplicas."""
        if self.in_sync_replicas_nums() < self.config.min_in_sync_replicas:
            return IN_SYNC_REPLICAS_NOT_ENOUGH
        return None

    def acked_offset(self, master_max: int) -> int:
        """Every SYNC put ending at or below this offset has the acks it needs (GroupTransferService)."""
        needed = self.needed_acks()
        if needed == ALL_ACK_IN_SYNC_STATE_SET:
            return master_max if len(self.effective_set()) <= 1 else self.confirm_offset
        if needed <= 1:
            return master_max
        acks = sorted((c.ack_offset for c in self.conns.values() if c.ack_offset >= 0), reverse=True)
        return min(acks[needed - 2], master_max) if len(acks) >= needed - 1 else 0

    # ---- SyncStateSet ------------------------------------------------------------------------------------
    def _maybe_expand(self, c: SlaveConn, master_max: int) -> set[int] | None:
        if c.learner or c.broker_id < 0 or c.broker_id in self.effective_set():
            return None
        last_start = self.epochs.entries[-1][1]
        if c.ack_offset >= self.confirm_offset and c.ack_offset >= last_start and \
                c.ack_offset >= self._reference_max(c, master_max):
            return self._propose(self.sync_state_set | {c.broker_id}, master_max)
        return None

    def check_shrink(self, now_ms: int, master_max: int) -> set[int] | None:
        """Periodic check: members not caught up for haMaxTimeSlaveNotCatchup, or without a connection, leave."""
        keep = {self.broker_id}
        limit = self.config.max_time_slave_not_catchup_ms
        for member in self.sync_state_set - {self.broker_id}:
            times = [c.caught_up_ms for c in self.conns.values() if c.broker_id == member]
            if times and now_ms - max(times) <= limit:
                keep.add(member)
        if keep == self.sync_state_set:
            return None
        return self._propose(keep, master_max)

    def _propose(self, new_set: set[int], master_max: int) -> set[int] | None:
        """Start reporting `new_set` unless a change is already in flight; the local set changes only when the
        controller answers (set_sync_state_set)."""
        if self.proposed is not None or new_set == self.sync_state_set:
            return None
        self.proposed = set(new_set)
        self.refresh_confirm(master_max)
        return set(new_set)

    def set_sync_state_set(self, new_set: set[int], sss_epoch: int, master_max: int) -> bool:
        """The controller's answer (or notification). Older epochs are ignored; returns True when applied."""
        if sss_epoch < self.sss_epoch:
            return False
        self.sync_state_set = set(new_set) | {self.broker_id}
        self.sss_epoch = sss_epoch
        self.proposed = None
        self.refresh_confirm(master_max)
        return True

    def proposal_failed(self) -> None:
        """The report did not reach the controller: forget the proposal (the next check proposes again)."""
        self.proposed = None

    def lag_bytes(self, master_max: int) -> dict[int, int]:
        return {c.broker_id: (master_max - c.ack_offset if c.ack_offset >= 0 else -1)
                for c in self.conns.values()}
