"""DeliveryMachine: the deterministic consumption state of one queue (one topic + consumer group), applied by
every replica of a Raft group in log order (seed 001, rabbit_fifo's model; issue 14).

State: waiting messages (`ready`: FIFO in enqueue order; `returns`: returned messages, served before `ready`,
lowest enqueue sequence first), consumers (node, prefetch, invisible time, checkouts) and the service queue (SQ)
of consumers that can take one more message. After every command the machine hands out waiting messages: take
the consumer at the SQ's front, check one message out to it under a new delivery id, put it back at the end while
it has room. Which consumer gets which message depends only on the commands applied so far, so every replica
computes the same assignments at the same index. Time is the maximum `ts` seen in commands (never a clock).

Pure: no I/O, no clock, no randomness, no iteration over unordered sets; `snapshot()`/`restore()` give a
machine equal to one that replayed the log (same `digest()`, same future effects).
"""

from __future__ import annotations

import bisect
import hashlib
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import orjson

from orbitmq.base.invariant import check
from orbitmq.delivery.commands import (
    Attach,
    ChangeInvisible,
    Command,
    ConsumerDown,
    Enqueue,
    Expire,
    NodeDown,
    Return,
    Settle,
)
from orbitmq.delivery.effects import DeadLettered, Deliver, Effect, Refused, Returned, Settled

SNAPSHOT_VERSION = 1
DEFAULT_MAX_DELIVERIES = 17      # RocketMQ: first delivery + retryMaxTimes (16) redeliveries, then the DLQ


@dataclass(slots=True)
class Msg:
    queue: int
    offset: int
    size: int
    count: int = 0          # times handed out so far


@dataclass(slots=True)
class Consumer:
    node: str
    prefetch: int
    invisible_ms: int
    active: bool = True     # single-active mode: only the first attached live consumer is active
    in_sq: bool = False
    checked: dict[int, None] = field(default_factory=dict)    # delivery ids, in delivery order


@dataclass(slots=True)
class Checkout:
    consumer: str
    seq: int
    deadline: int


