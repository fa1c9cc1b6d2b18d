"""Suite-wide: the temporary folder of a test that passed is removed right after it (store segments are
fallocated, so a broker's files take real disk; keeping every test's folder until the session ends filled the
disk). A failed test keeps its folder for inspection."""

from __future__ import annotations

import shutil

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield  # fixtures (servers, processes) are torn down first
    rep = getattr(item, "_orbitmq_call_passed", None)
    path = getattr(item, "funcargs", {}).get("tmp_path")
    if rep and path is not None:
        shutil.rmtree(path, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when == "call":
        item._orbitmq_call_passed = outcome.get_result().passed  # type: ignore[attr-defined]
