"""DeliveryRouter (one machine per topic@group behind one entry type, one snapshot) and DeliveryReplica (which
deliveries this member sends; re-sends after a snapshot restore or on becoming leader)."""

from __future__ import annotations

import pytest

from orbitmq.delivery import commands as dc
from orbitmq.delivery.effects import Deliver
from orbitmq.delivery.replica import DeliveryReplica
from orbitmq.delivery.router import DeliveryRouter, decode_entry, encode_entry, queue_key

REPLICAS = ("n0", "n1", "n2")


def test_entry_round_trip_and_bad_entries() -> None:
    key = queue_key("TopicA", "GroupA")
    cmd = dc.Attach(1, "c", "n1", 2, 30_000)
    assert decode_entry(encode_entry(key, cmd)) == (key, cmd)
    for bad, why in [(b"\x00", "shorter"), (b"\x00\x00x", "key length"), (b"\x00\x09abc", "key length"),
                     (b"\x00\x01\xff{}", "UTF-8"), (b"\x00\x01k{}", "unknown command kind")]:
        with pytest.raises(dc.CommandError, match=why):
            decode_entry(bad)
    with pytest.raises(dc.CommandError, match="queue key"):
        encode_entry("", cmd)


def test_router_keeps_queues_apart_and_snapshots_all() -> None:
    r = DeliveryRouter()
    a, b = queue_key("T", "G1"), queue_key("T", "G2")
    r.apply(encode_entry(a, dc.Attach(1, "c", "n1", 5, 1000)))
    r.apply(encode_entry(b, dc.Attach(1, "c", "n2", 5, 1000)))
    _, eff = r.apply(encode_entry(a, dc.Enqueue(2, 0, 0, 10)))
    assert [(e.consumer, e.node) for e in eff if isinstance(e, Deliver)] == [("c", "n1")]
    _, eff = r.apply(encode_entry(b, dc.Enqueue(2, 0, 0, 10)))   # same offset, other group: delivered again
    assert [(e.consumer, e.node) for e in eff if isinstance(e, Deliver)] == [("c", "n2")]
    r2 = DeliveryRouter.restore(r.snapshot())
    assert r2.snapshot() == r.snapshot() and list(r2.machines) == [a, b]
    nxt = encode_entry(b, dc.Enqueue(3, 0, 1, 10))
    assert r2.apply(nxt) == r.apply(nxt)


def _group() -> dict[str, DeliveryReplica]:
    reps = {n: DeliveryReplica(n, REPLICAS) for n in REPLICAS}
    reps["n0"].set_role(True, 1)
    return reps


def _apply_all(reps: dict[str, DeliveryReplica], key: str, cmd: dc.Command) -> dict[str, list[int]]:
    """Apply on every member; which dids each member sends itself."""
    out = {}
    for n, rep in reps.items():
        _, _, mine = rep.apply(encode_entry(key, cmd))
        out[n] = [d.did for d in mine]
    return out


def test_each_delivery_is_sent_by_exactly_one_member() -> None:
    reps = _group()
    k = queue_key("T", "G")
    for c, node in [("a", "n0"), ("b", "n1"), ("x", "x9")]:     # leader's node, a follower's, no replica
        _apply_all(reps, k, dc.Attach(1, c, node, 1, 1000))
    sent = {n: [] for n in REPLICAS}
    for off in range(3):
        for n, dids in _apply_all(reps, k, dc.Enqueue(2, 0, off, 10)).items():
            sent[n] += dids
    assert sent == {"n0": [1, 3], "n1": [2], "n2": []}            # a (leader's node) and x by n0, b by n1


def test_resends_after_restore_and_on_leadership() -> None:
    reps = _group()
    k = queue_key("T", "G")
    for c, node in [("b", "n1"), ("x", "x9")]:
        _apply_all(reps, k, dc.Attach(1, c, node, 2, 1000))
    for off in range(4):
        _apply_all(reps, k, dc.Enqueue(2, 0, off, 10))
    snap = reps["n2"].router.snapshot()
    fresh = DeliveryReplica("n1", REPLICAS)
    assert [(key, d.consumer, d.did) for key, d in fresh.restore(snap)] == [(k, "b", 1), (k, "b", 3)]
    assert fresh.restore(None) == [] and fresh.router.machines == {}
    # n1 becomes leader in term 2: it re-sends x's checkouts (replica-less node) once per term
    assert [(d.consumer, d.did) for _, d in reps["n1"].set_role(True, 2)] == [("x", 2), ("x", 4)]
    assert reps["n1"].set_role(True, 2) == []
    assert reps["n0"].set_role(False, 2) == []


def test_enqueue_joins_every_machine_of_the_topic_only() -> None:
    reps = {n: DeliveryReplica(n, ("n0", "n1")) for n in ("n0", "n1")}
    reps["n0"].set_role(True, 1)
    for r in reps.values():
        r.apply(encode_entry("T@g1", dc.Attach(1, "c0", "n0", 10, 1000)))
        r.apply(encode_entry("T@g2", dc.Attach(1, "c1", "n1", 10, 1000)))
        r.apply(encode_entry("U@g1", dc.Attach(1, "c2", "n1", 10, 1000)))
    assert reps["n0"].router.topics() == {"T", "U"}
    out = {n: r.enqueue("T", 2, 5, 100) for n, r in reps.items()}
    assert [k for k, _, _ in out["n0"]] == ["T@g1", "T@g2"]
    assert [[d.consumer for d in mine] for _, _, mine in out["n0"]] == [["c0"], []]  # n0 sends to its own
    assert [[d.consumer for d in mine] for _, _, mine in out["n1"]] == [[], ["c1"]]
    assert reps["n0"].enqueue("V", 0, 0, 1) == []  # no machine of that topic: nothing
    assert not reps["n0"].router.machines["U@g1"].checkouts
    assert reps["n0"].router.snapshot() == reps["n1"].router.snapshot()
