"""LeaseElector's state machine on the in-memory lease table, in virtual time (deterministic, no real sleeps)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from orbitmq.lease import Candidate, LeaseElector, LeaseState, LeaseView
from orbitmq.testing.lease_sim import (
    Gate,
    InvariantRecorder,
    NodeClock,
    SimDb,
    SimNode,
    SimStore,
    VirtualTimeLoop,
    make_config,
    run_until,
    run_virtual,
)

TTL = 3000


class Group:
    """Candidates a0, a1, ... on one SimDb; an invariant sampler runs for the whole test."""

    def __init__(self, loop: VirtualTimeLoop, n: int, *, seed: int = 1, **cfg: Any) -> None:
        self.loop = loop
        self.rng = random.Random(seed)
        self.db = SimDb(loop, random.Random(seed + 1), clock_offset_ms=1_700_000_000_000, latency_ms=(1, 5))
        self.cfg = make_config(TTL, **cfg)
        self.nodes = [SimNode(f"10.0.0.{i}:10911", NodeClock(loop, self.rng.randint(-10**9, 10**9), 1.0))
                      for i in range(n)]
        self.rec = InvariantRecorder(loop, self.nodes)
        self.sampler = asyncio.ensure_future(self.rec.sample())
        self.all: list[LeaseElector] = []

    def elector(self, i: int) -> LeaseElector:
        e = self.nodes[i].elector
        assert e is not None
        return e

    async def start(self, i: int) -> LeaseElector:
        n = self.nodes[i]
        n.starts += 1
        n.gate = Gate()
        store = SimStore(self.db, n.gate, self.cfg.db_timeout_ms, on_op=self.rec.check)
        me = Candidate(n.addr, n.addr.replace("10911", "10912"), f"{i}-{n.starts}")
        n.elector = LeaseElector(store, self.cfg, me, clock=n.clock, rng=random.Random(self.rng.random()))
        self.all.append(n.elector)
        await n.elector.start()
        return n.elector

    async def master_and_followers(self, in_sync: tuple[int, ...] | None = (1,)) -> LeaseElector:
        """Node 0 becomes master, the others start as followers; node 0 then publishes `in_sync` (None: nothing)."""
        await self.start(0)
        await self.wait_master()
        for i in range(1, len(self.nodes)):
            await self.start(i)
        e0 = self.elector(0)
        if in_sync is not None:
            assert await e0.publish_sync_members([self.nodes[i].addr for i in in_sync])
        return e0

    def masters(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.may_acknowledge()]

    async def wait_master(self, max_ms: int = 3 * TTL, not_in: tuple[int, ...] = ()) -> int:
        assert await run_until(self.loop, lambda: len([m for m in self.masters() if m not in not_in]) == 1, max_ms)
        return [m for m in self.masters() if m not in not_in][0]

    async def close(self) -> None:
        self.sampler.cancel()
        for n in self.nodes:
            n.gate.resume()
        for e in self.all:
            await e.stop(resign=False)
        assert self.rec.violations == []


def test_single_candidate_registers_and_becomes_master() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 1)
        e = await g.start(0)
        assert await g.wait_master() == 0
        v = e.view()
        assert (v.is_master, v.epoch, v.master_addr, v.state) == (True, 1, "10.0.0.0:10911", LeaseState.HEARTBEAT)
        assert v.sync_members == ("10.0.0.0:10911",) and 0 < (v.lease_remaining_ms or 0) <= TTL
        assert list(e.transitions)[:3] == [(LeaseState.START, LeaseState.CHALLENGE_REGISTER),
                                           (LeaseState.CHALLENGE_REGISTER, LeaseState.CHALLENGE_COMPLETE),
                                           (LeaseState.CHALLENGE_COMPLETE, LeaseState.HEARTBEAT)]
        await asyncio.sleep(5 * TTL / 1000)  # renewals keep it
        assert e.may_acknowledge() and e.view().epoch == 1 and g.db.table.rows["sim/broker-a"].status == "active"
        await g.close()
    run_virtual(main)


def test_three_candidates_at_once_exactly_one_wins() -> None:
    for seed in range(5):
        async def main(loop: VirtualTimeLoop, seed: int = seed) -> None:
            g = Group(loop, 3, seed=seed)
            await asyncio.gather(*(g.start(i) for i in range(3)))
            m = await g.wait_master()
            await asyncio.sleep(2 * TTL / 1000)
            assert g.masters() == [m]
            others = [g.elector(i).view() for i in range(3) if i != m]
            assert all(v.master_addr == g.nodes[m].addr and v.epoch == 1 and not v.is_master for v in others)
            assert [e for e, _, _ in g.db.grants] == [1]
            await g.close()
        run_virtual(main)


def test_crashed_holder_replaced_within_ttl_plus_renew_with_new_epoch() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 2)
        await g.master_and_followers()
        await asyncio.sleep(0.5)
        crash_at = loop.time()
        g.nodes[0].gate.pause()  # never runs again (a crash as far as the others can tell)
        g.nodes[0].elector = None
        assert await g.wait_master(not_in=(0,)) == 1
        took = (loop.time() - crash_at) * 1000
        assert took <= TTL + g.cfg.renew_interval_ms + 100, took
        v = g.elector(1).view()
        assert v.epoch == 2 and v.sync_members == (g.nodes[1].addr,)
        await g.close()
    run_virtual(main)


def test_resign_hands_over_at_once() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 2)
        await g.master_and_followers()
        t = loop.time()
        await g.elector(0).stop(resign=True)
        assert await g.wait_master(not_in=(0,)) == 1
        assert (loop.time() - t) * 1000 <= g.cfg.renew_interval_ms + 50
        await g.close()
    run_virtual(main)


def test_database_outage_holder_stops_acking_before_deadline_and_election_resumes() -> None:
    for mode in ("refuse", "blackhole"):
        async def main(loop: VirtualTimeLoop, mode: str = mode) -> None:
            g = Group(loop, 2)
            e0 = await g.master_and_followers()
            await asyncio.sleep(0.3)
            last_deadline = e0._deadline  # the local deadline set by the last successful renewal
            assert last_deadline is not None
            g.db.mode = mode
            assert await run_until(loop, lambda: not e0.may_acknowledge(), TTL)
            assert g.nodes[0].clock() <= last_deadline + g.cfg.renew_interval_ms  # (renewed once more at most)
            assert await run_until(loop, lambda: e0.state is LeaseState.OFFLINE, 3 * TTL)
            assert not e0.view().is_master and not e0.view().db_ok
            await asyncio.sleep(2 * TTL / 1000)
            assert g.masters() == [] and g.elector(1).state is LeaseState.OFFLINE  # nobody challenges blind
            g.db.mode = "up"
            m = await g.wait_master(4 * TTL)
            assert g.elector(m).view().epoch == 2  # a new term, whoever won
            await g.close()
        run_virtual(main)


def test_not_in_sync_members_never_takes_over() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 3)
        await g.master_and_followers(in_sync=(2,))  # node 1 is behind
        g.nodes[0].gate.pause()
        g.nodes[0].elector = None
        assert await g.wait_master(not_in=(0,)) == 2
        assert await run_until(loop, lambda: g.elector(1).view().master_addr == g.nodes[2].addr, TTL)
        await g.close()
    run_virtual(main)


def test_holder_alone_blocks_failover_until_it_returns() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 2)
        await g.master_and_followers(in_sync=())  # acknowledging alone: only node 0 has everything
        g.nodes[0].gate.pause()
        dead = g.nodes[0].elector
        assert dead is not None
        g.nodes[0].elector = None
        await asyncio.sleep(4 * TTL / 1000)
        assert g.masters() == [] and g.elector(1).view().master_addr == g.nodes[0].addr
        assert g.elector(1).state is LeaseState.HEARTBEAT
        await dead.stop(resign=False)  # the old process is gone; the same broker restarts with a new nonce
        await g.start(0)
        assert await g.wait_master() == 0 and g.elector(0).view().epoch == 2
        # an operator who accepts the loss clears the list; then anyone may take over
        g.db.table.rows["sim/broker-a"].sync_members = ""
        g.nodes[0].gate.pause()
        g.nodes[0].elector = None
        assert await g.wait_master(not_in=(0,)) == 1
        await g.close()
    run_virtual(main)


def test_holder_that_finds_another_holder_steps_down_at_once_and_tells_subscribers() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 1)
        e = await g.start(0)
        seen: list[LeaseView] = []

        async def cb(v: LeaseView) -> None:
            seen.append(v)
            await asyncio.sleep(10)  # a slow subscriber delays no renewal
        e.subscribe(cb)
        await g.wait_master()
        await asyncio.sleep(3 * TTL / 1000)
        assert e.may_acknowledge()
        row = g.db.table.rows["sim/broker-a"]
        row.holder_nonce, row.holder_addr, row.epoch = "intruder", "10.9.9.9:10911", row.epoch + 1
        assert await run_until(loop, lambda: not e.view().is_master, g.cfg.renew_interval_ms + 20)
        assert not e.may_acknowledge()
        await asyncio.sleep(12)
        assert seen[0].is_master and seen[0].epoch == 1
        assert (seen[1].is_master, seen[1].epoch, seen[1].master_addr) == (False, 2, "10.9.9.9:10911")
        # the intruder never renews: its lease runs out and node 0 (in sync_members) takes a new term
        assert (seen[2].is_master, seen[2].epoch) == (True, 3)
        await g.close()
    run_virtual(main)


def test_paused_holder_wakes_without_acknowledging_and_steps_down() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 2)
        e0 = await g.master_and_followers()
        g.nodes[0].gate.pause()  # SIGSTOP
        assert await g.wait_master(not_in=(0,)) == 1
        assert not e0.may_acknowledge()  # its deadline passed while it was stopped
        g.nodes[0].gate.resume()  # SIGCONT
        assert await run_until(loop, lambda: not e0.view().is_master, TTL)
        assert e0.view().master_addr == g.nodes[1].addr and g.masters() == [1]
        await g.close()
    run_virtual(main)


def test_lost_take_over_answer_is_recognised_from_the_row() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 1)
        g.db.table.insert("sim/broker-a", Candidate("10.9.9.9:10911", "10.9.9.9:10912", "old"), 0)
        g.db.table.rows["sim/broker-a"].sync_members = ""
        e = await g.start(0)
        g.db.lose_answers = 1  # the take-over runs, its answer never arrives
        await g.wait_master()
        assert e.view().epoch == 2 and [ep for ep, _, _ in g.db.grants] == [2]
        await g.close()
    run_virtual(main)


def test_publish_refused_when_not_master_or_db_down() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 2)
        await g.master_and_followers(in_sync=None)
        assert not await g.elector(1).publish_sync_members([])
        g.db.mode = "refuse"
        assert not await g.elector(0).publish_sync_members([g.nodes[1].addr])
        g.db.mode = "up"
        assert await g.elector(0).publish_sync_members([g.nodes[1].addr])
        assert g.elector(0).view().sync_members == (g.nodes[0].addr, g.nodes[1].addr)
        await g.close()
    run_virtual(main)


def test_failed_challenges_back_off_randomly() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        g = Group(loop, 1, backoff_min_ms=100, backoff_max_ms=2000)
        e = await g.start(0)
        delays = [e._challenge_failed("test") for _ in range(8)]
        assert all(100 <= d <= 2000 for d in delays) and len(set(delays)) > 4
        assert max(delays[5:]) > 400  # the range grows with consecutive failures
        await g.close()
    run_virtual(main)