class DeliveryMachine:
    def __init__(self, max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> None:
        check(max_deliveries >= 1, "max_deliveries must be >= 1")
        self.max_deliveries = max_deliveries
        self.now = 0
        self.mode: str | None = None             # fixed by the first attach while no consumer exists
        self.next_seq = 1
        self.next_did = 1
        self.last_offset: dict[int, int] = {}    # queue -> highest enqueued offset (duplicate enqueues refused)
        self.msgs: dict[int, Msg] = {}           # seq -> message, not yet settled
        self.ready: deque[int] = deque()
        self.returns: list[int] = []             # sorted
        self.consumers: dict[str, Consumer] = {}  # attach order
        self.checkouts: dict[int, Checkout] = {}  # did -> checkout, did order
        self.sq: deque[str] = deque()
        self.applied = 0                         # commands applied (for callers; not part of the decisions)

    # --- apply -----------------------------------------------------------------------------------------
    def apply(self, cmd: Command) -> list[Effect]:
        """Apply one committed command; returns its effects (identical on every replica)."""
        self.now = max(self.now, cmd.ts)
        self.applied += 1
        out: list[Effect] = []
        if isinstance(cmd, Enqueue):
            self._enqueue(cmd, out)
        elif isinstance(cmd, Attach):
            self._attach(cmd, out)
        elif isinstance(cmd, Settle):
            self._settle(cmd, out)
        elif isinstance(cmd, Return):
            self._end_many(cmd.consumer, cmd.dids, "nack", out)
        elif isinstance(cmd, ChangeInvisible):
            co = self.checkouts.get(cmd.did)
            if co is None or co.consumer != cmd.consumer:
                out.append(Refused(f"delivery {cmd.did} is not checked out to {cmd.consumer}"))
            else:
                co.deadline = self.now + cmd.invisible_ms
        elif isinstance(cmd, Expire):
            due = [did for did, co in self.checkouts.items() if co.deadline <= self.now]
            for did in due:
                self._return(did, "expired", out)
        elif isinstance(cmd, ConsumerDown):
            if cmd.consumer not in self.consumers:
                out.append(Refused(f"unknown consumer {cmd.consumer}"))
            else:
                self._down(cmd.consumer, out)
        elif isinstance(cmd, NodeDown):
            for cid in [c for c, v in self.consumers.items() if v.node == cmd.node]:
                self._down(cid, out)
        self._assign(out)
        return out

    def _enqueue(self, cmd: Enqueue, out: list[Effect]) -> None:
        last = self.last_offset.get(cmd.queue)
        if last is not None and cmd.offset <= last:
            out.append(Refused(f"queue {cmd.queue} offset {cmd.offset} already enqueued (last {last})"))
            return
        self.last_offset[cmd.queue] = cmd.offset
        seq = self.next_seq
        self.next_seq += 1
        self.msgs[seq] = Msg(cmd.queue, cmd.offset, cmd.size)
        self.ready.append(seq)

    def _attach(self, cmd: Attach, out: list[Effect]) -> None:
        c = self.consumers.get(cmd.consumer)
        if c is not None:
            if c.node != cmd.node:
                out.append(Refused(f"consumer {cmd.consumer} is attached on {c.node}, not {cmd.node}"))
                return
            c.prefetch, c.invisible_ms = cmd.prefetch, cmd.invisible_ms
            self._make_room(cmd.consumer, c)
            return
        if not self.consumers:
            self.mode = cmd.mode
        elif cmd.mode != self.mode:
            out.append(Refused(f"queue is in {self.mode} mode, consumer {cmd.consumer} asked for {cmd.mode}"))
            return
        active = self.mode != "single_active" or not self.consumers
        c = Consumer(cmd.node, cmd.prefetch, cmd.invisible_ms, active=active)
        self.consumers[cmd.consumer] = c
        self._make_room(cmd.consumer, c)

    def _settle(self, cmd: Settle, out: list[Effect]) -> None:
        for did in cmd.dids:
            co = self.checkouts.get(did)
            if co is None or co.consumer != cmd.consumer:
                out.append(Refused(f"delivery {did} is not checked out to {cmd.consumer}"))
                continue
            del self.checkouts[did]
            c = self.consumers[co.consumer]
            del c.checked[did]
            m = self.msgs.pop(co.seq)
            out.append(Settled(did, co.consumer, m.queue, m.offset))
            self._make_room(co.consumer, c)

    def _end_many(self, consumer: str, dids: tuple[int, ...], why: str, out: list[Effect]) -> None:
        for did in dids:
            co = self.checkouts.get(did)
            if co is None or co.consumer != consumer:
                out.append(Refused(f"delivery {did} is not checked out to {consumer}"))
            else:
                self._return(did, why, out)

    def _return(self, did: int, why: str, out: list[Effect]) -> None:
        co = self.checkouts.pop(did)
        m = self.msgs[co.seq]
        c = self.consumers.get(co.consumer)
        if c is not None:
            del c.checked[did]
        out.append(Returned(did, co.consumer, m.queue, m.offset, why))
        if m.count >= self.max_deliveries:
            del self.msgs[co.seq]
            out.append(DeadLettered(m.queue, m.offset, m.count))
        else:
            bisect.insort(self.returns, co.seq)
        if c is not None:
            self._make_room(co.consumer, c)

    def _down(self, cid: str, out: list[Effect]) -> None:
        c = self.consumers[cid]
        for did in list(c.checked):
            self._return(did, "down", out)
        del self.consumers[cid]
        if c.in_sq:
            self.sq.remove(cid)
        if self.mode == "single_active" and c.active:
            for nid, nc in self.consumers.items():      # the next consumer in attach order takes over
                nc.active = True
                self._make_room(nid, nc)
                break

    def _make_room(self, cid: str, c: Consumer) -> None:
        if c.active and not c.in_sq and len(c.checked) < c.prefetch:
            c.in_sq = True
            self.sq.append(cid)

    def _next_waiting(self) -> int:
        return self.returns.pop(0) if self.returns else self.ready.popleft()

    def _assign(self, out: list[Effect]) -> None:
        while (self.returns or self.ready) and self.sq:
            cid = self.sq.popleft()
            c = self.consumers[cid]
            c.in_sq = False
            if not c.active or len(c.checked) >= c.prefetch:
                continue
            seq = self._next_waiting()
            m = self.msgs[seq]
            did = self.next_did
            self.next_did += 1
            deadline = self.now + c.invisible_ms
            self.checkouts[did] = Checkout(cid, seq, deadline)
            c.checked[did] = None
            out.append(Deliver(did, cid, c.node, m.queue, m.offset, m.size, m.count, deadline))
            m.count += 1
            self._make_room(cid, c)

    # --- views -----------------------------------------------------------------------------------------
    def waiting(self) -> list[tuple[int, int]]:
        """(queue, offset) of the messages not checked out, in the order they will be handed out."""
        return [(self.msgs[s].queue, self.msgs[s].offset) for s in [*self.returns, *self.ready]]

    def outstanding(self, nodes: Collection[str] | None = None) -> list[Deliver]:
        """Deliver effects for every current checkout (of consumers on `nodes`, or all), in delivery order: what a
        replica re-sends after it skipped applies (snapshot installed, restart) or became the leader, since the
        effects of entries it did not apply as executor were never sent. Consumers drop repeated delivery ids."""
        out: list[Deliver] = []
        for did, co in self.checkouts.items():
            c = self.consumers[co.consumer]
            if nodes is None or c.node in nodes:
                m = self.msgs[co.seq]
                out.append(Deliver(did, co.consumer, c.node, m.queue, m.offset, m.size, m.count - 1, co.deadline))
        return out

    def check_invariants(self) -> None:
        """Structural invariants (raise InvariantError): every unsettled message is in exactly one place; every
        active consumer with room is in the service queue (a lowered prefetch may leave one there without room:
        it is dropped when reached); nothing waits while the service queue is not empty."""
        places: dict[int, int] = {}
        for s in [*self.ready, *self.returns, *(co.seq for co in self.checkouts.values())]:
            places[s] = places.get(s, 0) + 1
        check(sorted(places) == sorted(self.msgs) and all(v == 1 for v in places.values()),
              "a message is missing or in two places")
        check(self.returns == sorted(self.returns), "returns out of order")
        n_checked = 0
        for cid, c in self.consumers.items():
            check(all(self.checkouts[d].consumer == cid for d in c.checked), f"{cid}'s checkouts disagree")
            check(c.active or not c.checked, f"inactive consumer {cid} holds messages")
            check(c.in_sq or not (c.active and len(c.checked) < c.prefetch), f"{cid} has room but is not in the SQ")
            check(c.active or not c.in_sq, f"inactive consumer {cid} in the SQ")
            n_checked += len(c.checked)
        check(n_checked == len(self.checkouts), "checkouts of unknown consumers")
        check(sorted(self.sq) == sorted(c for c, v in self.consumers.items() if v.in_sq), "SQ entries wrong")
        check(not ((self.ready or self.returns) and self.sq), "messages wait while a consumer has room")
        if self.mode == "single_active":
            act = [c for c, v in self.consumers.items() if v.active]
            check(act == list(self.consumers)[:1], f"single active consumer broken: active {act}")

    # --- snapshot --------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        return orjson.dumps(self.state())

    def state(self) -> dict[str, Any]:
        """The whole state as plain JSON-able data (what `snapshot()` serializes)."""
        return {
            "v": SNAPSHOT_VERSION, "now": self.now, "mode": self.mode, "maxd": self.max_deliveries,
            "seq": self.next_seq, "did": self.next_did, "applied": self.applied,
            "last": [[q, o] for q, o in sorted(self.last_offset.items())],
            "msgs": [[s, m.queue, m.offset, m.size, m.count] for s, m in self.msgs.items()],
            "ready": list(self.ready), "returns": self.returns,
            "consumers": [[cid, c.node, c.prefetch, c.invisible_ms, c.active, c.in_sq]
                          for cid, c in self.consumers.items()],
            "checkouts": [[did, co.consumer, co.seq, co.deadline] for did, co in self.checkouts.items()],
            "sq": list(self.sq),
        }

    @classmethod
    def restore(cls, data: bytes) -> DeliveryMachine:
        return cls.from_state(orjson.loads(data))

    @classmethod
    def from_state(cls, st: Any) -> DeliveryMachine:
        check(isinstance(st, dict) and st.get("v") == SNAPSHOT_VERSION, "unknown delivery snapshot version")
        m = cls(st["maxd"])
        m.now, m.mode, m.next_seq, m.next_did, m.applied = st["now"], st["mode"], st["seq"], st["did"], st["applied"]
        m.last_offset = {q: o for q, o in st["last"]}
        m.msgs = {s: Msg(q, o, size, n) for s, q, o, size, n in st["msgs"]}
        m.ready = deque(st["ready"])
        m.returns = list(st["returns"])
        m.consumers = {cid: Consumer(node, p, inv, active, in_sq) for cid, node, p, inv, active, in_sq
                       in st["consumers"]}
        for did, cid, seq, deadline in st["checkouts"]:
            m.checkouts[did] = Checkout(cid, seq, deadline)
            m.consumers[cid].checked[did] = None
        m.sq = deque(st["sq"])
        m.check_invariants()
        return m

    def digest(self) -> str:
        """A short hash of the whole state (equal on replicas at the same index)."""
        return hashlib.blake2b(self.snapshot(), digest_size=8).hexdigest()
