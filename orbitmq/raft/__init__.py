"""orbitmq.raft: a Raft consensus library (sans-IO core, file storage, asyncio driver, remoting transport).

Layer L4: imports store, remoting, protocol, base only. Used by the controller (RIP-44) and, later, by
Raft-replicated broker groups. Import from here: RaftDriver around a RaftNode, RaftStorage, RaftTransport.
"""

from orbitmq.raft.codec import decode_batch, decode_message, encode_batch, encode_message
from orbitmq.raft.driver import RaftDriver, RoleListener, StateMachine
from orbitmq.raft.errors import NotLeaderError, RaftStoppedError
from orbitmq.raft.messages import (
    Entry,
    HardState,
    Message,
    MsgType,
    RaftConfig,
    ReadState,
    Ready,
    Role,
    Snapshot,
)
from orbitmq.raft.node import RaftNode
from orbitmq.raft.storage import RaftStorage
from orbitmq.raft.transport import RaftTransport, parse_peers

__all__ = [
    "Entry",
    "HardState",
    "Message",
    "MsgType",
    "NotLeaderError",
    "RaftConfig",
    "RaftDriver",
    "RaftNode",
    "RaftStoppedError",
    "RaftStorage",
    "RaftTransport",
    "ReadState",
    "Ready",
    "Role",
    "RoleListener",
    "Snapshot",
    "StateMachine",
    "decode_batch",
    "decode_message",
    "encode_batch",
    "encode_message",
    "parse_peers",
]
