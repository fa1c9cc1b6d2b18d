"""Errors the Raft driver hands its callers (the controller answers them with a ResponseCode + remark).

Only exception classes live here; storage faults are orbitmq.base.errors StoreError/CorruptionError.
"""

from __future__ import annotations

from orbitmq.base.errors import OrbitMQError


class NotLeaderError(OrbitMQError):
    """This node is not (or no longer) the leader; `leader_id` is the known leader's node id, "" if unknown."""

    def __init__(self, leader_id: str = "", message: str = "") -> None:
        super().__init__(message or (f"not the leader (leader is {leader_id})" if leader_id
                                     else "not the leader (leader unknown)"))
        self.leader_id = leader_id


class RaftStoppedError(NotLeaderError):
    """The driver stopped (stop() or a fatal storage error) before the request finished."""


__all__ = ["NotLeaderError", "RaftStoppedError"]
