"""offsets.py (sans-IO): option parsing, JSON round trip, range splitting and maxMessagesPerTrigger capping."""

from __future__ import annotations

import pytest

from orbitmq.spark import offsets as ofs


def test_parse_and_resolve() -> None:
    assert ofs.parse_offsets_option(None, "earliest") == "earliest"
    assert ofs.parse_offsets_option(" LATEST ", "earliest") == "latest"
    spec = ofs.parse_offsets_option('{"b": {"0": 5, "1": -2, "2": -1, "3": 999}}', "earliest")
    assert isinstance(spec, dict)
    assert ofs.resolve(spec, ("b", 0), (2, 10), "earliest") == 5
    assert ofs.resolve(spec, ("b", 1), (2, 10), "latest") == 2
    assert ofs.resolve(spec, ("b", 2), (2, 10), "earliest") == 10
    assert ofs.resolve(spec, ("b", 3), (2, 10), "earliest") == 10  # clamped
    assert ofs.resolve(spec, ("b", 9), (2, 10), "latest") == 10  # missing queue -> default
    with pytest.raises(ValueError):
        ofs.parse_offsets_option("[1, 2]", "earliest")
    with pytest.raises(ValueError):
        ofs.parse_offsets_option("nope", "earliest")


def test_json_round_trip_is_sorted() -> None:
    m = {("b", 10): 3, ("a", 2): 1, ("b", 2): 7}
    obj = ofs.to_json_obj(m)
    assert list(obj) == ["a", "b"] and list(obj["b"]) == ["2", "10"]
    assert ofs.from_json_obj(obj) == m


def test_split_ranges() -> None:
    rs = ofs.split_ranges({("a", 0): 0, ("a", 1): 5}, {("a", 0): 25, ("a", 1): 5, ("a", 2): 3}, 10)
    assert [(r.queue_id, r.start, r.end) for r in rs] == [(0, 0, 10), (0, 10, 20), (0, 20, 25), (2, 0, 3)]


def test_cap_offsets_shares_budget_and_never_moves_back() -> None:
    start = {("a", 0): 0, ("a", 1): 0, ("a", 2): 0, ("a", 3): 50}
    latest = {("a", 0): 10, ("a", 1): 1000, ("a", 2): 1000, ("a", 3): 40}
    end = ofs.cap_offsets(start, latest, 100)
    taken = sum(end[k] - start[k] for k in start)
    assert taken == 100
    assert end[("a", 0)] == 10 and end[("a", 1)] == 45 and end[("a", 2)] == 45 and end[("a", 3)] == 50
    assert ofs.cap_offsets(start, latest, None)[("a", 1)] == 1000
    assert ofs.cap_offsets(start, latest, 5000) == {**latest, ("a", 3): 50}
    tiny = ofs.cap_offsets({("a", i): 0 for i in range(8)}, {("a", i): 10 for i in range(8)}, 3)
    assert sum(tiny.values()) == 3
