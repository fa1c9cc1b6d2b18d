"""Pure rules of the broker side of controller mode: which role notification to act on (epoch rules) and the
master's write lease (fencing). No I/O, no clock: times are passed in (monotonic ms). The ReplicasManager
(replicas_manager.py) applies the decisions. Design: docs/design/controller-broker.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class RoleInfo:
    """What the controller says about this broker's group (register / elect / 1004 answer, or a 1008 push)."""

    master_id: int | None
    master_addr: str | None
    master_epoch: int
    sync_state_set: frozenset[int] = frozenset()
    sss_epoch: int = 0

    @property
    def has_master(self) -> bool:
        return self.master_id is not None and self.master_id >= 0 and bool(self.master_addr)


class Action(enum.Enum):
    IGNORE = "ignore"
    BECOME_MASTER = "become master"
    BECOME_SLAVE = "become slave"
    UPDATE_SYNC_STATE_SET = "update SyncStateSet"
    ELECT = "elect"  # no master known: ask the controller to elect (after stepping down if we were master)


def decide(current_epoch: int, current_sss_epoch: int, is_master: bool, self_id: int, info: RoleInfo) -> Action:
    """RocketMQ's rules (ReplicasManager.changeBrokerRole / changeSyncStateSet), plus a masterless group:
    - a master epoch greater than ours: follow it (master or slave), or elect when it names no master;
    - an equal master epoch: only a master applies a SyncStateSet with a greater set epoch; a group still without a
      master (the first election has not happened, or one failed) makes us ask for an election;
    - an older master epoch: ignored (a stale push or an answer from a deposed controller)."""
    if info.master_epoch < current_epoch:
        return Action.IGNORE
    if not info.has_master:
        return Action.ELECT
    if info.master_epoch > current_epoch:
        return Action.BECOME_MASTER if info.master_id == self_id else Action.BECOME_SLAVE
    if is_master and info.master_id == self_id and info.sss_epoch > current_sss_epoch:
        return Action.UPDATE_SYNC_STATE_SET
    return Action.IGNORE


def renews_lease(current_epoch: int, is_master: bool, self_id: int, info: RoleInfo) -> bool:
    """A leader's answer renews the write lease only if it still names this broker master of our current epoch."""
    return is_master and info.has_master and info.master_id == self_id and info.master_epoch == current_epoch


def lease_deadline(send_ms: int, heartbeat_timeout_ms: int, heartbeat_interval_ms: int,
                   last_heartbeat_ms: int | None = None) -> int:
    """Lease end for a renewal whose request was SENT at send_ms (monotonic). The controller may replace a silent
    master only heartbeat_timeout_ms after the last heartbeat it received; our last heartbeat before send_ms left at
    most one interval earlier and, on the same connection, reached the leader before the request did. One more
    interval absorbs scheduling delay and clock-rate differences. When the time that last heartbeat to the leader
    was sent is known (last_heartbeat_ms <= send_ms), a late heartbeat can only shorten the lease: the deadline is
    never after last_heartbeat_ms + timeout - interval. See docs/design/controller-broker.md."""
    deadline = send_ms + heartbeat_timeout_ms - 2 * heartbeat_interval_ms
    if last_heartbeat_ms is not None:
        deadline = min(deadline, last_heartbeat_ms + heartbeat_timeout_ms - heartbeat_interval_ms)
    return deadline


class WriteLease:
    """The master's permission to acknowledge writes. Renewed by leader answers naming us master of `epoch`;
    dropped at once on a new role, a closed leader connection or a higher epoch."""

    def __init__(self, heartbeat_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        if heartbeat_timeout_ms <= 2 * heartbeat_interval_ms:
            raise ValueError("the heartbeat timeout must exceed two heartbeat intervals")
        self.timeout_ms = heartbeat_timeout_ms
        self.interval_ms = heartbeat_interval_ms
        self.epoch = -1
        self.until_ms: int | None = None
        self.renewals = 0
        self.drops = 0

    def renew(self, epoch: int, send_ms: int, last_heartbeat_ms: int | None = None) -> None:
        deadline = lease_deadline(send_ms, self.timeout_ms, self.interval_ms, last_heartbeat_ms)
        if epoch != self.epoch or self.until_ms is None:
            self.epoch, self.until_ms = epoch, deadline
        else:  # an answer to an older request arriving late never shortens the lease
            self.until_ms = max(self.until_ms, deadline)
        self.renewals += 1

    def drop(self) -> None:
        if self.until_ms is not None:
            self.drops += 1
        self.until_ms = None

    def valid(self, now_ms: int, epoch: int) -> bool:
        return self.until_ms is not None and self.epoch == epoch and now_ms < self.until_ms

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self.until_ms - now_ms) if self.until_ms is not None else 0
