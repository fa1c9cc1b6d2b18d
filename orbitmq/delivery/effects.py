"""Effects of applying a delivery command, and who executes them (Ra's `local` rule, issue 14).

Every replica computes the same effects at the same log index. A `Deliver` effect is executed by exactly one
member: the replica on the consumer's node if that node hosts a voting replica, otherwise the leader. All other
effects are informational (what the leader answers its clients; what a checker audits).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Deliver:
    """Send message (queue, offset) to `consumer` on `node` under delivery id `did`; `count` = how many times it
    was handed out before (0 = first delivery, > 0 = redelivery)."""
    did: int
    consumer: str
    node: str
    queue: int
    offset: int
    size: int
    count: int
    deadline: int


@dataclass(frozen=True, slots=True)
class Settled:
    did: int
    consumer: str
    queue: int
    offset: int


@dataclass(frozen=True, slots=True)
class Returned:
    """A checkout ended without an ack; `why` is "nack", "expired", "down" or "inactive" (single active
    consumer switched)."""
    did: int
    consumer: str
    queue: int
    offset: int
    why: str


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """Delivered max_deliveries times without an ack: removed from the queue (the broker moves it to the DLQ)."""
    queue: int
    offset: int
    count: int


@dataclass(frozen=True, slots=True)
class Refused:
    """The command changed nothing; `why` says why (stale delivery id, unknown consumer, mode mismatch ...)."""
    why: str


Effect = Deliver | Settled | Returned | DeadLettered | Refused


def executes_here(target_node: str, self_node: str, is_leader: bool, replica_nodes: Collection[str]) -> bool:
    """Whether this replica sends a delivery meant for a consumer on `target_node` (Ra's can_execute_locally):
    a follower only for its own node; the leader for its own node and for nodes without a replica."""
    if is_leader:
        return target_node == self_node or target_node not in replica_nodes
    return target_node == self_node and self_node in replica_nodes
