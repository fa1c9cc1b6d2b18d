"""StoreCheckpoint (the 4 KiB `checkpoint` file) and the master epoch file (`epochFileCheckpoint`).

Both are small metadata files replaced atomically through Disk.write_small_atomic; a torn or missing checkpoint
is reported as invalid (recovery then scans from the first CommitLog file).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from orbitmq.store.disk import Disk
from orbitmq.store.layout import (
    CHECKPOINT,
    CHECKPOINT_CRC,
    CHECKPOINT_CRC_POSITION,
    CHECKPOINT_FILE,
    CHECKPOINT_FILE_SIZE,
    EPOCH_FILE,
)


@dataclass(slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    def encode(self) -> bytes:
        head = CHECKPOINT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        page = bytearray(CHECKPOINT_FILE_SIZE)
        page[: len(head)] = head
        CHECKPOINT_CRC.pack_into(page, CHECKPOINT_CRC_POSITION, zlib.crc32(head))
        return bytes(page)

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint | None:
        """None when the page is short or its CRC does not match (a Java-written page has CRC 0: accepted)."""
        if len(data) < CHECKPOINT_CRC_POSITION + CHECKPOINT_CRC.size:
            return None
        head = data[: CHECKPOINT.size]
        crc = CHECKPOINT_CRC.unpack_from(data, CHECKPOINT_CRC_POSITION)[0]
        if crc != zlib.crc32(head) and not (crc == 0 and any(head)):
            return None
        return cls(*CHECKPOINT.unpack(head))

    def min_timestamp(self, index_enabled: bool) -> int:
        """Abnormal-recovery start time: min(physic, logics) - 3 s (and index time when the index is on)."""
        ts = max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)
        if index_enabled:
            ts = min(ts, self.index_msg_timestamp)
        return ts


class CheckpointFile:
    __slots__ = ("path", "disk", "state")

    def __init__(self, root_dir: str, disk: Disk) -> None:
        self.path = os.path.join(root_dir, CHECKPOINT_FILE)
        self.disk = disk
        self.state = Checkpoint()

    def load(self) -> str:
        """Read the checkpoint; returns "valid", "missing" or "corrupt" (then state stays zero)."""
        candidates = self.disk.read_small_with_backup(self.path)
        if not candidates:
            return "missing"
        cp = Checkpoint.decode(candidates[0])
        if cp is None:
            return "corrupt"
        self.state = cp
        return "valid"

    def save(self) -> None:
        self.disk.write_small_atomic(self.path, self.state.encode())


class EpochFile:
    """Lines "epoch-startOffset", oldest first; the last line is the current master epoch."""

    __slots__ = ("path", "disk", "entries")

    def __init__(self, root_dir: str, disk: Disk) -> None:
        self.path = os.path.join(root_dir, EPOCH_FILE)
        self.disk = disk
        self.entries: list[tuple[int, int]] = []

    def load(self) -> None:
        for data in self.disk.read_small_with_backup(self.path):
            try:
                entries = []
                for line in data.decode("ascii").splitlines():
                    if line.strip():
                        epoch, _, start = line.strip().partition("-")
                        entries.append((int(epoch), int(start)))
            except (UnicodeDecodeError, ValueError):
                continue
            self.entries = entries
            return

    def _save(self) -> None:
        self.disk.write_small_atomic(self.path, "".join(f"{e}-{s}\n" for e, s in self.entries).encode("ascii"))

    @property
    def current(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def set(self, epoch: int, start_offset: int) -> None:
        if self.entries and epoch < self.entries[-1][0]:
            raise ValueError(f"epoch {epoch} older than current {self.entries[-1][0]}")
        if self.entries and epoch == self.entries[-1][0]:
            return
        self.entries.append((epoch, start_offset))
        self._save()

    def truncate(self, phys_offset: int) -> None:
        """Forget epochs that start beyond the new log end."""
        kept = [(e, s) for e, s in self.entries if s <= phys_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()
