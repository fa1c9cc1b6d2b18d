"""DeliverySim: the local-delivery state machine (orbitmq.delivery) on the Raft simulator (testing/raft_sim.py).

Every replica of a simulated Raft group applies committed delivery commands to its own DeliveryMachine; crashes,
partitions, message loss/duplication/reordering and slow disks come from the Raft harness, so replicas apply at
different speeds, restart from snapshots and install snapshots from the leader. A seeded workload proposes, on
the leader, commands built from the leader's current state (enqueues, attaches from replica and replica-less
nodes, acks, nacks, invisible-time changes, expiry ticks with the leader's skewed clock, consumer and node
downs, plus stale delivery ids). Checkers after every applied entry (a violation raises SimFailure with the
replay command):
- same effects and same state digest at the same log index on every replica;
- an independent ledger built from commands and effects only: no message checked out to two consumers at once,
  deliveries only to live consumers, settles/returns only of outstanding deliveries, a consumer down leaves it
  nothing outstanding;
- ordering: per consumer, first deliveries in enqueue order (monotonic); with one consumer, first deliveries are
  exactly the enqueue order; single active consumer with prefetch 1: deliveries, redeliveries included, never go
  back in enqueue order and at most one is outstanding;
- snapshots: a machine restored from its snapshot equals one replaying the Raft snapshot's commands;
- after calm, a drain: every enqueued message is eventually settled (or dead-lettered), replicas agree;
- in fault-free runs every delivery is executed by exactly one replica (Ra's local rule).
It also models delivery traffic: bytes each node sends for deliveries with local delivery and, in the same run,
if the leader sent every delivery.

  python -m orbitmq.testing.delivery_sim --seed N [--scenario NAME]
  python -m orbitmq.testing.delivery_sim --seeds 200 [--first S] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from orbitmq.base.errors import InvariantError
from orbitmq.delivery import commands as dc
from orbitmq.delivery.effects import DeadLettered, Deliver, Effect, Refused, Returned, Settled
from orbitmq.delivery.machine import DeliveryMachine
from orbitmq.delivery.replica import DeliveryReplica
from orbitmq.delivery.router import decode_entry, encode_entry
from orbitmq.raft.messages import Message, MsgType, Ready, Role, Snapshot
from orbitmq.testing.raft_sim import RaftSim, SimFailure, SimNode, SimOptions, decode_sm
from orbitmq.testing.vopr import chaos

DELIVERY_OVERHEAD = 64       # modelled per-delivery header bytes (frame + properties) on top of the payload
REMOTE_NODES = ("x0",)       # nodes with consumers but no replica: the leader delivers to them
EXTRA_CLIENTS = 1            # a second proposal stream on top of the Raft simulator's one
MAX_PENDING = 16             # the workload stops proposing while the leader has this many entries unapplied
KEY = "TopicSim@GroupSim"    # the one consumption queue of the simulation
CONSUMERS = tuple(f"c{i}" for i in range(6))


@dataclass(frozen=True, slots=True)
class Workload:
    mode: str = "competing"        # or "single_active"
    consumers: tuple[str, ...] = CONSUMERS
    prefetch: tuple[int, int] = (1, 4)
    remote: bool = True            # consumers may attach from replica-less nodes
    downs: bool = True             # consumer/node down commands
    payload: tuple[int, int] = (100, 4000)
    max_deliveries: int = 5


def _is_marker(data: bytes) -> bool:
    return not data or data.startswith(b"live")


class Ledger:
    """The checker's own account, from commands and effects only (not the machine's internals)."""

    def __init__(self, sim: DeliverySim) -> None:
        self.sim = sim
        self.seq: dict[tuple[int, int], int] = {}          # ref -> enqueue order
        self.live: dict[str, str] = {}                     # consumer -> node
        self.out: dict[int, tuple[tuple[int, int], str]] = {}   # did -> (ref, consumer)
        self.out_ref: dict[tuple[int, int], int] = {}      # ref -> did
        self.done: dict[tuple[int, int], str] = {}         # ref -> "settled" | "dead"
        self.ever: dict[tuple[int, int], bool] = {}        # delivered at least once
        self.first_last: dict[str, int] = {}               # consumer -> last first-delivery seq
        self.first_order: list[int] = []
        self.last_any = 0
        self.mode = ""
        self.deliveries = 0
        self.redeliveries = 0

    def fail(self, what: str) -> SimFailure:
        return self.sim.fail(what)

    def feed(self, index: int, cmd: dc.Command, effects: list[Effect]) -> None:
        refused = any(isinstance(e, Refused) for e in effects)
        if isinstance(cmd, dc.Enqueue) and not refused:
            self.seq[(cmd.queue, cmd.offset)] = len(self.seq) + 1
        elif isinstance(cmd, dc.Attach) and not refused:
            if not self.live and cmd.mode != self.mode:
                self.mode, self.last_any = cmd.mode, 0      # the queue's mode changes only while it has no consumer
            self.live[cmd.consumer] = cmd.node
        for e in effects:
            if isinstance(e, Deliver):
                self._deliver(index, e)
            elif isinstance(e, (Settled, Returned)):
                got = self.out.pop(e.did, None)
                if got is None or got[1] != e.consumer or got[0] != (e.queue, e.offset):
                    raise self.fail(f"index {index}: {e} ends a delivery that is not outstanding ({got})")
                del self.out_ref[got[0]]
                if isinstance(e, Settled):
                    self.done[got[0]] = "settled"
            elif isinstance(e, DeadLettered):
                ref = (e.queue, e.offset)
                if ref in self.out_ref:
                    raise self.fail(f"index {index}: {ref} dead-lettered while checked out")
                self.done[ref] = "dead"
        gone: list[str] = []
        if isinstance(cmd, dc.ConsumerDown):
            gone = [cmd.consumer]
        elif isinstance(cmd, dc.NodeDown):
            gone = [c for c, n in self.live.items() if n == cmd.node]
        for c in gone:
            self.live.pop(c, None)
            left = [d for d, (_, oc) in self.out.items() if oc == c]
            if left:
                raise self.fail(f"index {index}: consumer {c} is down but deliveries {left[:5]} were not returned")

    def _deliver(self, index: int, e: Deliver) -> None:
        ref = (e.queue, e.offset)
        s = self.seq.get(ref)
        if s is None or ref in self.done:
            raise self.fail(f"index {index}: delivery {e.did} of {ref}, which is not enqueued or already done")
        if ref in self.out_ref:
            raise self.fail(f"index {index}: {ref} delivered to {e.consumer} (delivery {e.did}) while still "
                            f"checked out as delivery {self.out_ref[ref]} to {self.out[self.out_ref[ref]][1]}")
        if self.live.get(e.consumer) != e.node:
            raise self.fail(f"index {index}: delivery {e.did} to {e.consumer}@{e.node}, not a live consumer")
        self.out[e.did] = (ref, e.consumer)
        self.out_ref[ref] = e.did
        self.deliveries += 1
        w = self.sim.workload
        if not self.ever.get(ref):
            self.ever[ref] = True
            if s <= self.first_last.get(e.consumer, 0):
                raise self.fail(f"index {index}: {e.consumer} got message #{s} first-delivered after "
                                f"#{self.first_last[e.consumer]} (per-consumer order not monotonic)")
            self.first_last[e.consumer] = s
            self.first_order.append(s)
            if len(w.consumers) == 1 and s != len(self.first_order):
                raise self.fail(f"index {index}: single consumer got message #{s} as its first delivery "
                                f"#{len(self.first_order)} (FIFO broken)")
        else:
            self.redeliveries += 1
        if self.mode == "single_active" and w.prefetch == (1, 1):
            if len(self.out) > 1:
                raise self.fail(f"index {index}: single active consumer, prefetch 1, {len(self.out)} outstanding")
            if s < self.last_any:
                raise self.fail(f"index {index}: single active consumer with prefetch 1 got #{s} after "
                                f"#{self.last_any} (FIFO including redeliveries broken)")
            self.last_any = s


class DeliverySim(RaftSim):
    def __init__(self, seed: int, options: SimOptions | None = None, *, scenario: str = "random",
                 workload: Workload | None = None,
                 trace: Callable[[RaftSim, str, str], None] | None = None) -> None:
        self.workload = workload or Workload()
        self.reps: dict[str, DeliveryReplica] = {}
        self.msnaps: dict[int, bytes] = {}                 # index -> machine snapshot registered there
        self.effects_ref: dict[int, tuple[Effect, ...]] = {}
        self.digest_ref: dict[int, str] = {}
        self.exec_count: dict[int, int] = {}               # did -> replicas that sent it when applying
        self.resent: dict[int, int] = {}                   # did -> re-sends (snapshot, restart, new leader)
        self.delivery_bytes: dict[str, int] = {}           # node -> bytes sent for deliveries (local rule)
        self.leader_only_bytes: dict[str, int] = {}        # node -> same, had the leader sent them all
        self.repl_bytes: dict[str, int] = {}               # node -> enqueue payload bytes sent in APPENDs
        self.payload_delivered = 0
        self.draining = False
        self.quiet = False                                 # the workload proposes nothing
        self._wrng = random.Random(f"{seed}/workload")
        self._offsets = [0, 0]
        self._skew: dict[str, int] = {}
        self._sizes: dict[bytes, int] = {}
        self.dstats = {"restores": 0, "replays_checked": 0}
        super().__init__(seed, options, scenario=scenario, trace=trace)
        self.ledger = Ledger(self)
        for _ in range(EXTRA_CLIENTS):                     # more proposal streams (each picks a random node)
            self.schedule(1, "propose")
        sk = self.fork("skew")
        for i in self.nodes:
            self._skew[i] = sk.randint(-300, 300)
        route = self.net.route

        def counted_route(msg: Message) -> list[int]:
            if msg.type == MsgType.APPEND and msg.entries:
                self.repl_bytes[msg.src] = self.repl_bytes.get(msg.src, 0) + sum(
                    self._entry_payload(e.data) for e in msg.entries)
            return route(msg)
        self.net.route = counted_route  # type: ignore[method-assign]

    def fail(self, what: str) -> SimFailure:
        e = super().fail(what)
        e.args = (f"seed {self.seed} ({self.scenario}) at {self.now} ms: {what}\n  replay: python -m "
                  f"orbitmq.testing.delivery_sim --seed {self.seed} --scenario {self.scenario}",)
        return e

    # --- replicas across crash / restart / snapshots ---------------------------------------------------
    def machine(self, node_id: str) -> DeliveryMachine:
        """The node's machine for the simulated queue (an empty one before its first command; not stored)."""
        rep = self.reps[node_id]
        return rep.router.machines.get(KEY) or DeliveryMachine(self.workload.max_deliveries)

    def _entry_payload(self, data: bytes) -> int:
        if _is_marker(data):
            return 0
        size = self._sizes.get(data)
        if size is None:
            cmd = decode_entry(data)[1]
            size = cmd.size if isinstance(cmd, dc.Enqueue) else 0
            self._sizes[data] = size
        return size

    def _load(self, n: SimNode, snap: Snapshot | None) -> None:
        """(Re)build the node's replica from a Raft snapshot: restored from the delivery snapshot registered at
        that index, checked against a replay of the snapshot's commands; then its own checkouts are re-sent."""
        replayed = DeliveryReplica(n.id, self.nodes, self.workload.max_deliveries)
        if snap is not None:
            for data in decode_sm(snap.data):
                if not _is_marker(data):
                    replayed.apply(data)
        rep = DeliveryReplica(n.id, self.nodes, self.workload.max_deliveries)
        if snap is not None and snap.index in self.msnaps:
            sends = rep.restore(self.msnaps[snap.index])
            self.dstats["restores"] += 1
            if rep.router.snapshot() != replayed.router.snapshot():
                raise self.fail(f"{n.id}: state restored from the snapshot at {snap.index} differs from the "
                                f"replay of the log up to it")
            self.dstats["replays_checked"] += 1
        else:
            sends = replayed.restore(replayed.router.snapshot() if snap is not None else None)
            rep = replayed
        self.reps[n.id] = rep
        self._sent(n, [d for _, d in sends], resend=True)

    def restart(self, node_id: str) -> None:
        n = self.nodes[node_id]
        if n.raft is None:
            self._load(n, n.durable.snapshot)
        super().restart(node_id)

    def crash(self, node_id: str) -> None:
        super().crash(node_id)
        self.reps.pop(node_id, None)

    def _sent(self, n: SimNode, ds: list[Deliver], *, resend: bool) -> None:
        counts = self.resent if resend else self.exec_count
        for x in ds:
            counts[x.did] = counts.get(x.did, 0) + 1
            self.delivery_bytes[n.id] = self.delivery_bytes.get(n.id, 0) + x.size + DELIVERY_OVERHEAD

    def _apply(self, n: SimNode, rd: Ready) -> None:
        if rd.snapshot is not None:
            self._load(n, rd.snapshot)
        super()._apply(n, rd)
        assert n.raft is not None
        rep = self.reps[n.id]
        self._sent(n, [d for _, d in rep.set_role(n.raft.role == Role.LEADER, n.raft.term)], resend=True)
        for e in rd.committed:
            if _is_marker(e.data):
                continue
            key, effects, mine = rep.apply(e.data)
            m = rep.router.machines[key]
            try:
                m.check_invariants()
            except InvariantError as ex:
                raise self.fail(f"{n.id} at index {e.index}: machine invariant: {ex}") from ex
            eff = tuple(effects)
            digest = m.digest()
            seen = self.effects_ref.get(e.index)
            if seen is None:
                self.effects_ref[e.index] = eff
                self.digest_ref[e.index] = digest
                self.ledger.feed(e.index, decode_entry(e.data)[1], effects)
                self._traffic_leader_only(effects)
            elif seen != eff or self.digest_ref[e.index] != digest:
                raise self.fail(f"replicas diverge at index {e.index}: {n.id} computed {list(eff)[:4]} "
                                f"(state {digest}), another replica {list(seen)[:4]} (state "
                                f"{self.digest_ref[e.index]})")
            self._sent(n, mine, resend=False)
        if n.sm_applied - n.raft.log.snap_index >= self.opts.compact_every:
            prev = self.msnaps.get(n.sm_applied)
            snap = rep.router.snapshot()
            if prev is not None and prev != snap:
                raise self.fail(f"{n.id}: delivery snapshot at {n.sm_applied} differs from another replica's")
            self.msnaps[n.sm_applied] = snap

    def _traffic_leader_only(self, effects: list[Effect]) -> None:
        ld = self.leader()
        for x in effects:
            if isinstance(x, Deliver):
                self.payload_delivered += x.size
                if ld is not None:
                    self.leader_only_bytes[ld.id] = self.leader_only_bytes.get(ld.id, 0) + x.size + DELIVERY_OVERHEAD

    # --- workload --------------------------------------------------------------------------------------
    def _client_propose(self, n: SimNode, cmd: bytes | None = None) -> bytes | None:
        if cmd is None:
            c = self._next_command(n)
            if c is None:
                return None
            cmd = encode_entry(KEY, c)
        return super()._client_propose(n, cmd)

    def _next_command(self, n: SimNode) -> dc.Command | None:
        if n.id not in self.reps or self.quiet or n.raft is None or n.raft.last_index - n.sm_applied > MAX_PENDING:
            return None                                    # back-pressure: clients wait for applies
        m = self.machine(n.id)
        r, w = self._wrng, self.workload
        ts = max(0, self.now + self._skew.get(n.id, 0))
        nodes = list(self.nodes) + (list(REMOTE_NODES) if w.remote else [])
        owned = [(did, co.consumer) for did, co in m.checkouts.items()]
        roll = r.random()
        if self.draining:
            if not m.consumers:
                return self._attach(ts, r.choice(w.consumers), r.choice(nodes), m)
            if owned and roll < 0.7:
                did, c = r.choice(owned)
                return dc.Settle(ts, c, (did,))
            return dc.Expire(ts)
        if roll < 0.35:
            q = r.randrange(2)
            if r.random() < 0.05 and self._offsets[q] > 0:
                return dc.Enqueue(ts, q, self._offsets[q] - 1, r.randint(*w.payload))   # a duplicate
            self._offsets[q] += 1
            return dc.Enqueue(ts, q, self._offsets[q] - 1, r.randint(*w.payload))
        if roll < 0.45:
            cid = r.choice(w.consumers)
            c = m.consumers.get(cid)
            return self._attach(ts, cid, c.node if c is not None and r.random() < 0.9 else r.choice(nodes), m)
        if roll < 0.70 and owned:
            picks = r.sample(owned, min(len(owned), r.randint(1, 3)))
            c = picks[0][1]
            return dc.Settle(ts, c, tuple(d for d, oc in picks if oc == c))
        if roll < 0.75 and owned:
            did, c = r.choice(owned)
            return dc.Return(ts, c, (did,))
        if roll < 0.80 and owned:
            did, c = r.choice(owned)
            return dc.ChangeInvisible(ts, c, did, r.randint(50, 2000))
        if roll < 0.88:
            return dc.Expire(ts)
        if roll < 0.95 and w.downs and m.consumers:
            return dc.ConsumerDown(ts, r.choice(list(m.consumers)))
        if roll < 0.97 and w.downs:
            return dc.NodeDown(ts, r.choice(nodes))
        return dc.Settle(ts, r.choice(w.consumers), (r.randint(1, m.next_did + 3),))      # stale or unknown

    def _attach(self, ts: int, cid: str, node: str, m: DeliveryMachine) -> dc.Command:
        w, r = self.workload, self._wrng
        mode = w.mode if r.random() < 0.95 else ("single_active" if w.mode == "competing" else "competing")
        return dc.Attach(ts, cid, node, r.randint(*w.prefetch), r.randint(200, 2000), mode)

    # --- end-of-run checks -----------------------------------------------------------------------------
    def drain(self, max_ms: int = 30_000) -> None:
        """After calm(): only attaches, acks and expiry ticks until every enqueued message is settled or
        dead-lettered; then every replica's machine must be equal."""
        self.draining = True
        lg = self.ledger
        self.check_liveness("drain")         # everything proposed before the drain is applied first
        ok = self.run_until(lambda: all(ref in lg.done for ref in lg.seq), max_ms)
        if not ok:
            left = [ref for ref in lg.seq if ref not in lg.done]
            raise self.fail(f"drain: {len(left)} enqueued messages never settled, e.g. {left[:5]}")
        self.quiet = True
        self.check_liveness("drained")
        top = max(n.sm_applied for n in self.alive())
        if not self.run_until(lambda: all(n.sm_applied == top for n in self.alive()), 3000):
            raise self.fail(f"drain: replicas did not all apply up to {top}")
        digests = {n.id: self.machine(n.id).digest() for n in self.alive()}
        if len(set(digests.values())) != 1:
            raise self.fail(f"replicas differ after the drain at index {top}: {digests}")
        self.draining = self.quiet = False

    def check_executed_once(self) -> None:
        """Fault-free runs: no delivery is sent by two replicas applying its entry, and every delivery is sent
        (when applied, or re-sent by a replica that installed a snapshot instead)."""
        bad = {d: k for d, k in self.exec_count.items() if k != 1}
        missing = [d for d in range(1, self.ledger.deliveries + 1) if d not in self.exec_count
                   and d not in self.resent]
        if bad or missing:
            raise self.fail(f"deliveries sent by several replicas {list(bad.items())[:5]}, never sent {missing[:5]}")


