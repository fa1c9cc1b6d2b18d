"""DeliveryMachine: the service queue's assignments, the three ordering guarantees, returns, expiry on the log's
time, consumer/node down, refusals, the executor rule, and snapshot == replay."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from orbitmq.base.errors import InvariantError
from orbitmq.delivery import commands as dc
from orbitmq.delivery.effects import DeadLettered, Deliver, Effect, Refused, Returned, Settled, executes_here
from orbitmq.delivery.machine import DeliveryMachine


def run(m: DeliveryMachine, *cmds: dc.Command) -> list[Effect]:
    out: list[Effect] = []
    for c in cmds:
        out += m.apply(c)
        m.check_invariants()
    return out


def delivers(effects: list[Effect]) -> list[tuple[str, int, int]]:
    return [(e.consumer, e.offset, e.count) for e in effects if isinstance(e, Deliver)]


def enq(ts: int, *offsets: int) -> list[dc.Command]:
    return [dc.Enqueue(ts, 0, o, 10) for o in offsets]


def test_single_consumer_gets_fifo() -> None:
    m = DeliveryMachine()
    eff = run(m, *enq(1, 0, 1, 2), dc.Attach(2, "c1", "n1", 2, 1000), *enq(3, 3, 4))
    assert delivers(eff) == [("c1", 0, 0), ("c1", 1, 0)]          # prefetch 2: the rest waits
    dids = [e.did for e in eff if isinstance(e, Deliver)]
    eff = run(m, dc.Settle(4, "c1", (dids[0],)), dc.Settle(5, "c1", (dids[1],)))
    assert [type(e) for e in eff] == [Settled, Deliver, Settled, Deliver]
    assert delivers(eff) == [("c1", 2, 0), ("c1", 3, 0)]
    assert m.waiting() == [(0, 4)]


def test_competing_consumers_round_robin_and_monotonic() -> None:
    m = DeliveryMachine()
    eff = run(m, dc.Attach(1, "a", "n1", 10, 1000), dc.Attach(1, "b", "n2", 10, 1000), *enq(2, *range(6)))
    assert delivers(eff) == [("a", 0, 0), ("b", 1, 0), ("a", 2, 0), ("b", 3, 0), ("a", 4, 0), ("b", 5, 0)]


def test_returns_go_first_lowest_first_and_dead_letter() -> None:
    m = DeliveryMachine(max_deliveries=2)
    eff = run(m, *enq(1, 0, 1, 2), dc.Attach(2, "a", "n1", 2, 1000))
    d0, d1 = [e.did for e in eff if isinstance(e, Deliver)]
    eff = run(m, dc.Return(3, "a", (d1, d0)))
    # offset 1 returned first, but the returns queue serves the lowest enqueue order first
    assert [(type(e).__name__, e.offset) for e in eff if not isinstance(e, Refused)] == [
        ("Returned", 1), ("Returned", 0), ("Deliver", 0), ("Deliver", 1)]
    assert delivers(eff) == [("a", 0, 1), ("a", 1, 1)]
    redo = [e.did for e in eff if isinstance(e, Deliver)]
    eff = run(m, dc.Return(4, "a", tuple(redo)))
    assert [e for e in eff if isinstance(e, DeadLettered)] == [DeadLettered(0, 0, 2), DeadLettered(0, 1, 2)]
    assert delivers(eff) == [("a", 2, 0)]


def test_single_active_consumer_prefetch_one_is_fifo_with_redeliveries() -> None:
    m = DeliveryMachine()
    eff = run(m, dc.Attach(1, "a", "n1", 1, 1000, "single_active"), dc.Attach(1, "b", "n2", 1, 1000, "single_active"),
              *enq(2, 0, 1, 2))
    assert delivers(eff) == [("a", 0, 0)]                         # b waits, inactive
    d0 = next(e.did for e in eff if isinstance(e, Deliver))
    eff = run(m, dc.Return(3, "a", (d0,)))
    assert delivers(eff) == [("a", 0, 1)]                         # the nacked message again, before offset 1
    d0 = next(e.did for e in eff if isinstance(e, Deliver))
    eff = run(m, dc.ConsumerDown(4, "a"))
    assert delivers(eff) == [("b", 0, 2)]                         # b takes over, starting with the returned one
    d0 = next(e.did for e in eff if isinstance(e, Deliver))
    eff = run(m, dc.Settle(5, "b", (d0,)))
    assert delivers(eff) == [("b", 1, 0)]


def test_mode_and_node_mismatches_are_refused() -> None:
    m = DeliveryMachine()
    eff = run(m, dc.Attach(1, "a", "n1", 1, 1000), dc.Attach(1, "b", "n1", 1, 1000, "single_active"),
              dc.Attach(1, "a", "n2", 5, 1000))
    assert [str(e.why) for e in eff if isinstance(e, Refused)] == [
        "queue is in competing mode, consumer b asked for single_active", "consumer a is attached on n1, not n2"]
    assert list(m.consumers) == ["a"]
    run(m, dc.ConsumerDown(2, "a"))
    run(m, dc.Attach(3, "b", "n1", 1, 1000, "single_active"))  # no consumer left: the mode may change
    assert m.mode == "single_active"


def test_stale_and_foreign_handles_are_refused() -> None:
    m = DeliveryMachine()
    eff = run(m, dc.Attach(1, "a", "n1", 1, 1000), dc.Attach(1, "b", "n2", 1, 1000), *enq(2, 0, 1, 1))
    assert isinstance(eff[-1], Refused) and "already enqueued" in eff[-1].why
    da = next(e.did for e in eff if isinstance(e, Deliver) and e.consumer == "a")
    eff = run(m, dc.Settle(3, "b", (da,)), dc.Settle(3, "a", (99,)), dc.ChangeInvisible(3, "b", da, 5),
              dc.ConsumerDown(3, "zz"))
    assert all(isinstance(e, Refused) for e in eff) and len(eff) == 4
    run(m, dc.Settle(4, "a", (da,)))
    assert isinstance(run(m, dc.Settle(5, "a", (da,)))[0], Refused)      # acked twice


def test_expiry_uses_the_log_time_only() -> None:
    m = DeliveryMachine()
    eff = run(m, dc.Attach(1000, "a", "n1", 2, 500), *enq(1000, 0, 1))
    d0, d1 = [e.did for e in eff if isinstance(e, Deliver)]
    assert run(m, dc.ChangeInvisible(1100, "a", d1, 2000)) == []          # d1 due at 3100, d0 at 1500
    assert run(m, dc.Expire(1499)) == []
    eff = run(m, dc.Expire(1200))                      # a new leader with a slower clock: time does not go back
    assert eff == [] and m.now == 1499
    eff = run(m, dc.Expire(1500))
    assert eff[0] == Returned(d0, "a", 0, 0, "expired") and delivers(eff) == [("a", 0, 1)]
    assert [e.deadline for e in eff if isinstance(e, Deliver)] == [2000]


def test_consumer_and_node_down_return_unacked() -> None:
    m = DeliveryMachine()
    eff = run(m, dc.Attach(1, "a", "n1", 2, 1000), dc.Attach(1, "b", "n1", 2, 1000), dc.Attach(1, "c", "n2", 1, 1000),
              *enq(2, *range(5)))
    assert delivers(eff) == [("a", 0, 0), ("b", 1, 0), ("c", 2, 0), ("a", 3, 0), ("b", 4, 0)]
    eff = run(m, dc.NodeDown(3, "n1"))
    assert sorted((e.consumer, e.offset) for e in eff if isinstance(e, Returned)) == [
        ("a", 0), ("a", 3), ("b", 1), ("b", 4)]
    assert list(m.consumers) == ["c"] and m.waiting() == [(0, 0), (0, 1), (0, 3), (0, 4)]
    eff = run(m, dc.Attach(4, "d", "n3", 9, 1000))
    assert delivers(eff) == [("d", 0, 1), ("d", 1, 1), ("d", 3, 1), ("d", 4, 1)]
    assert [(e.consumer, e.node, e.offset) for e in m.outstanding(["n2"])] == [("c", "n2", 2)]


def test_executor_rule() -> None:
    reps = ("n0", "n1", "n2")
    # consumer on a follower's node: that follower only
    assert [executes_here("n1", me, me == "n0", reps) for me in reps] == [False, True, False]
    # consumer on the leader's node: the leader
    assert [executes_here("n0", me, me == "n0", reps) for me in reps] == [True, False, False]
    # consumer on a node without a replica: the leader
    assert [executes_here("x9", me, me == "n0", reps) for me in reps] == [True, False, False]
    # a member that is not a voter never executes
    assert not executes_here("n9", "n9", False, reps)


def _random_commands(rng: random.Random, n: int) -> list[dc.Command]:
    out: list[dc.Command] = []
    off = 0
    for i in range(n):
        r = rng.random()
        c = f"c{rng.randrange(4)}"
        if r < 0.4:
            off += 1
            out.append(dc.Enqueue(i, rng.randrange(2), off, rng.randint(1, 99)))
        elif r < 0.5:
            out.append(dc.Attach(i, c, f"n{int(c[1]) % 3}", rng.randint(1, 3), rng.randint(1, 40),
                                 rng.choice(dc.MODES)))
        elif r < 0.7:
            out.append(dc.Settle(i, c, (rng.randint(1, 60),)))
        elif r < 0.8:
            out.append(dc.Return(i, c, (rng.randint(1, 60),)))
        elif r < 0.85:
            out.append(dc.ChangeInvisible(i, c, rng.randint(1, 60), rng.randint(1, 50)))
        elif r < 0.93:
            out.append(dc.Expire(i))
        elif r < 0.98:
            out.append(dc.ConsumerDown(i, c))
        else:
            out.append(dc.NodeDown(i, f"n{rng.randrange(3)}"))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_snapshot_restore_equals_replay(seed: int) -> None:
    rng = random.Random(seed)
    cmds = _random_commands(rng, 300)
    cut = rng.randrange(len(cmds))
    full = DeliveryMachine(max_deliveries=3)
    for c in cmds[:cut]:
        full.apply(c)
        full.check_invariants()
    restored = DeliveryMachine.restore(full.snapshot())
    assert restored.digest() == full.digest()
    for c in cmds[cut:]:                        # same future effects, command by command
        assert restored.apply(c) == full.apply(c)
    assert restored.digest() == full.digest()


def test_restore_refuses_unknown_version() -> None:
    with pytest.raises(InvariantError, match="version"):
        DeliveryMachine.restore(b'{"v":99}')


def test_package_is_pure() -> None:
    """orbitmq.delivery imports only orbitmq.base/model and itself, and no I/O, clock or randomness."""
    root = Path(__file__).resolve().parents[3] / "orbitmq" / "delivery"
    banned = {"asyncio", "socket", "threading", "selectors", "time", "random", "os"}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                parts = name.split(".")
                assert parts[0] not in banned, f"{path.name} imports {name}"
                if parts[0] == "orbitmq":
                    assert parts[1] in ("base", "model", "delivery"), f"{path.name} imports {name}"
