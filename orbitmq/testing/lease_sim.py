"""Deterministic simulation of lease election (orbitmq.lease) in virtual time.

VirtualTimeLoop is an asyncio loop without I/O whose clock jumps to the next timer, so `asyncio.sleep`,
`wait_for` and `asyncio.timeout` take no real time and a run depends only on its seed. SimDb is one database (the
in-memory LeaseTable, with its own clock offset) reached through SimStore connections that add latency, outages
(refused or black-holed), lost answers and pauses of the calling node (a virtual SIGSTOP: the node's
statements and their answers wait at a gate; its monotonic clock keeps running). LeaseSim runs N candidates
with skewed, slightly drifting clocks and an InvariantRecorder that checks: never two nodes for which
may_acknowledge() holds at one virtual instant, one winner per epoch, epochs granted in strictly increasing order.
"""

from __future__ import annotations

import asyncio
import logging
import random
import selectors
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orbitmq.lease import Candidate, LeaseConfig, LeaseElector, LeaseRow, LeaseStoreError
from orbitmq.lease.store_memory import LeaseTable


# ---- virtual time -------------------------------------------------------------------------------------------
class _NoIOSelector(selectors.BaseSelector):
    """Accepts registrations (the loop's self-pipe) but never reports I/O; select(timeout) advances time."""

    def __init__(self) -> None:
        self._map: dict[int, selectors.SelectorKey] = {}
        self.loop: VirtualTimeLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("virtual-time loop: nothing is scheduled and no I/O exists (deadlock)")
        assert self.loop is not None
        if timeout > 0:
            self.loop.vt += timeout
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._map

    def close(self) -> None:
        self._map.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        sel = _NoIOSelector()
        super().__init__(sel)
        sel.loop = self
        self.vt = 0.0

    def time(self) -> float:
        return self.vt

    def now_ms(self) -> int:
        return int(self.vt * 1000)


def run_virtual(main: Callable[[VirtualTimeLoop], Coroutine[Any, Any, Any]]) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


async def run_until(loop: VirtualTimeLoop, pred: Callable[[], bool], max_ms: int, step_ms: int = 5) -> bool:
    deadline = loop.time() + max_ms / 1000
    while loop.time() < deadline:
        if pred():
            return True
        await asyncio.sleep(step_ms / 1000)
    return pred()


# ---- the simulated database -----------------------------------------------------------------------------------
class SimDb:
    """One database. `mode`: "up", "refuse" (statements fail after the latency) or "blackhole" (no answer:
    the caller's timeout fires). `lose_answers` > 0: the next n statements run but their answer is lost."""

    def __init__(self, loop: VirtualTimeLoop, rng: random.Random, *, clock_offset_ms: int = 0,
                 latency_ms: tuple[int, int] = (0, 0)) -> None:
        self.loop = loop
        self.rng = rng
        self.offset = clock_offset_ms
        self.latency_ms = latency_ms
        self.mode = "up"
        self.lose_answers = 0
        self.table = LeaseTable(self.now_ms)
        self.grants: list[tuple[int, str, float]] = []  # (epoch, nonce, virtual time) of each successful grant

    def now_ms(self) -> int:
        return self.loop.now_ms() + self.offset

    def latency_s(self) -> float:
        lo, hi = self.latency_ms
        return (self.rng.randint(lo, hi) if hi > lo else lo) / 1000


