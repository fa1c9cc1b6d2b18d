"""bench.clients_bench --repeat: the per-row ratio summary over rounds run in alternating order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.clients_bench import main_async, parse_args, ratios, render_summary


def _round(orbit: dict[str, float], nats: dict[str, float], nats_first: bool = False) -> list[dict]:
    o = {"system": "orbitmq", "cpu_s_per_million": orbit}
    n = {"system": "nats", "cpu_s_per_million": nats}
    return [n, o] if nats_first else [o, n]


def test_ratios_pair_each_round_by_system_not_by_position() -> None:
    rounds = [_round({"sdk_c8": 50.0}, {"sdk_c8": 40.0}),
              _round({"sdk_c8": 45.0}, {"sdk_c8": 50.0}, nats_first=True)]
    assert ratios(rounds, ("sdk_c8",)) == {"sdk_c8": [1.25, 0.9]}


def test_summary_reports_median_extremes_and_rounds_at_or_below_parity() -> None:
    rounds = [_round({"r": 30.0}, {"r": 20.0}), _round({"r": 18.0}, {"r": 20.0}, nats_first=True),
              _round({"r": 20.0}, {"r": 20.0})]
    text = render_summary(rounds, ("r", "missing"))
    assert "| r | 1.00 | 0.90 | 1.50 | 2 / 3 |" in text
    assert "| missing | - | - | - | 0 / 0 |" in text


def test_a_round_without_one_of_the_systems_is_left_out() -> None:
    rounds = [[{"system": "orbitmq", "cpu_s_per_million": {"r": 10.0}}], _round({"r": 10.0}, {"r": 20.0})]
    assert ratios(rounds, ("r",)) == {"r": [0.5]}


def test_repeat_must_be_positive() -> None:
    assert parse_args(["--repeat", "3"]).repeat == 3
    with pytest.raises(SystemExit):
        parse_args(["--repeat", "0"])


def test_rounds_alternate_the_order_of_the_systems(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import bench.clients_bench as cb

    order: list[str] = []

    async def fake_run(system: str, opts: object) -> dict:
        order.append(system)
        return {"system": system, "phases": {"r": {"msgs_per_s": 1.0}},
                "cpu_s_per_million": {"r": 10.0 if system == "orbitmq" else 20.0}}

    monkeypatch.setattr(cb, "run_system", fake_run)
    warmed: list[float] = []
    monkeypatch.setattr(cb, "warm_memory", lambda gib: warmed.append(gib) or 0.0)
    opts = parse_args(["--repeat", "3", "--rows", "sdk_c8", "--warm-gib", "0.5"])
    opts.rows = ("r",)
    rounds = asyncio.run(main_async(opts))
    assert warmed == [0.5]  # once, before the first round
    assert order == ["orbitmq", "nats", "nats", "orbitmq", "orbitmq", "nats"]
    assert len(rounds) == 3
    assert "| r | 0.50 | 0.50 | 0.50 | 3 / 3 |" in capsys.readouterr().out


def test_warm_gib_defaults_to_two_and_refuses_negative() -> None:
    assert parse_args([]).warm_gib == 2.0
    assert parse_args(["--warm-gib", "0"]).warm_gib == 0.0
    with pytest.raises(SystemExit):
        parse_args(["--warm-gib", "-1"])


def test_warm_memory_touches_and_frees(tmp_path: Path) -> None:
    from bench.machine import page_fault_cost, warm_memory

    assert warm_memory(0) == 0.0
    assert warm_memory(1 / 256) > 0.0  # 4 MiB
    assert page_fault_cost(str(tmp_path / "f"), mib=1) > 0.0


def test_orbitmq_settings_and_the_msg_id_row_are_parsed_and_checked() -> None:
    opts = parse_args(["--rows", "sdk_c8,sdk_c8_id", "--orbitmq-set", "dedupEnable=false",
                       "--orbitmq-set", "x=a=b"])
    assert opts.rows == ("sdk_c8", "sdk_c8_id")
    assert opts.broker_conf == {"dedupEnable": "false", "x": "a=b"}
    assert parse_args([]).broker_conf == {}
    for bad in (["--orbitmq-set", "dedupEnable"], ["--orbitmq-set", "=1"], ["--rows", "sdk_c9"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_the_orbitmq_driver_takes_the_settings_for_its_broker_conf() -> None:
    from bench.drivers.orbitmq import OrbitDriver

    d = OrbitDriver("async", parse_args(["--orbitmq-set", "dedupEnable=false", "--orbitmq-set", "flushDiskType=X"]))
    try:
        conf = d.conf_settings(9876, 10911)
        assert conf["dedupEnable"] == "false" and conf["flushDiskType"] == "X"  # a setting given wins
        assert conf["namesrvAddr"] == "127.0.0.1:9876" and conf["listenPort"] == 10911
    finally:
        import shutil

        shutil.rmtree(d._dir, ignore_errors=True)
