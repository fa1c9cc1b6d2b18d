"""AutoSwitch HA wire frames (sans-IO, RocketMQ 5.1.1+ layouts, big-endian) and their incremental decoders.

Slave -> master: HANDSHAKE (16 bytes) then TRANSFER acks (12 bytes). Master -> slave: HANDSHAKE (20 + 12n) then
TRANSFER frames (36 + n; n = 0 is a heartbeat). Decoders raise ProtocolError on anything out of bounds; they never
interpret offsets against a log (that is the cores' job). Tables: docs/design/autoswitch-ha.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from orbitmq.base.errors import ProtocolError
from orbitmq.replication.epoch import HANDSHAKE_MAX_ENTRIES


class HAState(IntEnum):
    """HAConnectionState; the ordinal is the first int of every frame."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


SLAVE_HANDSHAKE = struct.Struct(">ihhq")  # state, isSyncFromLastFile, isAsyncLearner, slave brokerId
MASTER_HANDSHAKE = struct.Struct(">iiqi")  # state, body size, master maxPhyOffset, master last epoch
EPOCH_ENTRY = struct.Struct(">iq")  # epoch, startOffset
TRANSFER_HEADER = struct.Struct(">iiqiqq")  # state, body size, offset, epoch, epochStartOffset, confirmOffset
ACK = struct.Struct(">iq")  # state, slave maxPhyOffset
SLAVE_HANDSHAKE_SIZE = SLAVE_HANDSHAKE.size  # 16
MASTER_HANDSHAKE_SIZE = MASTER_HANDSHAKE.size  # 20
EPOCH_ENTRY_SIZE = EPOCH_ENTRY.size  # 12
TRANSFER_HEADER_SIZE = TRANSFER_HEADER.size  # 36
ACK_SIZE = ACK.size  # 12
MAX_TRANSFER_BODY = 32 * 1024 * 1024  # sanity bound on a body a peer may announce (batches are 32 KiB)
MAX_HANDSHAKE_BODY = HANDSHAKE_MAX_ENTRIES * EPOCH_ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    sync_from_last_file: bool
    async_learner: bool
    broker_id: int


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    max_offset: int
    epoch: int
    entries: tuple[tuple[int, int], ...]  # (epoch, startOffset), oldest first


@dataclass(frozen=True, slots=True)
class TransferFrame:
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int
    data: bytes  # empty = heartbeat

    @property
    def is_heartbeat(self) -> bool:
        return not self.data


@dataclass(frozen=True, slots=True)
class Ack:
    max_offset: int


def encode_slave_handshake(h: SlaveHandshake) -> bytes:
    return SLAVE_HANDSHAKE.pack(HAState.HANDSHAKE, int(h.sync_from_last_file), int(h.async_learner), h.broker_id)


def encode_master_handshake(h: MasterHandshake) -> bytes:
    if len(h.entries) > HANDSHAKE_MAX_ENTRIES:
        raise ValueError(f"{len(h.entries)} epoch entries > {HANDSHAKE_MAX_ENTRIES}")
    body = b"".join(EPOCH_ENTRY.pack(e, s) for e, s in h.entries)
    return MASTER_HANDSHAKE.pack(HAState.HANDSHAKE, len(body), h.max_offset, h.epoch) + body


def encode_transfer(offset: int, epoch: int, epoch_start: int, confirm_offset: int,
                    data: bytes | memoryview = b"") -> bytes:
    return TRANSFER_HEADER.pack(HAState.TRANSFER, len(data), offset, epoch, epoch_start, confirm_offset) + bytes(data)


def encode_ack(max_offset: int) -> bytes:
    return ACK.pack(HAState.TRANSFER, max_offset)


class _Buffered:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)


def _state_of(buf: bytearray, pos: int) -> HAState:
    raw = struct.unpack_from(">i", buf, pos)[0]
    try:
        return HAState(raw)
    except ValueError:
        raise ProtocolError(f"unknown HA state {raw}") from None


