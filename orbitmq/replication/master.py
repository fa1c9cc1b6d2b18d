"""HAMaster (sans-IO): per-slave replication state on the master.

Tracks each connected slave's reported (acked) offset and where to stream next, plans chunks (≤ batch size,
never crossing a CommitLog segment end, heartbeats when idle), computes the confirm offset (highest offset any
slave acknowledged, monotonic: RocketMQ's push2SlaveMaxOffset) and says whether a slave is "OK" for SYNC_MASTER.
No I/O and no clock: callers pass now_ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbitmq.base.invariant import check

DEFAULT_BATCH_SIZE = 32 * 1024
DEFAULT_HEARTBEAT_MS = 5_000
DEFAULT_HOUSEKEEPING_MS = 20_000
DEFAULT_FALLBEHIND_MAX = 256 * 1024 * 1024


@dataclass(slots=True)
class SlaveSession:
    session_id: int
    address: str
    connected_ms: int
    acked_offset: int = -1  # last reported slave max offset (-1 until the first report)
    next_offset: int = -1  # next byte to stream (-1 until the first report)
    last_read_ms: int = 0
    last_write_ms: int = 0


class HAMaster:
    def __init__(
        self,
        epoch: int,
        segment_size: int,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
        housekeeping_ms: int = DEFAULT_HOUSEKEEPING_MS,
        fallbehind_max: int = DEFAULT_FALLBEHIND_MAX,
    ) -> None:
        check(epoch > 0, "master epoch must be > 0")
        self.epoch = epoch
        self.segment_size = segment_size
        self.batch_size = batch_size
        self.heartbeat_ms = heartbeat_ms
        self.housekeeping_ms = housekeeping_ms
        self.fallbehind_max = fallbehind_max
        self.sessions: dict[int, SlaveSession] = {}
        self.confirm_offset = 0
        self._next_id = 0

    # ---- connections -------------------------------------------------------------------------------
    def on_connect(self, address: str, now_ms: int) -> int:
        self._next_id += 1
        sid = self._next_id
        self.sessions[sid] = SlaveSession(sid, address, now_ms, last_read_ms=now_ms, last_write_ms=now_ms)
        return sid

    def on_disconnect(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)

    def on_report(self, session_id: int, offset: int, master_max_offset: int, now_ms: int) -> bool:
        """A slave reported its max offset. True when the confirm offset moved (wake SYNC_MASTER waiters)."""
        s = self.sessions[session_id]
        s.last_read_ms = now_ms
        if s.next_offset < 0:
            if offset == 0:
                # an empty slave starts at the beginning of the master's last segment (classic rule)
                s.next_offset = master_max_offset - master_max_offset % self.segment_size
            else:
                s.next_offset = offset
        if offset > s.acked_offset:
            s.acked_offset = offset
        # a slave never confirms more than the master has (a diverged slave is handled by the driver)
        acked = min(offset, master_max_offset)
        if acked > self.confirm_offset:
            self.confirm_offset = acked
            return True
        return False

    def diverged(self, session_id: int, master_max_offset: int) -> bool:
        """The slave holds bytes the master does not: never stream to it (RIP-32 will truncate it instead)."""
        s = self.sessions[session_id]
        return s.acked_offset > master_max_offset

    # ---- streaming -----------------------------------------------------------------------------------
    def next_chunk(self, session_id: int, master_max_offset: int, now_ms: int) -> tuple[int, int] | None:
        """(start phys offset, size) to send next; size 0 = heartbeat; None = nothing to send now."""
        s = self.sessions[session_id]
        if s.next_offset < 0:
            return None  # wait for the first report
        start = s.next_offset
        available = master_max_offset - start
        if available > 0:
            seg_end = start - start % self.segment_size + self.segment_size
            return start, min(available, self.batch_size, seg_end - start)
        if now_ms - s.last_write_ms >= self.heartbeat_ms:
            return start, 0
        return None

    def on_sent(self, session_id: int, start: int, size: int, now_ms: int) -> None:
        s = self.sessions[session_id]
        check(start == s.next_offset, f"sent {start} but the stream is at {s.next_offset}")
        s.next_offset = start + size
        s.last_write_ms = now_ms

    def expired(self, now_ms: int) -> list[int]:
        """Sessions silent for longer than the housekeeping interval (the driver closes them)."""
        return [sid for sid, s in self.sessions.items() if now_ms - s.last_read_ms > self.housekeeping_ms]

    # ---- SYNC_MASTER -----------------------------------------------------------------------------------
    def is_slave_ok(self, master_put_where: int) -> bool:
        """At least one slave reported and the best one is less than fallbehind_max behind (isSlaveOK)."""
        best = max((s.acked_offset for s in self.sessions.values()), default=-1)
        return best >= 0 and master_put_where - best < self.fallbehind_max

    def lag_bytes(self, master_max_offset: int) -> dict[str, int]:
        """Per connected slave address: bytes it still lacks (-1 until its first report)."""
        return {s.address: (master_max_offset - s.acked_offset if s.acked_offset >= 0 else -1)
                for s in self.sessions.values()}