class Gate:
    """A node's run permission: closed while the node is paused."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def wait(self) -> None:
        await self._open.wait()


class SimStore:
    """A LeaseStore connection of one node to a SimDb."""

    def __init__(self, db: SimDb, gate: Gate, timeout_ms: int, on_op: Callable[[], None] | None = None) -> None:
        self.db = db
        self.gate = gate
        self.timeout_s = timeout_ms / 1000
        self.on_op = on_op
        self.description = "simdb"
        self.cut = ""  # "", "refuse" or "blackhole": this node alone is partitioned from the database

    async def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        await self.gate.wait()
        if self.on_op is not None:
            self.on_op()
        db = self.db
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.sleep(db.latency_s())
                mode = self.cut or db.mode
                if mode == "blackhole":
                    await asyncio.sleep(3600)
                if mode == "refuse":
                    raise LeaseStoreError(f"simdb: {what} failed: connection refused")
                result = fn()  # the statement runs here, atomically, at this virtual instant
                lost = db.lose_answers > 0
                if lost:
                    db.lose_answers -= 1
                    await asyncio.sleep(3600)
                await asyncio.sleep(db.latency_s())
        except TimeoutError:
            raise LeaseStoreError(f"simdb: {what} timed out") from None
        await self.gate.wait()  # a paused node reads the answer only when it runs again
        if self.on_op is not None:  # once the caller acted on the answer (it runs on until its next await)
            asyncio.get_running_loop().call_soon(self.on_op)
        return result

    def _grant(self, ok: bool, epoch: int, nonce: str) -> bool:
        if ok:
            self.db.grants.append((epoch, nonce, self.db.loop.time()))
        return ok

    async def open(self) -> None:
        await self._call("open", lambda: None)

    async def close(self) -> None:
        return None

    async def read(self, name: str) -> LeaseRow | None:
        return await self._call("read", lambda: self.db.table.read(name))

    async def insert(self, name: str, me: Candidate, ttl_ms: int) -> bool:
        return await self._call("insert", lambda: self._grant(self.db.table.insert(name, me, ttl_ms), 1, me.nonce))

    async def take_over(self, name: str, me: Candidate, seen_epoch: int, ttl_ms: int) -> bool:
        return await self._call("take-over", lambda: self._grant(
            self.db.table.take_over(name, me, seen_epoch, ttl_ms), seen_epoch + 1, me.nonce))

    async def renew(self, name: str, nonce: str, epoch: int, ttl_ms: int) -> bool:
        return await self._call("renew", lambda: self.db.table.renew(name, nonce, epoch, ttl_ms))

    async def publish(self, name: str, nonce: str, epoch: int, members: Sequence[str]) -> bool:
        return await self._call("publish", lambda: self.db.table.publish(name, nonce, epoch, members))

    async def resign(self, name: str, nonce: str, epoch: int) -> bool:
        return await self._call("resign", lambda: self.db.table.resign(name, nonce, epoch))


# ---- nodes and the invariant recorder --------------------------------------------------------------------------
class NodeClock:
    """A node's monotonic clock: its own origin (arbitrary, minutes apart between nodes) and a small drift."""

    def __init__(self, loop: VirtualTimeLoop, offset_ms: int, rate: float) -> None:
        self.loop, self.offset, self.rate = loop, offset_ms, rate

    def __call__(self) -> int:
        return self.offset + int(self.loop.vt * 1000 * self.rate)


@dataclass
class SimNode:
    addr: str
    clock: NodeClock
    gate: Gate = field(default_factory=Gate)
    elector: LeaseElector | None = None
    starts: int = 0

    def may_acknowledge(self) -> bool:
        return self.elector is not None and self.elector.may_acknowledge()


class InvariantRecorder:
    def __init__(self, loop: VirtualTimeLoop, nodes: Sequence[SimNode]) -> None:
        self.loop = loop
        self.nodes = nodes
        self.checks = 0
        self.violations: list[str] = []
        self.masters: dict[int, str] = {}  # epoch -> nonce of the node that acknowledged at it
        self.ack_time_ms = 0.0  # virtual ms during which some node could acknowledge
        self._last_epoch_seen = 0

    def check(self) -> None:
        self.checks += 1
        acking = [n for n in self.nodes if n.may_acknowledge()]
        if len(acking) > 1:
            detail = [(n.addr, n.elector.view().epoch if n.elector else None,
                       n.elector.view().lease_remaining_ms if n.elector else None, n.gate.paused) for n in acking]
            self.violations.append(f"t={self.loop.vt * 1000:.1f} ms: {[n.addr for n in acking]} all may acknowledge "
                                   f"(addr, epoch, remaining ms, paused): {detail}")
        for n in acking:
            assert n.elector is not None
            v = n.elector.view()
            nonce = n.elector.me.nonce
            prev = self.masters.setdefault(v.epoch, nonce)
            if prev != nonce:
                self.violations.append(f"epoch {v.epoch} acknowledged by two nodes ({prev}, {nonce})")
            if v.epoch < self._last_epoch_seen:
                self.violations.append(f"t={self.loop.vt * 1000:.1f} ms: epoch went back {self._last_epoch_seen} "
                                       f"-> {v.epoch}")
            self._last_epoch_seen = max(self._last_epoch_seen, v.epoch)

    async def sample(self, period_ms: int = 10) -> None:
        """A backstop and the acknowledging-time figure; the exact checks run around every statement (a node
        can only start acknowledging right after a statement's answer)."""
        while True:
            self.check()
            if any(n.may_acknowledge() for n in self.nodes):
                self.ack_time_ms += period_ms
            await asyncio.sleep(period_ms / 1000)


def check_grants(grants: Sequence[tuple[int, str, float]]) -> list[str]:
    """Epochs granted are 1, 2, 3, ... in order, each to one nonce."""
    bad = []
    for i, (epoch, nonce, t) in enumerate(grants):
        if epoch != i + 1:
            bad.append(f"grant #{i + 1} at t={t * 1000:.1f} ms has epoch {epoch} (to {nonce})")
    return bad


def make_config(ttl_ms: int = 3000, **kw: Any) -> LeaseConfig:
    return LeaseConfig(url="sqlite:///sim/lease.db", name="sim/broker-a", ttl_ms=ttl_ms, **kw)


# ---- seeded chaos runs ---------------------------------------------------------------------------------------
@dataclass
class SimResult:
    seed: int
    violations: list[str]
    grants: int
    checks: int
    ack_time_ms: float
    events: list[str]

    def replay(self) -> str:
        return f"ORBITMQ_LEASE_SIM_SEED={self.seed} pytest -q tests/sim/test_lease_sim.py -k replay"


