"""StoreCheckpoint (the 4 KiB `checkpoint` file) and the master epoch file (`epochFileCheckpoint`).

Both are small metadata files replaced atomically through Disk.write_small_atomic; a torn or missing checkpoint
is reported as invalid (recovery then scans from the first CommitLog file); a torn epoch file falls back to its
.bak and, when both are unreadable, start-up is refused. Epoch rules live in replication/epoch.py, not here.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from orbitmq.base.errors import CorruptionError
from orbitmq.store.disk import Disk
from orbitmq.store.layout import (
    CHECKPOINT,
    CHECKPOINT_CRC,
    CHECKPOINT_CRC_POSITION,
    CHECKPOINT_FILE,
    CHECKPOINT_FILE_SIZE,
    EPOCH_FILE,
)

# the extension field (logics_flushed_phys) and its own CRC, past RocketMQ's CRC at 40
_EXT = struct.Struct(">qI")
_EXT_VALUE = struct.Struct(">q")
_EXT_POSITION = 48


@dataclass(slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    # OrbitMQ extension (after RocketMQ's fields and CRC; a Java-written page has zeros there, read as 0 =
    # unknown): every ConsumeQueue and index entry of a record below this phys offset was durable when the
    # checkpoint was taken, so a crash recovery re-dispatches from here instead of the checkpoint file's start.
    logics_flushed_phys: int = 0

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
        ext = _EXT_VALUE.pack(self.logics_flushed_phys)
        _EXT.pack_into(page, _EXT_POSITION, self.logics_flushed_phys, zlib.crc32(ext))
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
        cp = cls(*CHECKPOINT.unpack(head))
        if len(data) >= _EXT_POSITION + _EXT.size:
            value, ext_crc = _EXT.unpack_from(data, _EXT_POSITION)
            if ext_crc == zlib.crc32(_EXT_VALUE.pack(value)) and value > 0:
                cp.logics_flushed_phys = value
        return cp

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


def encode_epoch_file(entries: list[tuple[int, int]]) -> bytes:
    """RocketMQ's CheckpointFile layout: count line, CRC32 line (of the entry lines, each with its newline), entries."""
    body = "".join(f"{e}-{s}\n" for e, s in entries)
    crc = zlib.crc32(body.encode("ascii")) & 0x7FFFFFFF  # Java UtilAll.crc32 masks the sign bit
    return f"{len(entries)}\n{crc}\n{body}".encode("ascii")


def _parse_entry(line: str) -> tuple[int, int]:
    epoch, sep, start = line.strip().partition("-")
    if not sep:
        raise ValueError(f"not an epoch-startOffset line: {line!r}")
    return int(epoch), int(start)


def decode_epoch_file(data: bytes) -> list[tuple[int, int]]:
    """Entries of an epoch file: the counted+CRC layout, or the legacy OrbitMQ one (plain lines, first line has a
    "-"). ValueError when torn: count or CRC mismatch, bad line. A stored CRC of 0 is not checked (RocketMQ)."""
    text = data.decode("ascii")
    lines = text.splitlines()
    if not lines or "-" in lines[0]:
        return [_parse_entry(ln) for ln in lines if ln.strip()]  # legacy (or empty: no entries)
    if len(lines) < 2:
        raise ValueError("epoch file holds a count but no CRC line")
    count, crc = int(lines[0]), int(lines[1])
    entry_lines = [ln for ln in lines[2:] if ln.strip()]
    if len(entry_lines) != count:
        raise ValueError(f"epoch file announces {count} entries but holds {len(entry_lines)}")
    if crc != 0:
        actual = zlib.crc32("".join(f"{ln.strip()}\n" for ln in entry_lines).encode("ascii"))
        if crc not in (actual, actual & 0x7FFFFFFF):
            raise ValueError(f"epoch file CRC {crc} does not match its entries ({actual & 0x7FFFFFFF})")
    return [_parse_entry(ln) for ln in entry_lines]


class EpochFile:
    """The (epoch, startOffset) history, oldest first; the last entry is the current master epoch.

    Persisted in RocketMQ's epochFileCheckpoint layout (layout.py), replaced atomically with the previous content
    kept in `.bak`. `load` falls back to the `.bak` when the primary is torn and refuses (CorruptionError) when
    no candidate decodes: an empty history would let a diverged replica skip truncation.
    """

    __slots__ = ("path", "disk", "entries", "loaded_from")

    def __init__(self, root_dir: str, disk: Disk) -> None:
        self.path = os.path.join(root_dir, EPOCH_FILE)
        self.disk = disk
        self.entries: list[tuple[int, int]] = []
        self.loaded_from = ""  # "", "primary" or "backup" (runtime info, tests)

    def load(self) -> None:
        candidates = self.disk.read_small_with_backup(self.path)
        errors: list[str] = []
        for data in candidates:
            try:
                entries = decode_epoch_file(data)
            except (UnicodeDecodeError, ValueError) as e:
                errors.append(str(e))
                continue
            self.entries = entries
            self.loaded_from = "primary" if not errors and self.disk.exists(self.path) else "backup"
            return
        if candidates:
            raise CorruptionError(self.path, 0, "epoch file and its .bak are both unreadable (" + "; ".join(errors)
                                  + "); refusing to start with an empty epoch history — restore the file from a "
                                  "replica or remove it together with the CommitLog")

    def _save(self) -> None:
        self.disk.write_small_atomic(self.path, encode_epoch_file(self.entries))

    @property
    def current(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def set(self, epoch: int, start_offset: int) -> None:
        """Classic HA: record a newer epoch (the same epoch again is a no-op; an older one is refused)."""
        if self.entries and epoch < self.entries[-1][0]:
            raise ValueError(f"epoch {epoch} older than current {self.entries[-1][0]}")
        if self.entries and epoch == self.entries[-1][0]:
            return
        self.entries.append((epoch, start_offset))
        self._save()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """AutoSwitch HA: persist a whole history computed by replication.EpochCache (no-op when unchanged)."""
        entries = list(entries)
        if entries != self.entries:
            self.entries = entries
            self._save()

    def truncate(self, phys_offset: int) -> None:
        """Forget epochs that start beyond the new log end (one starting exactly at the end is kept: a master that
        has not written yet keeps its epoch across a restart)."""
        kept = [(e, s) for e, s in self.entries if s <= phys_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()
