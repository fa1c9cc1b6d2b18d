"""Outcome types of the store facade: PutStatus/PutResult, GetStatus/GetResult, QueryResult, MessageInner."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(slots=True)
class MessageInner:
    """What the broker asks the store to append."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


# the put outcomes that mean "the message is in the CommitLog" (a flush or replica may still be missing): a send
# answered with one of them must not be retried elsewhere, a service that moved a message may advance past it
STORED_STATUSES = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                             PutStatus.SLAVE_NOT_AVAILABLE})


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    phys_offset: int = -1
    wrote_bytes: int = 0
    msg_ids: list[str] = field(default_factory=list)
    queue_offset: int = -1
    msg_count: int = 0
    store_timestamp: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[bytes | memoryview] = field(default_factory=list)
    msg_count: int = 0
    size_bytes: int = 0
    suggest_pull_from_slave: bool = False


@dataclass(slots=True)
class QueryResult:
    buffers: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
