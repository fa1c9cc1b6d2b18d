"""The Raft core modules stay sans-IO: no asyncio, socket, threading, time or random imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RAFT = Path(__file__).resolve().parents[3] / "orbitmq" / "raft"
FORBIDDEN = {"asyncio", "socket", "threading", "time", "random", "selectors"}


@pytest.mark.parametrize("name", ["node.py", "log.py", "progress.py", "messages.py"])
def test_core_module_imports_no_io(name: str) -> None:
    tree = ast.parse((RAFT / name).read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    assert not roots & FORBIDDEN, f"raft/{name} imports {sorted(roots & FORBIDDEN)}"