# --- scenarios ---------------------------------------------------------------------------------------------
def _random(sim: DeliverySim) -> None:
    sim.check_liveness("boot")
    for _ in range(2):
        chaos(sim, 1500)
        sim.calm()
        sim.check_liveness("calm")
    sim.drain()


def _calm(sim: DeliverySim) -> None:
    sim.check_liveness("boot")
    sim.run_for(2500)
    sim.drain()
    sim.check_executed_once()


def _opts(seed: int) -> SimOptions:
    r = random.Random(f"{seed}/options")
    return SimOptions(nodes=r.choice((3, 3, 5)), fsync_max_ms=r.choice((0, 3, 15)),
                      compact_every=r.choice((10, 30, 10_000)), max_append_entries=r.choice((1, 8, 64)),
                      propose_every_ms=r.choice((5, 15)))


SCENARIOS: dict[str, tuple[Callable[[DeliverySim], None], Workload]] = {
    "random": (_random, Workload()),
    "single_consumer": (_random, Workload(consumers=("c0",))),
    "single_active": (_random, Workload(mode="single_active", consumers=("c0", "c1", "c2"), prefetch=(1, 1))),
    "calm": (_calm, Workload(downs=False)),
}


def run_seed(seed: int, scenario: str = "random", *, options: SimOptions | None = None,
             workload: Workload | None = None) -> DeliverySim:
    body, wl = SCENARIOS[scenario]
    sim = DeliverySim(seed, options or _opts(seed), scenario=scenario, workload=workload or wl)
    try:
        body(sim)
    except SimFailure:
        raise
    except Exception as e:
        raise sim.fail(f"unexpected {type(e).__name__}: {e}") from e
    return sim


