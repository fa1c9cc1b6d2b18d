"""DeliveryReplica: what one member of a Raft group does with delivery entries. It applies every committed entry
to its DeliveryRouter (same effects on every member) and returns the deliveries this member must send itself
(`effects.executes_here`). Applies it skipped are made up for: after restoring a snapshot it re-sends the
current checkouts of consumers on its own node; on becoming leader, those of consumers on nodes without a
replica. Consumers drop a delivery id they already have. No I/O: the caller sends and reads message bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from orbitmq.delivery.effects import Deliver, Effect, executes_here
from orbitmq.delivery.machine import DEFAULT_MAX_DELIVERIES
from orbitmq.delivery.router import DeliveryRouter

Send = tuple[str, Deliver]          # (queue key, delivery)


class DeliveryReplica:
    def __init__(self, node_id: str, replica_nodes: Collection[str],
                 max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> None:
        self.node_id = node_id
        self.replica_nodes = tuple(replica_nodes)
        self.router = DeliveryRouter(max_deliveries)
        self.is_leader = False
        self.leader_term = -1

    def apply(self, payload: bytes) -> tuple[str, list[Effect], list[Deliver]]:
        """One committed entry: (queue key, all effects, the deliveries this member sends)."""
        key, effects = self.router.apply(payload)
        return key, effects, self._mine(effects)

    def enqueue(self, topic: str, queue: int, offset: int, size: int) -> list[tuple[str, list[Effect], list[Deliver]]]:
        """A committed message (applied as part of its MESSAGES entry, no entry of its own) joins every machine of
        its topic: [(queue key, all effects, the deliveries this member sends)] per machine."""
        return [(key, effects, self._mine(effects)) for key, effects in self.router.enqueue(topic, queue, offset, size)]

    def _mine(self, effects: list[Effect]) -> list[Deliver]:
        return [e for e in effects if isinstance(e, Deliver)
                and executes_here(e.node, self.node_id, self.is_leader, self.replica_nodes)]

    def set_role(self, is_leader: bool, term: int) -> list[Send]:
        """Role change. A new leader (once per term) re-sends the checkouts of replica-less nodes' consumers:
        it did not send them as a follower and the old leader may not have."""
        self.is_leader = is_leader
        if not is_leader or term == self.leader_term:
            return []
        self.leader_term = term
        return self._outstanding(lambda node: node not in self.replica_nodes)

    def restore(self, snapshot: bytes | None) -> list[Send]:
        """Install a snapshot (None: empty state); returns the own-node checkouts to re-send."""
        max_d = self.router.max_deliveries
        self.router = DeliveryRouter.restore(snapshot) if snapshot is not None else DeliveryRouter(max_d)
        return self._outstanding(lambda node: node == self.node_id)

    def _outstanding(self, want: Callable[[str], bool]) -> list[Send]:
        out: list[Send] = []
        for key, m in self.router.machines.items():
            nodes = [c.node for c in m.consumers.values() if want(c.node)]
            out += [(key, d) for d in m.outstanding(nodes)]
        return out
