"""Dispatch of visible CommitLog records to derived stores (ConsumeQueue, IndexFile, listeners).

Owns DispatchRequest (one record made visible), the DispatchTarget protocol, the Dispatcher fan-out and the rule
for which (topic, queue) may get a ConsumeQueue (queue_name_error) with SkipLog, the log of records skipped for it.
Derived stores never reach back into the CommitLog: they receive requests only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from orbitmq.model.names import is_legal_queue_id, store_topic_error

log = logging.getLogger("orbitmq.store.dispatch")


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

    __slots__ = ("_targets", "_runs")

    def __init__(self) -> None:
        self._targets: list[Callable[[DispatchRequest], None]] = []
        # each target's dispatch_many, while every target has one (else None)
        self._runs: list[Callable[[list[DispatchRequest]], None]] | None = []

    def register(self, target: DispatchTarget | Callable[[DispatchRequest], None]) -> None:
        fn = target.dispatch if hasattr(target, "dispatch") else target
        self._targets.append(fn)  # type: ignore[arg-type]
        many = getattr(target, "dispatch_many", None)
        if self._runs is not None:
            if many is None:
                self._runs = None
            else:
                self._runs.append(many)

    def dispatch(self, req: DispatchRequest) -> None:
        for fn in self._targets:
            fn(req)

    def dispatch_many(self, reqs: list[DispatchRequest]) -> None:
        """Every target's dispatch of every request: target by target, each taking the whole run in one call when
        all of them can (a target sees the requests in order; one that fails stops the run, and the store undoes
        the put as for a single record), else request by request."""
        runs = self._runs
        if runs is not None:
            for many in runs:
                many(reqs)
            return
        targets = self._targets
        for req in reqs:
            for fn in targets:
                fn(req)

    def __len__(self) -> int:
        return len(self._targets)


Listener = Callable[[DispatchRequest], None]


class DispatchListeners:
    """The store's dispatch listeners (long-poll, pop, delay, timer, de-dup), called in registration order, each
    behind its own try: a failing listener is logged and breaks neither the write path nor the listeners after it.

    A listener may narrow what it is called for, where it would do nothing with the other records anyway:
    `topics` (records of these topics only) and `while_nonempty` (a container of its own, e.g. its table of
    waiting requests: called only while that container is non-empty; the container must be the listener's
    live object, never replaced). The common record (a user topic, nobody waiting) then costs one set lookup,
    one `any()` over the containers and the calls of the unfiltered listeners only."""

    __slots__ = ("_entries", "_plain", "_topics", "_gates")

    def __init__(self) -> None:
        self._entries: list[tuple[Listener, frozenset[str] | None, Collection[object] | None]] = []
        self._plain: list[Listener] = []  # the listeners without a filter, in registration order
        self._topics: frozenset[str] = frozenset()  # union of the listeners' topic filters
        self._gates: list[Collection[object]] = []  # any(self._gates): is some container non-empty?

    def add(self, fn: Listener, *, topics: Iterable[str] | None = None,
            while_nonempty: Collection[object] | None = None) -> None:
        wanted = None if topics is None else frozenset(topics)
        self._entries.append((fn, wanted, while_nonempty))
        if wanted is None and while_nonempty is None:
            self._plain.append(fn)
        if wanted is not None:
            self._topics |= wanted
        if while_nonempty is not None:
            self._gates.append(while_nonempty)

    def __len__(self) -> int:
        return len(self._entries)

    def dispatch(self, req: DispatchRequest) -> None:
        self.dispatch_many((req,))

    def dispatch_many(self, reqs: Sequence[DispatchRequest]) -> None:
        """Each record in turn: the filtered path when some listener's filter may want it, else the unfiltered
        listeners, each behind its own try."""
        topics, gates, plain = self._topics, self._gates, self._plain
        for req in reqs:
            if req.topic in topics or any(gates):
                self._filtered(req)
                continue
            for fn in plain:
                try:
                    fn(req)
                except Exception:
                    log.exception("dispatch listener failed")

    def _filtered(self, req: DispatchRequest) -> None:
        topic = req.topic
        for fn, topics, gate in self._entries:
            if (topics is not None and topic not in topics) or (gate is not None and not gate):
                continue
            try:
                fn(req)
            except Exception:
                log.exception("dispatch listener failed")


def queue_name_error(topic: str, queue_id: int) -> str | None:
    """None if (topic, queue_id) may name `consumequeue/<topic>/<queue_id>`, else why not (a record of such a
    queue is skipped, never dispatched: it cannot create a path outside the store or stop a recovery)."""
    err = store_topic_error(topic)
    if err is None and not is_legal_queue_id(queue_id):
        err = f"queue id {queue_id!r} is not a non-negative 31-bit int"
    return err


class SkipLog:
    """Log of records skipped by dispatch: each bad name is logged once (the first MAX_NAMES names); past that,
    only a running count at every power of two, so a log full of bad records cannot flood the output."""

    MAX_NAMES = 100

    def __init__(self, what: str) -> None:
        self.what = what
        self.skipped = 0
        self._names: set[str] = set()

    def skip(self, name: str, reason: str, phys_offset: int) -> None:
        self.skipped += 1
        if name in self._names:
            return
        if len(self._names) < self.MAX_NAMES:
            self._names.add(name)
            log.warning("%s: record at phys offset %d skipped (%s); later records of this name are skipped "
                        "silently", self.what, phys_offset, reason)
        elif self.skipped & (self.skipped - 1) == 0:
            log.warning("%s: %d records with illegal names skipped so far", self.what, self.skipped)
