"""Local delivery on the Raft simulator (orbitmq.testing.delivery_sim): fixed seeds and a seed sweep per scenario
(replicas compute the same assignments at the same index; no double checkout; every enqueued message settled;
consumer down returns its messages; the ordering guarantees; snapshot == replay), the delivery traffic model,
and proof that the checkers catch deliberately broken rules. ORBITMQ_SIM_FIRST moves the sweep's seed range;
every failure prints its one-line replay command."""

from __future__ import annotations

import itertools
import os

import pytest

from orbitmq.delivery import replica
from orbitmq.delivery.machine import DeliveryMachine
from orbitmq.testing import delivery_sim
from orbitmq.testing.raft_sim import SimFailure

pytestmark = pytest.mark.sim

FIRST = int(os.environ.get("ORBITMQ_SIM_FIRST", "100000"))
SWEEP = {"random": 40, "single_consumer": 15, "single_active": 15, "calm": 15}


def _report(runs: int, failures: list[SimFailure]) -> None:
    assert not failures, f"{len(failures)} of {runs} seeds failed:\n" + "\n".join(str(f) for f in failures[:10])


@pytest.mark.parametrize("scenario", sorted(SWEEP))
@pytest.mark.parametrize("seed", [1, 7])
def test_fixed_seed(scenario: str, seed: int) -> None:
    sim = delivery_sim.run_seed(seed, scenario)
    lg = sim.ledger
    assert lg.deliveries > 20 and lg.seq and all(ref in lg.done for ref in lg.seq)
    if scenario != "calm":
        assert sim.stats["crashes"] > 0 and lg.redeliveries > 0


def test_restores_from_snapshots_are_checked_against_replay() -> None:
    restores = 0
    for seed in range(1, 40):
        restores += delivery_sim.run_seed(seed).dstats["replays_checked"]
        if restores >= 3:
            return
    pytest.fail(f"only {restores} snapshot restores in 39 seeds: the snapshot check is not exercised")


@pytest.mark.parametrize("scenario", sorted(SWEEP))
def test_sweep(scenario: str) -> None:
    _report(*delivery_sim.sweep(range(FIRST, FIRST + SWEEP[scenario]), scenario))


def test_traffic_model_local_delivery_saves_the_leader_the_payload() -> None:
    t = delivery_sim.traffic(seed=3, messages=120, payload=1500)
    assert t["deliveries"] == 120
    per = 1500 + delivery_sim.DELIVERY_OVERHEAD
    assert t["leader_bytes_per_delivery_leader_only"] - t["leader_bytes_per_delivery_local"] == per
    assert t["follower_delivery_bytes"] == per


def _first_failure(scenario: str, seeds: range) -> str:
    for seed in seeds:
        try:
            delivery_sim.run_seed(seed, scenario)
        except SimFailure as e:
            assert f"--seed {seed} --scenario {scenario}" in str(e)
            return e.what
    pytest.fail(f"no seed in {seeds} caught the broken rule")


def test_checker_catches_replica_dependent_assignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken rule: the service queue is rotated by a process-wide counter (state outside the log), so replicas
    applying the same entry at different moments pick different consumers."""
    counter = itertools.count()
    orig = DeliveryMachine._assign

    def skewed(self: DeliveryMachine, out: list) -> None:  # type: ignore[type-arg]
        if len(self.sq) > 1 and next(counter) % 2:
            self.sq.rotate(1)
        orig(self, out)
    monkeypatch.setattr(DeliveryMachine, "_assign", skewed)
    assert "replicas diverge" in _first_failure("random", range(1, 20))


def test_checker_catches_returns_queued_at_the_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken rule: a returned message goes behind the waiting ones; single active consumer with prefetch 1 then
    gets a later message before the redelivery."""
    orig = DeliveryMachine._return

    def to_back(self: DeliveryMachine, did: int, why: str, out: list) -> None:  # type: ignore[type-arg]
        orig(self, did, why, out)
        if self.returns:
            self.ready.append(self.returns.pop())
    monkeypatch.setattr(DeliveryMachine, "_return", to_back)
    assert "FIFO including redeliveries broken" in _first_failure("single_active", range(1, 30))


def test_checker_catches_a_leader_that_also_delivers_for_followers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken executor rule: the leader sends every delivery and followers send their local ones too."""
    monkeypatch.setattr(replica, "executes_here",
                        lambda target, me, leader, replicas: leader or target == me)
    assert "sent by several replicas" in _first_failure("calm", range(1, 20))


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("scenario", sorted(SWEEP))
def test_soak(scenario: str) -> None:
    _report(*delivery_sim.sweep(range(FIRST + 10_000, FIRST + 12_000), scenario))
