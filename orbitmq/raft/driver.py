"""RaftDriver: the asyncio loop around one sans-IO RaftNode (ticks, inbound messages, proposals, ReadIndex).

Per Ready, in this order: persist it (RaftStorage.prepare on the loop, then RaftStorage.save in a worker thread,
both awaited), then send its messages,
then apply committed entries to the state machine on the loop, then node.advance(). While a save runs nothing
touches the node: inbound messages, proposals and reads are only collected. A storage failure is fatal: the
driver stops without acknowledging anything. It owns no socket (the transport's handle() is registered by the
owner of the port) and no state machine logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Protocol, TypeVar

from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.raft.errors import NotLeaderError, RaftStoppedError
from orbitmq.raft.messages import Entry, Message, RaftConfig, Ready, Role
from orbitmq.raft.node import RaftNode
from orbitmq.raft.storage import RaftStorage
from orbitmq.raft.transport import RaftTransport

log = logging.getLogger("orbitmq.raft")

T = TypeVar("T")
RoleListener = Callable[[Role, int, str], None]
INBOX_LIMIT = 10_000  # inbound messages collected while a save runs; beyond it the oldest go (Raft resends)
MAX_CATCHUP_TICKS = 3  # after a stall (a slow fsync), at most this many ticks at once


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> object: ...  # data == b"" for the leader's no-op entries

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


class RaftDriver:
    """One Raft member: start(), then propose()/read_barrier() on the leader; stop() ends every task."""

    def __init__(self, config: RaftConfig, storage: RaftStorage, transport: RaftTransport, sm: StateMachine, *,
                 rng: random.Random | None = None, clock: Clock = REAL_CLOCK, snapshot_every: int = 10_000) -> None:
        config.validate()
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be >= 1")
        self.config = config
        self._storage = storage
        self._transport = transport
        self._sm = sm
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._snapshot_every = snapshot_every
        self._node: RaftNode | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._fatal: BaseException | None = None
        self._inbox: list[Message] = []
        self._proposals: list[tuple[bytes, asyncio.Future[object]]] = []
        self._pending: dict[int, tuple[int, asyncio.Future[object]]] = {}  # index -> (term, future)
        self._new_reads: list[tuple[int, asyncio.Future[None]]] = []
        self._reads: dict[int, asyncio.Future[None]] = {}                 # request id -> future (node has it)
        self._read_waits: list[tuple[int, asyncio.Future[None]]] = []     # (read index, future) until applied
        self._next_rid = 1
        self._applied = 0
        self._snap_index = 0
        self._next_tick = 0
        self._listeners: list[RoleListener] = []
        self._last_role: tuple[Role, int, str] = (Role.FOLLOWER, 0, "")
        self.dropped_inbound = 0

    # ---- read-only state ----------------------------------------------------------------------------
    @property
    def node_id(self) -> str:
        return self.config.node_id

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._stopping

    @property
    def is_leader(self) -> bool:
        return self.running and self._node is not None and self._node.role == Role.LEADER

    @property
    def leader_id(self) -> str:
        return self._node.leader_id if self._node is not None and self.running else ""

    @property
    def term(self) -> int:
        return self._node.term if self._node is not None else 0

    @property
    def applied_index(self) -> int:
        return self._applied

    def peer_addr(self, node_id: str) -> str:
        return self._transport.peer_addr(node_id)

    def add_role_listener(self, cb: RoleListener) -> None:
        """cb(role, term, leader_id) on the loop whenever one of them changes (and FOLLOWER once at stop)."""
        self._listeners.append(cb)

    def status(self) -> dict[str, object]:
        out: dict[str, object] = dict(self._node.status()) if self._node is not None else {"id": self.node_id}
        out.update({"running": self.running, "driver_applied": self._applied, "snapshot_index": self._snap_index,
                    "pending_proposals": len(self._pending), "pending_reads": len(self._reads) + len(self._read_waits),
                    "dropped_inbound": self.dropped_inbound, "fatal": repr(self._fatal) if self._fatal else "",
                    "storage": self._storage.status(), "transport": self._transport.status()})
        return out

    # ---- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load storage, restore the snapshot into the state machine, build the node and start the loop."""
        if self._task is not None:
            raise RuntimeError("RaftDriver.start() called twice")
        hs, snap, entries = await asyncio.to_thread(self._storage.load)
        try:
            self._storage.loaded()
            if snap is not None:
                self._sm.restore(snap.data)
                self._applied = self._snap_index = snap.index
            self._node = RaftNode(self.config, self._rng, hard_state=hs, snapshot=snap, entries=entries)
        except BaseException:
            await asyncio.to_thread(self._storage.close)  # release the directory lock
            raise
        self._last_role = (self._node.role, self._node.term, self._node.leader_id)
        self._next_tick = self._clock.monotonic_ms() + self.config.tick_ms
        self._transport.set_receiver(self._on_messages)
        await self._transport.start()
        self._task = asyncio.create_task(self._run(), name=f"raft-{self.node_id}")
        log.info("raft %s: started (term %d, commit %d, snapshot %d, %d log entries)", self.node_id, hs.term,
                 hs.commit, self._snap_index, len(entries))

    async def stop(self) -> None:
        """Stop the loop (an in-flight save finishes first), the transport's tasks and the storage."""
        task = self._task
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # ---- requests -----------------------------------------------------------------------------------
    async def propose(self, data: bytes, timeout_ms: int = 5000) -> object:
        """The state machine's apply() result once the entry is committed and applied here. NotLeaderError at
        once on a follower, or when leadership is lost / the entry is overwritten; TimeoutError after
        timeout_ms (the entry may still be applied later)."""
        return await self._wait(self.propose_nowait(data), timeout_ms, "proposal")

    def propose_nowait(self, data: bytes) -> asyncio.Future[object]:
        """propose() without the wait: queued now, in call order (NotLeaderError at once on a follower); the
        future gets what propose() returns. Await it with wait_proposal()."""
        self._require_leader()
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._proposals.append((bytes(data), fut))
        self._wake.set()
        return fut

    async def wait_proposal(self, fut: asyncio.Future[object], timeout_ms: int = 5000) -> object:
        """The result of a propose_nowait() future; TimeoutError after timeout_ms. Unlike propose(), a time-out
        does not withdraw the proposal (its owner may have written something that the entry must follow)."""
        return await self._wait(fut, timeout_ms, "proposal", withdraw=False)

    async def read_barrier(self, timeout_ms: int = 5000) -> None:
        """ReadIndex: returns once the local state machine reflects every write committed before the call."""
        self._require_leader()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        rid = self._next_rid
        self._next_rid += 1
        self._new_reads.append((rid, fut))
        self._wake.set()
        await self._wait(fut, timeout_ms, "read barrier")

    def _require_leader(self) -> None:
        if self._node is None or not self.running:
            raise RaftStoppedError(message=f"raft node {self.node_id} is not running")
        if self._node.role != Role.LEADER:
            raise NotLeaderError(self._node.leader_id)

    @staticmethod
    async def _wait(fut: asyncio.Future[T], timeout_ms: int, what: str, withdraw: bool = True) -> T:
        try:
            async with asyncio.timeout(timeout_ms / 1000.0):
                return await asyncio.shield(fut)
        except TimeoutError:
            raise TimeoutError(f"raft {what} not done within {timeout_ms} ms") from None
        finally:
            if withdraw and not fut.done():
                fut.cancel()  # the loop skips cancelled futures

    # ---- the loop -----------------------------------------------------------------------------------
    def _on_messages(self, msgs: list[Message]) -> None:
        if self._stopping:
            return
        self._inbox.extend(msgs)
        if len(self._inbox) > INBOX_LIMIT:
            over = len(self._inbox) - INBOX_LIMIT
            del self._inbox[:over]
            self.dropped_inbound += over
        self._wake.set()

    async def _run(self) -> None:
        node = self._node
        assert node is not None
        try:
            while not self._stopping:
                self._wake.clear()
                self._feed(node)
                while node.has_ready():
                    await self._handle_ready(node, node.ready())
                    self._notify_role(node)
                    if self._stopping:
                        break
                    self._feed(node)
                if self._stopping:
                    break
                delay_ms = self._next_tick - self._clock.monotonic_ms()
                if delay_ms > 0 and not self._wake.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay_ms / 1000.0):
                            await self._wake.wait()
        except Exception as e:
            self._fatal = e
            log.error("raft %s: stopping the node after a fatal error: %r", self.node_id, e)
        finally:
            self._stopping = True
            await self._shutdown()

    def _feed(self, node: RaftNode) -> None:
        """Hand the node everything collected: messages, then due ticks, then proposals and reads."""
        inbox, self._inbox = self._inbox, []
        for m in inbox:
            node.step(m)
        now = self._clock.monotonic_ms()
        ticks = 0
        while now >= self._next_tick and ticks < MAX_CATCHUP_TICKS:
            node.tick()
            ticks += 1
            self._next_tick += self.config.tick_ms
        if now >= self._next_tick:
            self._next_tick = now + self.config.tick_ms
        self._notify_role(node)
        proposals, self._proposals = self._proposals, []
        for data, fut in proposals:
            if fut.done():
                continue
            entry = node.propose(data)
            if entry is None:
                fut.set_exception(NotLeaderError(node.leader_id))
            else:
                self._pending[entry.index] = (entry.term, fut)
        reads, self._new_reads = self._new_reads, []
        for rid, rfut in reads:
            if rfut.done():
                continue
            if node.read_index(rid):
                self._reads[rid] = rfut
            else:
                rfut.set_exception(NotLeaderError(node.leader_id))

    async def _handle_ready(self, node: RaftNode, rd: Ready) -> None:
        if rd.hard_state is not None or rd.entries or rd.snapshot is not None or rd.compact_snapshot is not None:
            await self._storage.prepare(rd)
            await asyncio.to_thread(self._storage.save, rd)  # raises -> fatal: nothing of rd is acknowledged
        self._transport.send(rd.messages)
        if rd.snapshot is not None:
            self._sm.restore(rd.snapshot.data)
            self._applied = self._snap_index = rd.snapshot.index
            for index in [i for i in self._pending if i <= rd.snapshot.index]:
                _, fut = self._pending.pop(index)
                if not fut.done():
                    fut.set_exception(NotLeaderError(node.leader_id, "entry replaced by the leader's snapshot"))
        for e in rd.committed:
            self._apply(node, e)
        for rs in rd.read_states:
            rfut = self._reads.pop(rs.request_id, None)
            if rfut is not None and not rfut.done():
                self._read_waits.append((rs.index, rfut))
        self._release_reads()
        node.advance(rd)
        if self._applied - self._snap_index >= self._snapshot_every:
            node.compact(self._applied, self._sm.snapshot())
            self._snap_index = self._applied

    def _apply(self, node: RaftNode, e: Entry) -> None:
        error: Exception | None = None
        result: object = None
        try:
            result = self._sm.apply(e.index, e.data)
        except Exception as ex:  # the proposer gets it; every replica raises the same on the same entry
            log.warning("raft %s: state machine apply(%d) raised %r", self.node_id, e.index, ex)
            error = ex
        self._applied = e.index
        pending = self._pending.pop(e.index, None)
        if pending is None or pending[1].done():
            return
        term, fut = pending
        if term != e.term:
            fut.set_exception(NotLeaderError(node.leader_id, f"entry {e.index} was overwritten by a new leader"))
        elif error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def _release_reads(self) -> None:
        if not self._read_waits:
            return
        keep = []
        for index, fut in self._read_waits:
            if fut.done():
                continue
            if index <= self._applied:
                fut.set_result(None)
            else:
                keep.append((index, fut))
        self._read_waits = keep

    def _notify_role(self, node: RaftNode) -> None:
        cur = (node.role, node.term, node.leader_id)
        if cur == self._last_role:
            return
        prev = self._last_role
        self._last_role = cur
        if prev[0] == Role.LEADER and (cur[0] != Role.LEADER or cur[1] != prev[1]):
            self._fail_requests(lambda: NotLeaderError(node.leader_id, f"leadership lost (term {node.term})"))
        self._call_listeners(cur)

    def _call_listeners(self, cur: tuple[Role, int, str]) -> None:
        for cb in list(self._listeners):
            try:
                cb(*cur)
            except Exception:
                log.exception("raft %s: role listener failed", self.node_id)

    def _fail_requests(self, make_error: Callable[[], Exception]) -> None:
        futs: list[asyncio.Future[object]] = [f for _, f in self._pending.values()]
        futs += [f for _, f in self._proposals]
        reads: list[asyncio.Future[None]] = [f for _, f in self._new_reads]
        reads += list(self._reads.values()) + [f for _, f in self._read_waits]
        self._pending.clear()
        self._proposals.clear()
        self._new_reads.clear()
        self._reads.clear()
        self._read_waits.clear()
        for f in [*futs, *reads]:
            if not f.done():
                f.set_exception(make_error())

    async def _shutdown(self) -> None:
        self._transport.set_receiver(None)
        reason = f"raft node {self.node_id} stopped" + (f" after a fatal error: {self._fatal!r}" if self._fatal
                                                        else "")
        self._fail_requests(lambda: RaftStoppedError(message=reason))
        if self._last_role[0] == Role.LEADER:
            self._last_role = (Role.FOLLOWER, self._last_role[1], "")
            self._call_listeners(self._last_role)
        try:
            await self._transport.stop()
        finally:
            await asyncio.to_thread(self._storage.close)
        log.info("raft %s: stopped", self.node_id)


__all__ = ["NotLeaderError", "RaftDriver", "RoleListener", "StateMachine"]
