"""GroupStateMachine: what a committed Raft entry of a broker group does on every member (docs/design/raft-group.md).

MESSAGES entries go into the member's MessageStore (CommitLog, then ConsumeQueue/index by the store's dispatch):
only committed entries ever reach the store. Command entries (0x10..0x7F) go to the module that registered the type
(local delivery). The snapshot is the CommitLog end offset after the applied index; restoring it cuts the CommitLog
back to that offset so that the entries after it can be applied again without duplicates; a member whose CommitLog
ends before it (behind the leader's compaction) fetches the missing bytes from the leader and holds the entries
after the snapshot until they arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orbitmq.broker.raft_mode.codec import (
    MESSAGES,
    check_command_type,
    decode_messages,
    decode_snapshot,
    encode_snapshot,
)
from orbitmq.store.results import MessageInner, PutResult

log = logging.getLogger("orbitmq.broker.raft_mode")

CommandApply = Callable[[int, bytes], object]
CommitListener = Callable[[int], None]
MessagesListener = Callable[[int, list[MessageInner], PutResult], None]
SnapshotPart = tuple[Callable[[], bytes], Callable[[bytes], None]]


class GroupStateMachine:
    """raft.StateMachine over a MessageStore (the real one, never the RaftStore proxy)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._commands: dict[int, CommandApply] = {}
        self._commit_listeners: list[CommitListener] = []
        self._messages_listeners: list[MessagesListener] = []
        self._parts: dict[int, SnapshotPart] = {}
        self._based = False  # the store's content has been matched to the Raft log (restore or first apply)
        self.applied = 0
        self.behind: tuple[int, int] | None = None  # (our CommitLog end, snapshot's) when a snapshot left us behind
        self.held: list[tuple[int, bytes]] = []  # MESSAGES entries applied while behind: stored once caught up
        self.on_behind: Callable[[int], None] | None = None  # told the snapshot's end offset to fetch up to
        self.apply_errors = 0
        self.checkpoint: tuple[int, int] | None = None  # (index, CommitLog end) found at start: keep that prefix
        self._skip_until = 0  # MESSAGES entries up to here are in the CommitLog already (the checkpoint)

    def register_command(self, entry_type: int, apply: CommandApply, *, internal: bool = False) -> None:
        """apply(index, payload) for committed entries of `entry_type` (0x10..0x7F; `internal`: this package's own
        types below 0x10)."""
        if not internal:
            check_command_type(entry_type)
        if entry_type in self._commands:
            raise ValueError(f"command entry type {entry_type:#x} is already registered")
        self._commands[entry_type] = apply

    def add_commit_listener(self, cb: CommitListener) -> None:
        self._commit_listeners.append(cb)

    def add_messages_listener(self, cb: MessagesListener) -> None:
        """cb(index, messages, put result) after a MESSAGES entry is stored here (every member, log order)."""
        self._messages_listeners.append(cb)

    def register_snapshot_part(self, part_type: int, snapshot: Callable[[], bytes],
                               restore: Callable[[bytes], None]) -> None:
        """A module's state saved in the group snapshot (snapshot() at the applied index) and handed back to
        restore() when a snapshot is restored (at start or installed from the leader)."""
        if part_type in self._parts:
            raise ValueError(f"snapshot part {part_type:#x} is already registered")
        self._parts[part_type] = (snapshot, restore)

    # ---- raft.StateMachine -------------------------------------------------------------------------------------
    def apply(self, index: int, data: bytes) -> object:
        if not self._based:
            # no snapshot was restored: the Raft log starts at index 1 and is applied from there again, so the
            # CommitLog is kept up to the applied checkpoint, else rebuilt from the log (it can only hold records
            # of entries that are re-applied now)
            self._based = True
            if not self._base_on_checkpoint(0) and self.store.max_phys_offset > self.store.min_phys_offset:
                log.warning("raft group: no snapshot, CommitLog rebuilt from the Raft log (was %d bytes)",
                            self.store.max_phys_offset)
                self.store.truncate_dirty(self.store.min_phys_offset)
        try:
            return self._apply(index, data)
        finally:
            self.applied = index
            for cb in list(self._commit_listeners):
                try:
                    cb(index)
                except Exception:
                    log.exception("raft group: commit listener failed")

    def _apply(self, index: int, data: bytes) -> object:
        if not data:
            return None  # a new leader's no-op
        kind = data[0]
        if kind == MESSAGES and index <= self._skip_until:
            return None  # stored before the restart (the applied checkpoint)
        if kind == MESSAGES and self.behind is not None:
            self.held.append((index, data))  # after the CommitLog bytes the snapshot covers (catch_up)
            return None
        if kind == MESSAGES:
            msgs = decode_messages(data)
            result, wait_end = self.store.put_messages_nowait(msgs)
            if not result.ok:
                self.apply_errors += 1
                log.error("raft group: entry %d (%d messages) not stored here: %s", index, len(msgs),
                          result.status.value)
            for cb in list(self._messages_listeners):
                try:
                    cb(index, msgs, result)
                except Exception:
                    log.exception("raft group: messages listener failed")
            return result, wait_end
        fn = self._commands.get(kind)
        if fn is None:
            self.apply_errors += 1
            log.error("raft group: entry %d has type %#x that no module registered: skipped", index, kind)
            return None
        return fn(index, data[1:])

    def snapshot(self) -> bytes:
        parts = {kind: snap() for kind, (snap, _) in self._parts.items()}
        return encode_snapshot(self.applied, self.store.max_phys_offset, parts)

    def _base_on_checkpoint(self, floor_index: int) -> bool:
        """At start: the CommitLog already holds the MESSAGES entries up to the checkpoint's index (above
        `floor_index`, the snapshot's): cut it back to the checkpoint's end and skip those entries."""
        cp, self.checkpoint = self.checkpoint, None
        if cp is None or cp[0] <= floor_index or self._messages_listeners:
            return False  # messages listeners must see every MESSAGES entry after the snapshot: no skipping
        index, end = cp
        have = self.store.max_phys_offset
        if have < end:
            log.warning("raft group: CommitLog ends at %d, before the applied checkpoint's %d (index %d): ignored",
                        have, end, index)
            return False
        if have > end:
            self.store.truncate_dirty(end)
        self._skip_until = index
        log.info("raft group: CommitLog kept up to %d (entry %d, applied checkpoint)", end, index)
        return True

    def restore(self, data: bytes) -> None:
        starting = not self._based
        self._based = True
        snap_index, target, parts = decode_snapshot(data)
        for kind, part in parts.items():
            entry = self._parts.get(kind)
            if entry is None:
                log.error("raft group: snapshot part %#x that no module registered: ignored", kind)
            else:
                entry[1](part)
        if starting and self._base_on_checkpoint(snap_index):
            self.behind = None
            return
        have = self.store.max_phys_offset
        if have > target:
            log.warning("raft group: CommitLog cut back from %d to the snapshot's %d (entries after it are applied "
                        "again)", have, target)
            self.store.truncate_dirty(target)
            self.behind = None
        elif have < target:
            self.behind = (have, target)
            self.held.clear()
            log.warning("raft group: the snapshot needs CommitLog bytes %d..%d: fetching them from the leader",
                        have, target)
            if self.on_behind is not None:
                self.on_behind(target)
        else:
            self.behind = None

    def store_covers(self, index: int) -> bool:
        """The store already reflects the entry at `index`: at start, entries up to the applied checkpoint are
        applied again, but their MESSAGES are in the CommitLog and their store effects happened before."""
        return index <= self._skip_until

    def caught_up(self) -> None:
        """The CommitLog reached the snapshot's end (fetched from the leader): store the entries held meanwhile."""
        if self.behind is None:
            return
        have, target = self.store.max_phys_offset, self.behind[1]
        if have != target:
            raise RuntimeError(f"raft group: CommitLog at {have} after the transfer, the snapshot ends at {target}")
        self.behind = None
        held, self.held = self.held, []
        for index, data in held:
            self._apply(index, data)
        log.warning("raft group: CommitLog caught up to %d, %d held entries stored", target, len(held))