class SlaveStreamDecoder(_Buffered):
    """Master side: split the slave's bytes into a SlaveHandshake and Acks (partial frames kept)."""

    __slots__ = ()

    def feed(self, data: bytes) -> list[SlaveHandshake | Ack]:
        buf = self._buf
        buf += data
        out: list[SlaveHandshake | Ack] = []
        pos = 0
        while len(buf) - pos >= 4:
            state = _state_of(buf, pos)
            if state is HAState.HANDSHAKE:
                if len(buf) - pos < SLAVE_HANDSHAKE_SIZE:
                    break
                _st, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buf, pos)
                if last_file not in (0, 1) or learner not in (0, 1) or broker_id < 0:
                    raise ProtocolError(f"bad slave handshake: flags {last_file}/{learner} brokerId {broker_id}")
                out.append(SlaveHandshake(bool(last_file), bool(learner), broker_id))
                pos += SLAVE_HANDSHAKE_SIZE
            elif state is HAState.TRANSFER:
                if len(buf) - pos < ACK_SIZE:
                    break
                offset = ACK.unpack_from(buf, pos)[1]
                if offset < 0:
                    raise ProtocolError(f"negative slave offset {offset}")
                out.append(Ack(offset))
                pos += ACK_SIZE
            else:
                raise ProtocolError(f"unexpected HA state {state.name} from a slave")
        del buf[:pos]
        return out


class MasterStreamDecoder(_Buffered):
    """Slave side: split the master's bytes into a MasterHandshake and TransferFrames (partial frames kept)."""

    __slots__ = ()

    def feed(self, data: bytes) -> list[MasterHandshake | TransferFrame]:
        buf = self._buf
        buf += data
        out: list[MasterHandshake | TransferFrame] = []
        pos = 0
        while len(buf) - pos >= 4:
            state = _state_of(buf, pos)
            if state is HAState.HANDSHAKE:
                frame, size = self._handshake(buf, pos)
            elif state is HAState.TRANSFER:
                frame, size = self._transfer(buf, pos)
            else:
                raise ProtocolError(f"unexpected HA state {state.name} from a master")
            if frame is None:
                break
            out.append(frame)
            pos += size
        del buf[:pos]
        return out

    @staticmethod
    def _handshake(buf: bytearray, pos: int) -> tuple[MasterHandshake | None, int]:
        if len(buf) - pos < MASTER_HANDSHAKE_SIZE:
            return None, 0
        _st, body, max_offset, epoch = MASTER_HANDSHAKE.unpack_from(buf, pos)
        if body < 0 or body > MAX_HANDSHAKE_BODY or body % EPOCH_ENTRY_SIZE or max_offset < 0:
            raise ProtocolError(f"bad master handshake: body {body} maxOffset {max_offset}")
        total = MASTER_HANDSHAKE_SIZE + body
        if len(buf) - pos < total:
            return None, 0
        start = pos + MASTER_HANDSHAKE_SIZE
        entries = tuple((e, s) for e, s in (EPOCH_ENTRY.unpack_from(buf, start + i)
                                            for i in range(0, body, EPOCH_ENTRY_SIZE)))
        prev_e, prev_s = -1, -1
        for e, s in entries:
            if s < 0 or e <= prev_e or s < prev_s:
                raise ProtocolError(f"master handshake epochs out of order at ({e}, {s})")
            prev_e, prev_s = e, s
        return MasterHandshake(max_offset, epoch, entries), total

    @staticmethod
    def _transfer(buf: bytearray, pos: int) -> tuple[TransferFrame | None, int]:
        if len(buf) - pos < TRANSFER_HEADER_SIZE:
            return None, 0
        _st, body, offset, epoch, epoch_start, confirm = TRANSFER_HEADER.unpack_from(buf, pos)
        if body < 0 or body > MAX_TRANSFER_BODY or offset < 0 or epoch_start < 0 or epoch_start > offset:
            raise ProtocolError(f"bad transfer header: body {body} offset {offset} epochStart {epoch_start}")
        total = TRANSFER_HEADER_SIZE + body
        if len(buf) - pos < total:
            return None, 0
        data = bytes(buf[pos + TRANSFER_HEADER_SIZE : pos + total])
        return TransferFrame(offset, epoch, epoch_start, confirm, data), total
