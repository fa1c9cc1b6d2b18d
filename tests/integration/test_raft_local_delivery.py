"""Local delivery in a Raft broker group (issue 14; docs/design/local-delivery.md): a name server and three brokers
with enableDLegerCommitLog and localDeliveryGroups, real processes (orbitmq/testing/raft_group.py); our SDK's
SimpleConsumer attached to one member each (broker_addr), acking through that member.

- nothing fails: every message is delivered and acknowledged exactly once, every member serves its consumer, each
  consumer's order is monotonic;
- the leader is kill -9'd mid-run: nothing acknowledged to the producer is lost, redeliveries stay within what
  consumers held, each consumer's first deliveries arrive in queue order over the whole run (order checker);
- the leader's TCP bytes sent per delivered message (kernel socket counters of its process, `ss -tinp`) with the
  consumers on the followers against the consumers on the leader, in one run: the difference is the payload.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orbitmq.testing.controller_cluster import wait_until
from orbitmq.testing.failover_load import SendLoad
from orbitmq.testing.local_delivery_load import (
    PREFETCH,
    Consumers,
    create_topic,
    measure,
    order_problems,
    send_bodies,
    until_delivered,
    until_drained,
)
from orbitmq.testing.raft_group import RaftGroup

pytestmark = [pytest.mark.integration]

TOPIC = "LdTopic"
GROUP = "CG_local"


def run(g: RaftGroup, coro: Any, timeout_s: float) -> Any:
    try:
        return asyncio.run(asyncio.wait_for(coro, timeout_s))
    except BaseException:
        print(g.logs(60))
        raise


def _terms(g: RaftGroup) -> set[str]:
    return {g.runtime(i).get("dLegerTerm", "") for i in range(g.size)}


def test_consumers_on_every_member_exactly_once(tmp_path: Path) -> None:
    with RaftGroup(tmp_path / "group", localDeliveryGroups=GROUP) as g:
        g.start()
        leader = g.leader()
        terms = _terms(g)

        async def main() -> tuple[Consumers, list[str]]:
            await create_topic(g, leader, TOPIC)
            c = await Consumers(g, GROUP, TOPIC, list(range(g.size))).start()
            try:
                sent = await send_bodies(g.ns_addr, TOPIC, 300, 100, "once")
                await until_delivered(c, set(sent), 60)
                await asyncio.sleep(0.5)  # nothing more arrives
            finally:
                await c.stop()
            return c, sent

        c, sent = run(g, main(), 120)
        stored = [(d.queue_id, d.queue_offset) for d in c.deliveries]
        assert set(sent) <= c.bodies()
        assert not order_problems(c.deliveries)
        per = {f"n{i}": sum(1 for d in c.deliveries if d.consumer == f"n{i}") for i in range(g.size)}
        print(f"deliveries per member {per}")
        assert all(per.values()), per  # every member served its own consumer
        if _terms(g) != terms:  # an election on a starved machine: "nothing fails" does not hold, no exactly-once
            print(f"a leader change happened (terms {terms} -> {_terms(g)}): exactly-once not checked")
            return
        assert len(stored) == len(set(stored)) == 300, (len(stored), len(set(stored)))  # delivered exactly once
        assert len(c.acked) == len(stored) and not c.ack_refused  # acknowledged exactly once


@pytest.mark.parametrize("victim", ["leader", pytest.param("follower", marks=pytest.mark.slow)])
def test_kill9_no_loss_bounded_redeliveries_order(tmp_path: Path, victim: str) -> None:
    """kill -9 of the leader (or, slow variant, of a follower with its consumer) mid-run."""
    with RaftGroup(tmp_path / "group", localDeliveryGroups=GROUP) as g:
        g.start()
        leader = g.leader()
        killed = leader if victim == "leader" else (leader + 1) % g.size

        async def main() -> tuple[Consumers, SendLoad, int]:
            await create_topic(g, leader, TOPIC)
            c = await Consumers(g, GROUP, TOPIC, list(range(g.size))).start()
            load = await SendLoad(g.ns_addr, TOPIC, senders=2, run="ld").start()
            try:
                while len(load.acked) < 150:
                    await asyncio.sleep(0.05)
                t_kill = await asyncio.to_thread(g.kill9, killed)
                new = await asyncio.to_thread(g.leader, 15.0, killed)
                while sum(1 for a in load.acked.values() if a.t_sent >= t_kill) < 100:
                    await asyncio.sleep(0.05)
            finally:
                await load.stop()
            try:
                await until_delivered(c, set(load.acked), 60)
                # and every other stored message too: those whose ack was refused come back after their invisible
                # time and go again (stopping before would leave them waiting, as the check below would see)
                await until_drained(g, new, 60)
                await asyncio.sleep(0.5)
            finally:
                await c.stop()
            return c, load, new

        c, load, new = run(g, main(), 180)
        bodies = [d.body for d in c.deliveries]
        redelivered = len(bodies) - len(set(bodies))
        print(f"{victim} n{killed} killed, n{new} leads; {len(load.acked)} sends acknowledged, {len(bodies)} "
              f"deliveries, {redelivered} redeliveries, {len(c.ack_refused)} acks refused, {c.errors} pop errors")
        assert set(load.acked) <= set(bodies)  # nothing acknowledged to the producer is lost
        # redeliveries: only what consumers held (prefetch each) when the leader died, and acks refused meanwhile
        assert redelivered <= g.size * PREFETCH + len(c.ack_refused), redelivered
        problems = order_problems(c.deliveries)
        assert not problems, problems[:10]
        survivors = {f"n{i}" for i in range(g.size) if i != killed}
        assert {d.consumer for d in c.deliveries if d.body in load.acked} & survivors
        # the killed member restarts (its machines from the snapshot part and the log): every member ends with the
        # same consumption state, with no consumer (all closed or declared down), checkout or waiting message left
        g.restart(killed)
        g.wait_same_log(60.0)

        def settled() -> set[str] | None:
            infos = [g.runtime(i) for i in range(g.size)]
            keys = ("localDeliveryConsumers", "localDeliveryCheckouts", "localDeliveryWaiting")
            if all(all(info.get(k) == "0" for k in keys) for info in infos):
                digests = {info["localDeliveryDigest"] for info in infos}
                return digests if len(digests) == 1 else None
            return None
        try:
            wait_until("equal, empty consumption state on every member", settled, 30.0, 0.2)
        except AssertionError:
            print(g.logs(30))
            raise AssertionError([{k: v for k, v in g.runtime(i).items() if k.startswith(("localDelivery", "dLeger"))}
                                  for i in range(g.size)]) from None


def test_leader_bytes_per_delivery_local_vs_leader_only(tmp_path: Path) -> None:
    """Same group shape, same messages: consumers on both followers (local delivery: the followers send), then
    consumers on the leader (it sends every delivery). The leader's TCP bytes sent per message differ by at least
    the payload (margin: 80% of the body size)."""
    n, size = 150, 4000
    with RaftGroup(tmp_path / "group", localDeliveryGroups="CG_on,CG_off") as g:
        g.start()
        leader = g.leader()
        followers = [i for i in range(g.size) if i != leader]

        async def main() -> tuple[dict[str, Any], dict[str, Any]]:
            on = await measure(g, leader, "CG_on", "LdBytesOn", followers, n, size)
            off = await measure(g, leader, "CG_off", "LdBytesOff", [leader], n, size)
            return on, off

        on, off = run(g, main(), 150)
        assert on["deliveries"] == off["deliveries"] == n
        lead = f"n{leader}"
        per_on, per_off = on["bytes"][lead] / n, off["bytes"][lead] / n
        print(f"leader bytes sent per delivered {size}-byte message: local delivery {per_on:.0f}, leader-only "
              f"{per_off:.0f}, difference {per_off - per_on:.0f}; per member on {on['bytes']}, off {off['bytes']}; "
              f"cpu s on {on['cpu_s']}, off {off['cpu_s']}")
        assert per_off - per_on >= 0.8 * size, (per_on, per_off)
        for f in followers:  # the followers sent the payload instead
            assert (on["bytes"][f"n{f}"] - off["bytes"][f"n{f}"]) / n >= 0.8 * size / len(followers), (on, off)
