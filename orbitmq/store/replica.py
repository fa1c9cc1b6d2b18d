"""Store side of replication: raw appends on a slave and the replica gate on a SYNC_MASTER.

ReplicaState is owned by MessageStore (store.replica) and reaches into its internals on purpose (same package).
- Slave: `append_raw` writes master bytes verbatim at the same phys offsets, then decodes the complete records
  from its dispatch cursor and dispatches them (ConsumeQueue, index, listeners) under the normal visibility rule.
- SYNC_MASTER: `wait` parks a put until the replicas confirmed its end offset (group commit: one confirm
  resolves every waiter it covers); with the gate on, records become visible only up to the replicated offset.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from orbitmq.base import marks
from orbitmq.base.errors import StoreError
from orbitmq.model.enums import takes_queue_offset
from orbitmq.model.record import decode_record
from orbitmq.store.layout import BLANK_MAGIC, SIZE_MAGIC
from orbitmq.store.results import PutResult, PutStatus

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore



class ReplicaState:
    __slots__ = ("store", "gate", "wait_ms", "available", "replicated_offset", "flushed_seen", "_waiters",
                 "_seq", "_cursor", "on_written")

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.gate = False  # visibility limited to replicated_offset (SYNC_MASTER)
        self.wait_ms = 0  # > 0: puts wait for replicas up to this long (SYNC_MASTER)
        self.available: Callable[[int], bool] | None = None  # isSlaveOK(end offset)
        self.replicated_offset = 0
        self.flushed_seen = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._cursor: int | None = None  # slave: next phys offset to decode and dispatch
        self.on_written: Callable[[], None] | None = None  # master: called after every append (wakes HA streams)

    # ---- master ------------------------------------------------------------------------------------
    def set_policy(self, *, wait_ms: int, gate_visibility: bool, available: Callable[[int], bool] | None) -> None:
        self.wait_ms = wait_ms
        self.available = available
        if gate_visibility and not self.gate:
            # what was visible before the gate stays visible (recovered data)
            self.replicated_offset = max(self.replicated_offset, self.store.confirm_offset)
        self.gate = gate_visibility

    def on_replicated(self, offset: int) -> None:
        if offset <= self.replicated_offset:
            return
        self.replicated_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(None)
        if self.gate:
            self.release_visible()

    async def wait(self, result: PutResult, end_offset: int) -> PutResult:
        """Second half of a SYNC_MASTER put: SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT / unchanged."""
        if end_offset <= self.replicated_offset:
            return result
        if self.available is not None and not self.available(end_offset):
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
            marks.hit("sync master: no slave")
            return result
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), fut))
        try:
            async with asyncio.timeout(self.wait_ms / 1000):
                await fut
        except TimeoutError:
            fut.cancel()
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            marks.hit("sync master: slave timeout")
        return result

    def release_visible(self) -> None:
        """Dispatch pending records covered by every visibility limit (flush and/or replicas)."""
        st = self.store
        limit = st.commitlog.max_offset
        if st._visible_on_flush:
            limit = min(limit, self.flushed_seen)
        if self.gate:
            limit = min(limit, self.replicated_offset)
        pending = st._pending
        dispatch = st.dispatcher.dispatch
        while pending and pending[0].phys_offset + pending[0].size <= limit:
            dispatch(pending.popleft())
        confirm = pending[0].phys_offset if pending else limit
        if confirm > st._confirm_offset:
            st._confirm_offset = confirm

    # ---- slave -------------------------------------------------------------------------------------
    def read(self, phys_offset: int, max_size: int) -> bytes:
        """Written CommitLog bytes from phys_offset: at most max_size, never past the end of its segment."""
        seg = self.store.commitlog.segments.find(phys_offset)
        if seg is None:
            return b""
        pos = phys_offset - seg.start_offset
        n = min(max_size, seg.wrote_position - pos)
        return bytes(seg.buf[pos : pos + n]) if n > 0 else b""

    def reset_cursor(self) -> None:
        self._cursor = None

    def append_raw(self, phys_offset: int, data: bytes, dispatch: bool = True) -> int:
        """Write replicated bytes at phys_offset (== max phys offset; anywhere segment-aligned on an empty
        log), then (unless dispatch=False: call dispatch_complete later) dispatch the records they complete.
        Returns the new max phys offset. StoreError on a gap."""
        st = self.store
        reason = st._refuse_reason()
        if reason is not None:
            raise StoreError(f"append_raw refused: {reason}")
        segments = st.commitlog.segments
        if self._cursor is None:
            self._cursor = segments.max_offset
        seg = segments.last
        if seg is None:
            if phys_offset % segments.segment_size:
                raise StoreError(f"replica stream on an empty log must start at a segment boundary, not {phys_offset}")
            seg = segments.roll(phys_offset)
            self._cursor = phys_offset
        elif phys_offset != segments.max_offset:
            raise StoreError(f"replica stream at {phys_offset} does not continue the log at {segments.max_offset}")
        elif seg.is_full:
            seg = segments.roll()
        pos = seg.wrote_position
        n = len(data)
        if n > seg.size - pos:
            raise StoreError(f"replica chunk of {n} bytes at {phys_offset} crosses a segment end")
        seg.buf[pos : pos + n] = data
        seg.backing.mark_written(pos, pos + n)
        seg.wrote_position = pos + n
        if dispatch:
            self.dispatch_complete()
        return segments.max_offset

    def dispatch_complete(self) -> None:
        """Decode and dispatch every record completed by raw appends since the last call."""
        st = self.store
        cl = st.commitlog
        segments = cl.segments
        cur = self._cursor
        if cur is None:
            return
        end = segments.max_offset
        table = cl.topic_queue_table
        pending = st._pending
        gated = st._visible_on_flush or self.gate
        dispatch = st.dispatcher.dispatch
        delay_spec = st.config.message_delay_level
        from orbitmq.store.message_store import request_of  # cycle: message_store imports this module

        while cur < end:
            seg = segments.find(cur)
            if seg is None:
                break
            pos = cur - seg.start_offset
            if pos + 8 > seg.wrote_position:
                break
            total, magic = SIZE_MAGIC.unpack_from(seg.buf, pos)
            if magic == BLANK_MAGIC:
                cur = seg.start_offset + seg.size
                continue
            if total < 91:
                raise StoreError(f"replicated data holds a bad record size {total} at {cur}")
            if pos + total > seg.wrote_position:
                break  # the rest arrives with the next chunk
            msg = decode_record(seg.buf[pos : pos + total])
            req = request_of(msg, delay_spec)
            if takes_queue_offset(msg.sys_flag):
                table[f"{msg.topic}-{msg.queue_id}"] = msg.queue_offset + 1
            if msg.store_timestamp > cl.last_store_timestamp:
                cl.last_store_timestamp = msg.store_timestamp
            if gated:
                pending.append(req)
            else:
                dispatch(req)
                st._confirm_offset = cur + total
            cur += total
        self._cursor = cur
