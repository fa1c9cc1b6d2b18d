"""SimNet: the deterministic simulated network of the Raft simulator (per-link delay, loss, duplication,
reordering, symmetric and one-way partitions, a per-link message-type filter and a delivery hook).

It only decides *whether* and *when* a message arrives; the simulator's event queue does the delivering.
All randomness comes from the injected random.Random (a fork of the run's seed); nothing here reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from orbitmq.raft.messages import Message, MsgType


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """Behaviour of one directed link. Delays are uniform in [delay_min_ms, delay_max_ms]; `reorder` is the
    probability that a message gets an extra delay of up to `reorder_ms` (so later ones overtake it)."""
    delay_min_ms: int = 1
    delay_max_ms: int = 8
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    reorder_ms: int = 40


CALM = LinkSpec()


class SimNet:
    def __init__(self, rng: random.Random, nodes: Iterable[str], default: LinkSpec = CALM) -> None:
        self._rng = rng
        self.nodes = tuple(nodes)
        self._default = default
        self._links: dict[tuple[str, str], LinkSpec] = {}
        self._blocked: dict[tuple[str, str], bool] = {}      # dict, not set: deterministic iteration
        self._drop_types: dict[tuple[str, str], tuple[MsgType, ...]] = {}
        self.on_deliver: Callable[[Message], None] | None = None
        self.sent = 0
        self.dropped = 0

    # --- configuration ---------------------------------------------------------------------------------
    def link(self, src: str, dst: str) -> LinkSpec:
        return self._links.get((src, dst), self._default)

    def set_link(self, src: str, dst: str, spec: LinkSpec) -> None:
        self._links[(src, dst)] = spec

    def set_all(self, spec: LinkSpec) -> None:
        self._default = spec
        self._links.clear()

    def drop_types(self, src: str, dst: str, types: tuple[MsgType, ...]) -> None:
        """Per-link filter: messages of these types from src to dst are lost (() removes the filter)."""
        if types:
            self._drop_types[(src, dst)] = types
        else:
            self._drop_types.pop((src, dst), None)

    def partition(self, *groups: Iterable[str]) -> None:
        """Symmetric partition: no message crosses between different groups (nodes in no group are
        cut off from everyone)."""
        where: dict[str, int] = {}
        for gi, g in enumerate(groups):
            for n in g:
                where[n] = gi
        for a in self.nodes:
            for b in self.nodes:
                if a != b and (a not in where or b not in where or where[a] != where[b]):
                    self._blocked[(a, b)] = True

    def partition_one_way(self, srcs: Iterable[str], dsts: Iterable[str]) -> None:
        """Messages from any of `srcs` to any of `dsts` are lost; the other direction still works."""
        dst_list = list(dsts)
        for a in srcs:
            for b in dst_list:
                if a != b:
                    self._blocked[(a, b)] = True

    def heal(self) -> None:
        """Remove every partition and message filter (link specs stay)."""
        self._blocked.clear()
        self._drop_types.clear()

    def blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self._blocked

    def partitioned(self) -> bool:
        return bool(self._blocked)

    # --- traffic ---------------------------------------------------------------------------------------
    def route(self, msg: Message) -> list[int]:
        """Delays (ms) after which copies of `msg` arrive: [] if lost, two entries if duplicated."""
        self.sent += 1
        if self.blocked(msg.src, msg.dst) or msg.type in self._drop_types.get((msg.src, msg.dst), ()):
            self.dropped += 1
            return []
        spec = self.link(msg.src, msg.dst)
        r = self._rng
        if spec.loss and r.random() < spec.loss:
            self.dropped += 1
            return []
        copies = 2 if spec.dup and r.random() < spec.dup else 1
        out = []
        for _ in range(copies):
            d = r.randint(spec.delay_min_ms, spec.delay_max_ms)
            if spec.reorder and r.random() < spec.reorder:
                d += r.randint(1, spec.reorder_ms)
            out.append(d)
        return out

    def deliverable(self, msg: Message) -> bool:
        """Checked again on arrival: a partition that started while the message was in flight drops it."""
        if self.blocked(msg.src, msg.dst):
            self.dropped += 1
            return False
        if self.on_deliver is not None:
            self.on_deliver(msg)
        return True
