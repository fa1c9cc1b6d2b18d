"""GroupStateMachine: what a committed Raft entry of a broker group does on every member (docs/design/raft-group.md).

A RECORDS entry's records are in the member's CommitLog already (written when the entry was logged, by
CommitLogRaftStorage): applying it makes them visible (the store's replica gate releases them to the ConsumeQueue
and index) and tells the messages listeners. Command entries (0x10..0x7F) go to the module that registered the
type (local delivery). The snapshot is (applied index, CommitLog end after it) plus the modules' parts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orbitmq.broker.raft_mode.codec import check_command_type, decode_snapshot, encode_snapshot
from orbitmq.broker.raft_mode.commitlog_log import (
    RECORDS,
    REF,
    CommitLogRaftStorage,
    records_messages,
    records_span,
)
from orbitmq.store.results import MessageInner, PutResult

log = logging.getLogger("orbitmq.broker.raft_mode")

CommandApply = Callable[[int, bytes], object]
CommitListener = Callable[[int], None]
MessagesListener = Callable[[int, list[MessageInner], PutResult], None]
SnapshotPart = tuple[Callable[[], bytes], Callable[[bytes], None]]


class GroupStateMachine:
    """raft.StateMachine over a MessageStore (the real one, never the RaftStore proxy) and its Raft log."""

    def __init__(self, store: Any, raft_log: CommitLogRaftStorage) -> None:
        self.store = store
        self.log = raft_log
        self._commands: dict[int, CommandApply] = {}
        self._commit_listeners: list[CommitListener] = []
        self._messages_listeners: list[MessagesListener] = []
        self._parts: dict[int, SnapshotPart] = {}
        self.applied = 0
        self.apply_errors = 0
        self.on_restored: Callable[[], None] | None = None  # after a snapshot's parts are restored

    def register_command(self, entry_type: int, apply: CommandApply, *, internal: bool = False) -> None:
        """apply(index, payload) for committed entries of `entry_type` (0x10..0x7F; `internal`: this package's own
        types below 0x10)."""
        if not internal:
            check_command_type(entry_type)
        if entry_type in self._commands:
            raise ValueError(f"command entry type {entry_type:#x} is already registered")
        self._commands[entry_type] = apply

    def command(self, entry_type: int) -> CommandApply | None:
        return self._commands.get(entry_type)

    def add_commit_listener(self, cb: CommitListener) -> None:
        self._commit_listeners.append(cb)

    def add_messages_listener(self, cb: MessagesListener) -> None:
        """cb(index, messages, put result) when a RECORDS entry is applied here (every member, log order)."""
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
        if kind == RECORDS or kind == REF:
            self.store.replica.on_replicated(records_span(data)[1])  # committed: visible (ConsumeQueue, index)
            if kind == REF:
                return None  # records deleted by retention (only seen when applied again at start)
            placed = self.log.placed.pop(index, None)  # the leader's own put, else decoded for the listeners
            if placed is None and self._messages_listeners:
                placed = records_messages(data)
            if placed is None:
                return None
            msgs, result = placed
            for cb in list(self._messages_listeners):
                try:
                    cb(index, msgs, result)
                except Exception:
                    log.exception("raft group: messages listener failed")
            return result, -1
        fn = self._commands.get(kind)
        if fn is None:
            self.apply_errors += 1
            log.error("raft group: entry %d has type %#x that no module registered: skipped", index, kind)
            return None
        return fn(index, data[1:])

    def snapshot(self) -> bytes:
        parts = {kind: snap() for kind, (snap, _) in self._parts.items()}
        return encode_snapshot(self.applied, self.log.ends.get(self.applied, self.log.last_end()), parts)

    def restore(self, data: bytes) -> None:
        """The snapshot's parts; its CommitLog prefix is in place already (CommitLogRaftStorage: kept at start,
        copied from the leader before an installed snapshot was saved)."""
        snap_index, _, parts = decode_snapshot(data)
        for kind, part in parts.items():
            entry = self._parts.get(kind)
            if entry is None:
                log.error("raft group: snapshot part %#x that no module registered: ignored", kind)
            else:
                entry[1](part)
        self.applied = snap_index
        if self.on_restored is not None:
            self.on_restored()
