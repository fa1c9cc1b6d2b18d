"""orbitmq.store: the message store facade (CommitLog + ConsumeQueue + IndexFile). Import from here only."""

from orbitmq.store.config import StoreConfig
from orbitmq.store.disk import Disk, MmapDisk
from orbitmq.store.dispatch import DispatchRequest, DispatchTarget
from orbitmq.store.errors import StoreInUseError
from orbitmq.store.message_store import MessageStore
from orbitmq.store.results import (
    STORED_STATUSES,
    GetResult,
    GetStatus,
    MessageInner,
    PutResult,
    PutStatus,
    QueryResult,
)
from orbitmq.store.segment_list import SegmentList

__all__ = [
    "Disk",
    "DispatchRequest",
    "DispatchTarget",
    "GetResult",
    "GetStatus",
    "MessageInner",
    "MessageStore",
    "MmapDisk",
    "PutResult",
    "PutStatus",
    "STORED_STATUSES",
    "QueryResult",
    "SegmentList",
    "StoreConfig",
    "StoreInUseError",
]