def sweep(seeds: Iterable[int], scenario: str = "random") -> tuple[int, list[SimFailure]]:
    failures: list[SimFailure] = []
    runs = 0
    for seed in seeds:
        runs += 1
        try:
            run_seed(seed, scenario)
        except SimFailure as e:
            failures.append(e)
    return runs, failures


def traffic(seed: int = 1, messages: int = 200, payload: int = 1000) -> dict[str, float]:
    """One consumer on each follower, none on the leader, no faults: the leader's outbound bytes per delivered
    message (replication + deliveries) with local delivery and, in the same run, had it sent every delivery."""
    wl = Workload(remote=False, downs=False, payload=(payload, payload))
    sim = DeliverySim(seed, SimOptions(nodes=3, compact_every=10_000), scenario="traffic", workload=wl)
    sim.quiet = True                     # only the commands below (and the drain's acks) go through the log
    sim.check_liveness("boot")
    ld = sim.leader()
    assert ld is not None and ld.raft is not None
    term = ld.raft.term
    followers = [i for i in sim.nodes if i != ld.id]
    for k, f in enumerate(followers):
        sim._client_propose(ld, encode_entry(KEY, dc.Attach(sim.now, f"c{k}", f, 4, 600_000)))
    sim._pump(ld)
    for i in range(messages):
        sim._client_propose(ld, encode_entry(KEY, dc.Enqueue(sim.now, 0, i, payload)))
    sim._pump(ld)
    sim.quiet = False
    sim.drain()
    if ld.raft is None or ld.raft.term != term or sim.leader() is not ld:
        raise sim.fail("traffic: the leader changed during a fault-free run")
    sim.check_executed_once()
    n = sim.ledger.deliveries
    local = sim.repl_bytes.get(ld.id, 0) + sim.delivery_bytes.get(ld.id, 0)
    leader_only = sim.repl_bytes.get(ld.id, 0) + sim.leader_only_bytes.get(ld.id, 0)
    return {"deliveries": n, "payload": sim.payload_delivered / n,
            "leader_bytes_per_delivery_local": local / n, "leader_bytes_per_delivery_leader_only": leader_only / n,
            "follower_delivery_bytes": sum(sim.delivery_bytes.get(f, 0) for f in followers) / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orbitmq.testing.delivery_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seeds", type=int)
    ap.add_argument("--first", type=int)
    ap.add_argument("--scenario", default="random", choices=sorted(SCENARIOS))
    ap.add_argument("--traffic", action="store_true", help="print the delivery traffic model")
    args = ap.parse_args(argv)
    if args.traffic:
        print(traffic())
        return 0
    if args.seed is not None:
        try:
            sim = run_seed(args.seed, args.scenario)
        except SimFailure as e:
            print(f"FAIL {e}")
            return 1
        print(f"ok seed {args.seed} ({args.scenario}): {sim.stats} deliveries={sim.ledger.deliveries} "
              f"redeliveries={sim.ledger.redeliveries} {sim.dstats}")
        return 0
    if args.seeds:
        first = args.first if args.first is not None else random.SystemRandom().randrange(1 << 32)
        t0 = time.monotonic()
        runs, failures = sweep(range(first, first + args.seeds), args.scenario)
        for f in failures:
            print(f"FAIL {f}")
        print(f"{runs} seeds from {first} ({args.scenario}): {len(failures)} failing, {time.monotonic() - t0:.1f}s")
        return 1 if failures else 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
