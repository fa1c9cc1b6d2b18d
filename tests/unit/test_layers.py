"""The layering rules of docs (architecture.md) hold: lower layers never import upper ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "orbitmq"

LAYER = {
    "base": 0,
    "model": 1,
    "protocol": 2,
    "store": 3,
    "remoting": 3,
    "replication": 4,
    "raft": 4,
    "delivery": 4,  # the replicated consumption state machine (pure; used by Raft broker groups)
    "lease": 4,
    "acl": 4,
    "broker": 5,
    "namesrv": 5,
    "controller": 5,
    "client": 5,
    "cli": 6,
    "console": 6,  # the web console: on the SDK; the cli starts it
    "spark": 6,
    "testing": 6,
}
FORBIDDEN = {
    ("store", "protocol"),
    ("store", "remoting"),
    ("remoting", "store"),
    ("broker", "client"),
    ("namesrv", "client"),
    ("namesrv", "broker"),
    ("broker", "namesrv"),
    ("client", "broker"),
    ("client", "namesrv"),
    ("client", "store"),
}
SANS_IO = ["model", "protocol", "store/recovery.py", "namesrv/route_table.py", "client/rebalance.py"]
IO_MODULES = {"asyncio", "socket", "threading", "selectors"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_respects_layers(path: Path) -> None:
    rel = path.relative_to(ROOT)
    if len(rel.parts) < 2:
        return
    pkg = rel.parts[0]
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] != "orbitmq" or len(parts) < 2 or parts[1] not in LAYER:
            continue
        target = parts[1]
        if target == pkg:
            continue
        assert target != "testing", f"{rel} imports orbitmq.testing"
        assert (pkg, target) not in FORBIDDEN, f"{rel} imports {name} (forbidden {pkg} -> {target})"
        if pkg != "testing":
            assert LAYER[target] < LAYER[pkg] or (LAYER[target] == LAYER[pkg] and pkg == "cli"), (
                f"{rel} (layer {LAYER[pkg]}) imports {name} (layer {LAYER[target]})"
            )


@pytest.mark.parametrize("spec", SANS_IO)
def test_sans_io_modules_do_no_io(spec: str) -> None:
    target = ROOT / spec
    files = [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
    for f in files:
        if not f.exists():
            continue
        bad = {n.split(".")[0] for n in _imports(f)} & IO_MODULES
        assert not bad, f"{f.relative_to(ROOT)} is sans-IO but imports {sorted(bad)}"
