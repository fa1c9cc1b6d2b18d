"""Smoke run of the benchmark with tiny counts (slow: starts brokers, needs RabbitMQ and NATS on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import orjson
import pytest

from orbitmq.testing.procs import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_bench_tiny_run_writes_results(tmp_path) -> None:
    systems = ["orbitmq"] + [name for name, port in (("rabbitmq", 5672), ("nats", 4222)) if _listening(port)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "bench", "--systems", ",".join(systems), "--modes", "async,sync",
         "--messages", "400", "--send-messages", "200", "--latency-seconds", "0.5", "--rate", "200",
         "--mem-gib", "0.001", "--out-dir", str(tmp_path)],
        cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = orjson.loads((tmp_path / "latest.json").read_bytes())
    labels = [r["label"] for r in doc["results"]]
    assert labels[:2] == ["orbitmq/async", "orbitmq/sync"]
    for r in doc["results"]:
        assert r["error"] == "", r
        assert r["phases"]["send_c8"]["messages"] == 200
        assert r["phases"]["consume"]["messages"] >= 400
        assert r["cpu_s_per_million"] is not None and r["memory"]["rss_anon_mib"] > 0
        assert r["cpu_per_million"]["batch"] >= 0  # (tiny runs may take under one clock tick of server CPU)
        if r["system"] == "orbitmq":  # the SDK's auto-batching shape runs only where the client has it
            assert r["phases"]["send_c8_auto"]["messages"] == 200 and r["cpu_per_million"]["send_c8_auto"] >= 0
        else:
            assert "send_c8_auto" not in r["phases"]
    assert "| metric |" in (tmp_path / "latest.md").read_text()
