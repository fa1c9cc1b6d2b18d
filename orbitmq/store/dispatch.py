"""Dispatch of visible CommitLog records to derived stores (ConsumeQueue, IndexFile, listeners).

Owns DispatchRequest (one record made visible), the DispatchTarget protocol and the Dispatcher fan-out.
Derived stores never reach back into the CommitLog: they receive requests only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class DispatchRequest:
    """One CommitLog record that just became visible (at or below confirm offset)."""

    topic: str
    queue_id: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str] = field(default_factory=dict)


class DispatchTarget(Protocol):
    def dispatch(self, req: DispatchRequest) -> None: ...


class Dispatcher:
    """Fans each request out to registered targets in registration order (CQ first, then index, then listeners)."""

    __slots__ = ("_targets",)

    def __init__(self) -> None:
        self._targets: list[Callable[[DispatchRequest], None]] = []

    def register(self, target: DispatchTarget | Callable[[DispatchRequest], None]) -> None:
        fn = target.dispatch if hasattr(target, "dispatch") else target
        self._targets.append(fn)  # type: ignore[arg-type]

    def dispatch(self, req: DispatchRequest) -> None:
        for fn in self._targets:
            fn(req)

    def dispatch_many(self, reqs: Iterable[DispatchRequest]) -> None:
        """dispatch() of each request in turn (same calls, same order), without a Python call per request."""
        targets = self._targets
        if len(targets) == 3:  # the store's own wiring: CQ, index, listeners
            first, second, third = targets
            for req in reqs:
                first(req)
                second(req)
                third(req)
            return
        for req in reqs:
            for fn in targets:
                fn(req)

    def __len__(self) -> int:
        return len(self._targets)
