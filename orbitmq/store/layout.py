"""Every on-disk format of the store, once: struct strings, sizes and file naming. Sans-IO.

CommitLog record: see orbitmq.model.record (the same layout travels on the wire).
End-of-file blank (CommitLog):     off 0 int maxBlank (bytes left in the file), off 4 int BLANK_MAGIC.

ConsumeQueue entry, 20 bytes, big-endian (">qiq"):
   off size field
     0    8 commit-log phys_offset
     8    4 record size
    12    8 tags code
  Queue offset n lives at byte n*20 of the queue's logical file; filler entry for a gap: (0, 0x7FFFFFFF, 0).

IndexFile:
  header, 40 bytes (">qqqqii"): beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount
  slots: max_hash_slot_num * 4 bytes (">i": newest entry number, 0 = empty)
  entry, 20 bytes (">iqii"): keyHash, phyOffset, timeDiff (s since beginTimestamp), prevIndex

Checkpoint, one 4096-byte page (">qqqqq" at offset 0, rest zero):
  physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset, confirmPhyOffset
  OrbitMQ appends at offset 40 a CRC32 (">I") of bytes 0..40 so a torn checkpoint is detected (Java ignores it).

Epoch file `epochFileCheckpoint` (+ `epochFileCheckpoint.bak` = the previous content), ASCII, "\n" line ends:
  line 1: number of entries n; line 2: CRC32 of the n entry lines (each with its "\n"), sign bit masked as Java's
  UtilAll.crc32 does (0 = not checked); then n lines "epoch-startOffset", oldest first. endOffset is not stored
  (the next entry's start; unbounded for the last). Replaced atomically (tmp + fsync + rename + dir fsync).
  Legacy OrbitMQ files (only "epoch-startOffset" lines) still load. Codec: checkpoint.encode/decode_epoch_file.
Segment files are named by their 20-digit zero-padded start offset (CommitLog: phys_offset; CQ: byte offset).
"""

from __future__ import annotations

import struct

from orbitmq.model.record import BLANK_MAGIC as BLANK_MAGIC
from orbitmq.model.record import MAGIC_V1 as MAGIC_V1
from orbitmq.model.record import MAGIC_V2 as MAGIC_V2

BLANK = struct.Struct(">ii")
BLANK_SIZE = 8
SIZE_MAGIC = struct.Struct(">ii")
MIN_RECORD_SIZE = 91  # IPv4/IPv4, empty body/topic/properties

CQ_ENTRY = struct.Struct(">qiq")
CQ_ENTRY_SIZE = 20
CQ_FILLER = (0, 0x7FFFFFFF, 0)

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = 40
INDEX_SLOT = struct.Struct(">i")
INDEX_SLOT_SIZE = 4
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = 20

CHECKPOINT = struct.Struct(">qqqqq")
CHECKPOINT_CRC = struct.Struct(">I")
CHECKPOINT_CRC_POSITION = 40
CHECKPOINT_FILE_SIZE = 4096

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
EPOCH_FILE = "epochFileCheckpoint"

RECORD_MAGICS = (MAGIC_V1, MAGIC_V2)


def segment_name(start_offset: int) -> str:
    return f"{start_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """Start offset of a segment file name, None for anything else (tmp files, stray names)."""
    if len(name) != 20 or not name.isdigit():
        return None
    return int(name)


assert CQ_ENTRY.size == CQ_ENTRY_SIZE and INDEX_HEADER.size == INDEX_HEADER_SIZE
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE and CHECKPOINT.size == 40 and BLANK.size == BLANK_SIZE