def simulate(seed: int, *, duration_ms: int = 60_000, ttl_ms: int = 3000,
             elector_cls: type[LeaseElector] = LeaseElector) -> SimResult:
    """One seeded run: 2..4 candidates, a database with latency, outages (refused / black-holed) for everybody
    or for one node (a partition), lost answers;
    nodes paused (virtual SIGSTOP) for up to 2 TTLs, crashed and restarted with a new nonce, resigning; holders
    publishing random sync member sets; node clocks with origins minutes apart and drift within 0.5%. Ends with
    everything healed and checks that a master is elected again."""
    rng = random.Random(seed)

    async def main(loop: VirtualTimeLoop) -> SimResult:
        n = rng.randint(2, 4)
        db = SimDb(loop, random.Random(rng.random()), clock_offset_ms=rng.randint(-10**12, 10**12),
                   latency_ms=(rng.randint(0, 5), rng.randint(5, 60)))
        cfg = make_config(ttl_ms)
        nodes = [SimNode(f"10.0.{seed % 250}.{i}:10911",
                         NodeClock(loop, rng.randint(-600_000, 600_000), 1 + rng.uniform(-0.005, 0.005)))
                 for i in range(n)]
        rec = InvariantRecorder(loop, nodes)
        sampler = asyncio.ensure_future(rec.sample())
        events: list[str] = []
        every: list[LeaseElector] = []

        async def start(i: int) -> None:
            node = nodes[i]
            node.starts += 1
            node.gate = Gate()
            store = SimStore(db, node.gate, cfg.db_timeout_ms, on_op=rec.check)
            me = Candidate(node.addr, node.addr.replace("10911", "10912"), f"{i}-{node.starts}")
            e = elector_cls(store, cfg, me, clock=node.clock, rng=random.Random(rng.random()))
            every.append(e)
            node.elector = e
            try:
                await e.start()
            except LeaseStoreError:
                node.elector = None
                await e.stop(resign=False)

        def log(what: str) -> None:
            events.append(f"t={loop.vt * 1000:.0f} {what}")

        await asyncio.gather(*(start(i) for i in range(n)))
        end = loop.time() + duration_ms / 1000
        while loop.time() < end:
            await asyncio.sleep(rng.randint(100, 2 * ttl_ms) / 1000)
            i = rng.randrange(n)
            node = nodes[i]
            e = node.elector
            roll = rng.random()
            if roll < 0.15:
                db.mode = rng.choice(["refuse", "blackhole"])
                log(f"db {db.mode}")
                await asyncio.sleep(rng.randint(100, 3 * ttl_ms) / 1000)
                db.mode = "up"
                log("db up")
            elif roll < 0.22 and e is not None:
                store = e.store
                assert isinstance(store, SimStore)
                store.cut = rng.choice(["refuse", "blackhole"])
                log(f"partition {node.addr} from the db ({store.cut})")
                await asyncio.sleep(rng.randint(100, 3 * ttl_ms) / 1000)
                store.cut = ""
                log(f"heal {node.addr}")
            elif roll < 0.32 and e is not None:
                log(f"pause {node.addr}")
                node.gate.pause()
                await asyncio.sleep(rng.randint(100, 2 * ttl_ms) / 1000)
                node.gate.resume()
                log(f"resume {node.addr}")
            elif roll < 0.42 and e is not None:
                log(f"crash {node.addr}")
                node.gate.pause()  # it never runs again
                node.elector = None
                await asyncio.sleep(rng.randint(0, 2 * ttl_ms) / 1000)
                await start(i)
                log(f"restart {node.addr}")
            elif roll < 0.50 and e is not None:
                log(f"stop+resign {node.addr}")
                await e.stop(resign=True)
                node.elector = None
                await start(i)
            elif roll < 0.55:
                db.lose_answers += 1
                log("lose an answer")
            elif e is not None and e.view().is_master:
                others = [x.addr for x in nodes if x is not node and rng.random() < 0.7]
                ok = await e.publish_sync_members(others)
                log(f"publish {others} by {node.addr}: {ok}")
            elif e is None:
                await start(i)
        # heal everything; a master must be elected again
        db.mode, db.lose_answers = "up", 0
        for i, node in enumerate(nodes):
            node.gate.resume()
            if node.elector is None:
                await start(i)
        ok = await run_until(loop, lambda: sum(x.may_acknowledge() for x in nodes) == 1, 6 * ttl_ms)
        violations = list(rec.violations) + check_grants(db.grants)
        if not ok:
            violations.append(f"no master {6 * ttl_ms} ms after everything healed")
        sampler.cancel()
        for e in every:
            await e.stop(resign=False)
        return SimResult(seed, violations, len(db.grants), rec.checks, rec.ack_time_ms, events)

    lease_log = logging.getLogger("orbitmq.lease")
    level = lease_log.level
    lease_log.setLevel(logging.ERROR)  # thousands of expected warnings otherwise
    try:
        return run_virtual(main)
    finally:
        lease_log.setLevel(level)
