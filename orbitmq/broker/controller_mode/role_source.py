"""RoleSource: the one small interface between the role-switch machinery (ReplicasManager: AutoSwitch HA, epoch
file, truncation, fences, allAckInSyncStateSet, consumer-offset publishing) and whoever names the master of a broker
group at which epoch. Two implementations: the RIP-44 controller (controller_source.py) and a lease row in a SQL
database (broker/lease_mode/source.py). Design: docs/design/controller-broker.md ("Role sources").

A source learns the group's state in its own way and hands it to the manager as a RoleInfo through
`ReplicasManager.apply(info, send_ms, source_name)`; the manager switches roles (rules.decide) and asks the source
for everything a master needs from its arbiter: may it acknowledge writes now (the lease), which other replicas
exist, and to record a new SyncStateSet before the master uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from orbitmq.broker.controller_mode.rules import RoleInfo
from orbitmq.protocol.bodies.controller import SyncStateSet


@dataclass(frozen=True)
class Replica:
    """Another member of the group, as the source knows it."""

    broker_id: int
    addr: str
    alive: bool = True


class RoleSource(Protocol):
    kind: str  # "controller" | "lease": shown in runtime info and logs

    async def start(self) -> None:
        """Before the broker serves: obtain this broker's replica id (manager.broker_id) and check the arbiter's
        settings. ConfigError (one line) for settings that can never work."""

    async def run(self) -> None:
        """Learn the role for ever: every change goes to manager.apply()."""

    async def stop(self) -> None:
        """Leave: drop the lease (and give it up where the arbiter allows it)."""

    def write_permit(self, now_ms: int, epoch: int) -> str | None:
        """None while a master of `epoch` may acknowledge writes (it holds a valid lease), else why not."""

    def lease_remaining_ms(self, now_ms: int, epoch: int) -> int:
        """How long the write lease of `epoch` still runs (0: none)."""

    def drop_lease(self) -> None:
        """A switch, a step-down or a newer epoch: stop acknowledging at once."""

    def applied(self, info: RoleInfo, send_ms: int | None) -> None:
        """After manager.apply acted on `info` (answer to a request sent at send_ms, None for a push)."""

    def wake(self) -> None:
        """Ask the arbiter again soon (after a switch, a failed switch, a refused SyncStateSet change)."""

    async def elect(self) -> tuple[RoleInfo, int | None] | None:
        """The group has no master: ask for an election. The answer to apply (and when its request was sent), or
        None (the lease source elects on its own: nothing to ask)."""

    async def alter_sync_state_set(self, proposed: set[int], master_epoch: int,
                                   sss_epoch: int) -> SyncStateSet | None:
        """Record `proposed` as the SyncStateSet of master epoch `master_epoch` before the master acts on it; the
        recorded set (with its new epoch) or None when refused. Raises OrbitMQError when the arbiter is unreachable."""

    async def replicas(self) -> list[Replica]:
        """The other members of the group (addresses, liveness). Raises OrbitMQError when unknown."""

    def peer_announced(self, broker_id: int, addr: str) -> None:
        """A slave named itself to this broker (EXCHANGE_BROKER_HA_INFO carries its id and address)."""

    def runtime(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO fields of this source."""
