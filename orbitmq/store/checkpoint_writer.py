"""CheckpointWriter: writes snapshots of the store checkpoint in the order they were taken, from any thread.

A snapshot older than one already written is dropped, so a write that finishes late in a worker thread can never
replace a newer checkpoint (the one truncate_dirty or shutdown wrote meanwhile). Taking a snapshot is the caller's
business on the event loop: it must claim only data that is already durable when it is taken.
"""

from __future__ import annotations

import threading

from orbitmq.store.checkpoint import CheckpointFile


class CheckpointWriter:
    __slots__ = ("checkpoint", "_lock", "_taken", "_written")

    def __init__(self, checkpoint: CheckpointFile) -> None:
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        self._taken = 0  # sequence number of the newest snapshot (event-loop thread only)
        self._written = 0  # newest sequence number on disk (under _lock)

    def snapshot(self) -> tuple[int, bytes]:
        """The checkpoint state encoded now, with its sequence number (call on the thread that owns the state)."""
        self._taken += 1
        return self._taken, self.checkpoint.state.encode()

    def write(self, seq: int, data: bytes) -> bool:
        """Write snapshot `seq` unless a newer one is on disk already; False when dropped. Any thread."""
        with self._lock:
            if seq <= self._written:
                return False
            self.checkpoint.disk.write_small_atomic(self.checkpoint.path, data)
            self._written = seq
            return True

    @property
    def written(self) -> int:
        return self._written
