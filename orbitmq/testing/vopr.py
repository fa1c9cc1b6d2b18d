"""VOPR for the Raft core: named scenarios and random chaos on testing/raft_sim.py, a seed sweep, and the CLI.

  python -m orbitmq.testing.vopr --seed N [--scenario NAME]   replay one run, one status line per event
  python -m orbitmq.testing.vopr --seeds 1000 [--first S]     sweep seeds, print the failing ones
Every failure message carries the exact one-line replay command. No I/O beyond printing.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Iterable

from orbitmq.raft.messages import MsgType, Role
from orbitmq.testing.raft_sim import RaftSim, SimFailure, SimOptions
from orbitmq.testing.sim_net import CALM, LinkSpec

STORM = LinkSpec(delay_min_ms=1, delay_max_ms=25, loss=0.05, dup=0.3, reorder=0.4, reorder_ms=60)
LOSSY = LinkSpec(delay_min_ms=1, delay_max_ms=15, loss=0.15, dup=0.05, reorder=0.1)


def _fault(sim: RaftSim, rng: random.Random) -> None:
    """One random fault: crash/restart, partitions (symmetric or one-way), heal, link chaos, transfer."""
    ids = list(sim.nodes)
    alive = [n.id for n in sim.alive()]
    down = [i for i in ids if i not in alive]
    roll = rng.random()
    if roll < 0.2 and alive:
        sim.crash(rng.choice(alive))
    elif roll < 0.4 and down:
        sim.restart(rng.choice(down))
    elif roll < 0.55:
        rng.shuffle(ids)
        cut = rng.randint(1, len(ids) - 1)
        sim.net.partition(ids[:cut], ids[cut:])
    elif roll < 0.65:
        a = rng.sample(ids, rng.randint(1, 2))
        sim.net.partition_one_way(a, [i for i in ids if i not in a])
    elif roll < 0.8:
        sim.net.heal()
    elif roll < 0.9:
        sim.net.set_all(rng.choice((STORM, LOSSY, CALM)))
    else:
        ld = sim.leader()
        if ld is not None and ld.raft is not None:
            ld.raft.transfer_leadership(rng.choice([i for i in ids if i != ld.id]))
            sim._pump(ld)


def chaos(sim: RaftSim, duration_ms: int, *, every_ms: int = 250) -> None:
    """Random faults every ~every_ms for duration_ms (client load keeps running)."""
    rng = sim.fork(f"faults/{sim.now}")
    t = rng.randint(1, every_ms)
    while t < duration_ms:
        sim.at(t, lambda: _fault(sim, rng))
        t += rng.randint(1, 2 * every_ms)
    sim.run_for(duration_ms)


def _random(sim: RaftSim) -> None:
    sim.check_liveness("boot")
    for cycle in range(2):
        chaos(sim, 1500)
        sim.calm()
        sim.check_liveness(f"c{cycle}")
    sim.run_for(200)


def _leader_partition(sim: RaftSim) -> None:
    sim.check_liveness("boot")
    old = sim.leader()
    assert old is not None and old.raft is not None
    old_term = old.raft.term
    others = [i for i in sim.nodes if i != old.id]
    sim.net.partition([old.id], others)
    ok = sim.run_until(lambda: any(n.raft is not None and n.raft.role == Role.LEADER and n.raft.term > old_term
                                   for n in sim.nodes.values() if n.id != old.id), 3000)
    if not ok:
        raise sim.fail("liveness: the majority side elected no new leader while the old one was cut off")
    sim.run_for(1000)
    if old.raft is not None and old.raft.role == Role.LEADER:
        raise sim.fail("check-quorum: the partitioned leader still believes it leads")
    sim.calm()
    sim.check_liveness("healed")


def _majority_crash(sim: RaftSim) -> None:
    sim.check_liveness("boot")
    ld = sim.leader()
    assert ld is not None
    victims = [ld.id] + [i for i in sim.nodes if i != ld.id][: len(sim.nodes) // 2]
    for v in victims:
        sim.crash(v)
    sim.run_for(800)
    for v in victims:
        sim.restart(v)
    sim.check_liveness("restarted")
    chaos(sim, 1000)
    sim.calm()
    sim.check_liveness("end")


def _storm(sim: RaftSim) -> None:
    sim.check_liveness("boot")
    before = sim.stats["acked"]
    sim.net.set_all(STORM)
    sim.run_for(3000)
    if sim.stats["acked"] == before:
        raise sim.fail("liveness: nothing was acknowledged during the duplication/reordering storm")
    sim.calm()
    sim.check_liveness("end")


def _snapshot_catchup(sim: RaftSim) -> None:
    sim.check_liveness("boot")
    ld = sim.leader()
    assert ld is not None
    lag = next(i for i in sim.nodes if i != ld.id)
    sim.crash(lag)
    sim.run_for(2000)
    sim.restart(lag)
    sim.check_liveness("caught-up")
    if sim.nodes[lag].snapshots_installed == 0:
        raise sim.fail(f"{lag} caught up without a snapshot (compaction did not outrun it)")


def _random_options(seed: int) -> SimOptions:
    """Each random run draws its cluster size, disk speed, compaction rate and batching limits from the seed."""
    r = random.Random(f"{seed}/options")
    return SimOptions(nodes=r.choice((3, 3, 5)), fsync_max_ms=r.choice((0, 3, 3, 15)),
                      compact_every=r.choice((5, 30, 30, 10_000)), max_append_entries=r.choice((1, 8, 64)),
                      max_inflight_appends=r.choice((1, 4, 64)), election_ticks=r.choice((10, 10, 20)),
                      pre_vote=r.random() < 0.8, check_quorum=r.random() < 0.8)


def _figure8(sim: RaftSim) -> None:
    """Raft paper Figure 8: an old-term entry on a quorum must not be committed by counting. Leader A's entry
    reaches only B; the others elect X, whose entries at the same index stay local; A (or B) comes back, and
    the moment its commit covers that index it is crashed, B is cut off, and X returns. With the commit rule
    X cannot win; without it X wins with the two others and erases a committed entry."""
    sim.check_liveness("boot")
    first = sim.leader()
    assert first is not None and first.raft is not None
    ids = list(sim.nodes)
    b = next(i for i in ids if i != first.id)
    rest = [i for i in ids if i not in (first.id, b)]
    target = max(n.raft.commit_index for n in sim.alive() if n.raft is not None) + 1
    sim.net.partition([first.id, b], rest)
    for x in rest:                                     # the other side elects X, whose entries stay local
        for y in ids:
            sim.net.drop_types(x, y, (MsgType.APPEND,))
    sim.run_for(100)                                   # A's proposals reach B only
    sim.crash(first.id)
    x_leader = _wait_leader(sim, rest, 2000)
    if x_leader is None:
        return
    sim.run_for(150)
    sim.crash(x_leader)
    sim.net.heal()
    sim.restart(first.id)
    a = _wait_leader(sim, [first.id, b], 3000)
    if a is not None:
        ld = sim.nodes[a]
        if sim.run_until(lambda: ld.raft is not None and ld.raft.commit_index >= target, 2000):
            other = b if a == first.id else first.id    # B is cut off too: X needs exactly the other two
            sim.net.partition([a], [other], [i for i in ids if i not in (a, other)])
            sim.crash(a)
    sim.restart(x_leader)
    sim.run_for(2000)
    sim.calm()
    sim.check_liveness("end")


def _wait_leader(sim: RaftSim, among: list[str], ms: int) -> str | None:
    def found() -> bool:
        return any(sim.nodes[i].raft is not None and sim.nodes[i].raft.role == Role.LEADER  # type: ignore[union-attr]
                   for i in among)
    if not sim.run_until(found, ms):
        return None
    return next(i for i in among if sim.nodes[i].raft is not None
                and sim.nodes[i].raft.role == Role.LEADER)  # type: ignore[union-attr]


SCENARIOS: dict[str, tuple[Callable[[RaftSim], None], Callable[[int], SimOptions]]] = {
    "random": (_random, _random_options),
    "leader_partition": (_leader_partition, lambda seed: SimOptions(nodes=5)),
    "majority_crash": (_majority_crash, lambda seed: SimOptions(nodes=5)),
    "storm": (_storm, lambda seed: SimOptions(nodes=3)),
    "figure8": (_figure8, lambda seed: SimOptions(nodes=5, max_append_entries=1, max_inflight_appends=1,
                                                  fsync_max_ms=0, compact_every=10_000)),
    "snapshot_catchup": (_snapshot_catchup, lambda seed: SimOptions(nodes=3, compact_every=10)),
}


def run_seed(seed: int, scenario: str = "random", *, options: SimOptions | None = None,
             trace: Callable[[RaftSim, str, str], None] | None = None) -> RaftSim:
    """One deterministic run; raises SimFailure (message includes the replay command) on any violation."""
    body, make_opts = SCENARIOS[scenario]
    sim = RaftSim(seed, options or make_opts(seed), scenario=scenario, trace=trace)
    try:
        body(sim)
    except SimFailure:
        raise
    except Exception as e:   # a crash of the core or the harness is a failure of this seed too
        raise sim.fail(f"unexpected {type(e).__name__}: {e}") from e
    return sim


def sweep(seeds: Iterable[int], scenario: str = "random", *,
          budget_s: float | None = None) -> tuple[int, list[SimFailure]]:
    """Run seeds (until the wall-clock budget, if any, is spent); returns (runs done, failures)."""
    failures: list[SimFailure] = []
    runs = 0
    start = time.monotonic()
    for seed in seeds:
        if budget_s is not None and time.monotonic() - start > budget_s:
            break
        runs += 1
        try:
            run_seed(seed, scenario)
        except SimFailure as e:
            failures.append(e)
    return runs, failures


def _print_event(sim: RaftSim, kind: str, node_id: str) -> None:
    n = sim.nodes[node_id]
    r = n.raft
    if r is None:
        print(f"{sim.now:>7}ms {node_id:<3} {kind:<7} DOWN")
        return
    print(f"{sim.now:>7}ms {node_id:<3} {kind:<7} {r.role.name:<13} term={r.term:<3} commit={r.commit_index:<5} "
          f"applied={n.sm_applied}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orbitmq.testing.vopr", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, help="replay one seed, printing one status line per event")
    ap.add_argument("--seeds", type=int, help="sweep this many seeds and print the failing ones")
    ap.add_argument("--first", type=int, help="first seed of the sweep (default: a fresh random one)")
    ap.add_argument("--scenario", default="random", choices=sorted(SCENARIOS))
    ap.add_argument("--quiet", action="store_true", help="with --seed: only the summary line")
    args = ap.parse_args(argv)
    if args.seed is not None:
        try:
            sim = run_seed(args.seed, args.scenario, trace=None if args.quiet else _print_event)
        except SimFailure as e:
            print(f"FAIL {e}")
            return 1
        print(f"ok seed {args.seed} ({args.scenario}): {sim.stats}")
        return 0
    if args.seeds:
        first = args.first if args.first is not None else random.SystemRandom().randrange(1 << 32)
        t0 = time.monotonic()
        runs, failures = sweep(range(first, first + args.seeds), args.scenario)
        for f in failures:
            print(f"FAIL {f}")
        print(f"{runs} seeds from {first} ({args.scenario}): {len(failures)} failing, "
              f"{time.monotonic() - t0:.1f}s")
        return 1 if failures else 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
