"""Issue 18 item 3: the integration and compatibility suites never skip themselves. A feature that is missing, a
client that does not import or a broker answering REQUEST_CODE_NOT_SUPPORTED must fail CI with its reason."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SKIPPING = re.compile(r"pytest\.skip\(|importorskip\(|mark\.skip|skipif\(|pytest\.xfail\(|mark\.xfail")


def test_integration_and_compat_suites_contain_no_skip() -> None:
    offenders = []
    for suite in ("integration", "compat"):
        for path in sorted((TESTS / suite).rglob("*.py")):
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if SKIPPING.search(line):
                    offenders.append(f"{path.relative_to(TESTS)}:{no}: {line.strip()}")
    assert offenders == []


def test_compat_fixture_fails_with_the_reason_when_the_client_does_not_import(
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = TESTS / "compat" / "conftest.py"
    spec = importlib.util.spec_from_file_location("compat_conftest_under_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(sys.modules, "rocketmq.client", None)  # what a missing or unloadable client looks like
    reason = mod.cpp_client_import_error()
    assert reason is not None and "rocketmq.client" in reason
    text = path.read_text(encoding="utf-8")
    assert "pytest.fail(" in text and "cpp_client_import_error()" in text  # the fixture fails with that reason
