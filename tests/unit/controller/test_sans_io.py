"""The controller's rule modules stay sans-IO: no asyncio, sockets, threads, clocks or randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3] / "orbitmq" / "controller"
FORBIDDEN = {"asyncio", "socket", "threading", "time", "random", "selectors", "orbitmq.remoting", "orbitmq.raft"}


@pytest.mark.parametrize("name", ["state.py", "election.py", "heartbeat.py", "events.py"])
def test_module_is_sans_io(name: str) -> None:
    tree = ast.parse((ROOT / name).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    bad = {m for m in imported if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)}
    assert not bad, f"{name} imports {sorted(bad)}"
