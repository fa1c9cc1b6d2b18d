"""Enumerations shared by every layer: roles, flush types, sysflag bits, permissions."""

from __future__ import annotations

from enum import IntEnum, IntFlag, StrEnum


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class MessageModel(StrEnum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class TopicFilterType(StrEnum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


class SysFlag(IntFlag):
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK


NO_QUEUE_OFFSET = (0x4, 0xC)  # transaction types whose records take no queue offset: PREPARED (half), ROLLBACK


def takes_queue_offset(sys_flag: int) -> bool:
    return sys_flag & TRANSACTION_MASK not in NO_QUEUE_OFFSET


class Perm(IntEnum):
    PRIORITY = 0x8
    READ = 0x4
    WRITE = 0x2
    INHERIT = 0x1


def perm_to_string(perm: int) -> str:
    return (
        ("R" if perm & Perm.READ else "-")
        + ("W" if perm & Perm.WRITE else "-")
        + ("X" if perm & Perm.INHERIT else "-")
    )
