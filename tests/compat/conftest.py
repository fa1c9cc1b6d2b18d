"""Fixtures for the official-client compatibility suite: a real `orbitmq standalone` process and a runner for
the C++ client driver (tests/compat/cpp_client_driver.py) in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orbitmq.testing.procs import Standalone

DRIVER = Path(__file__).with_name("cpp_client_driver.py")

pytestmark = pytest.mark.compat


CPP_CLIENT_HINT = ("the official C++ client is pip package rocketmq==0.4.4 (a test extra in pyproject.toml; its "
                   "x86_64 Linux wheel bundles librocketmq.so, which needs libstdc++6): run ./dev test, or "
                   "pip install -e '.[test]'")


def cpp_client_import_error() -> str | None:
    """Why `rocketmq.client` does not import here (None when it does)."""
    try:
        import rocketmq.client  # noqa: F401
    except Exception as e:  # ImportError (no wheel for this platform), OSError (librocketmq.so cannot load), ...
        return f"{type(e).__name__}: {' '.join(str(e).split())}"
    return None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Standalone]:
    err = cpp_client_import_error()
    if err is not None:  # a failure, never a skip: CI must not go green with the compat suite left out
        pytest.fail(f"C++ compatibility suite cannot run: {err}; {CPP_CLIENT_HINT}", pytrace=False)
    s = Standalone(tmp_path / "standalone", brokerIP1="127.0.0.1")
    s.start(wait_registered=True)
    try:
        yield s
    finally:
        s.close()


class Driver:
    """Runs one action of the C++ client driver; collects its JSON lines."""

    def __init__(self, action: str, args: dict[str, Any], log_dir: Path) -> None:
        self.action = action
        env = dict(os.environ)
        env["HOME"] = str(log_dir)  # librocketmq writes logs (and broadcast offsets) under $HOME
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), action, json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[dict[str, Any]] = []

    def wait_started(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                obj = json.loads(line)
                self.lines.append(obj)
                if obj.get("started"):
                    return
        raise AssertionError(f"{self.action} driver did not start: {self.lines[-3:]}")

    def wait_for(self, predicate, timeout_s: float = 30.0) -> bool:
        """Read output lines until predicate(line_obj) is true (True) or the time is up (False)."""
        import selectors

        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, min(0.5, deadline - time.monotonic()))):
                    continue
                line = self.proc.stdout.readline()
                if not line:
                    return False
                if line.startswith("{"):
                    obj = json.loads(line)
                    self.lines.append(obj)
                    if predicate(obj):
                        return True
        finally:
            sel.close()
        return False

    def finish(self, timeout_s: float = 90.0) -> list[dict[str, Any]]:
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            raise AssertionError(f"{self.action} driver timed out; output tail:\n{out[-2000:]}") from None
        for line in out.splitlines():
            if line.startswith("{"):
                self.lines.append(json.loads(line))
        done = [x["done"] for x in self.lines if "done" in x]
        assert done, f"{self.action} driver ended without a result (rc {self.proc.returncode}):\n{out[-2000:]}"
        return self.lines

    def sent(self) -> list[dict[str, Any]]:
        return [x["sent"] for x in self.lines if "sent" in x]

    def received(self) -> list[dict[str, Any]]:
        return [x["recv"] for x in self.lines if "recv" in x]

    def done(self) -> dict[str, Any]:
        return next(x["done"] for x in self.lines if "done" in x)


@pytest.fixture
def cpp(tmp_path: Path):
    started: list[Driver] = []

    def run(action: str, **args: Any) -> Driver:
        d = Driver(action, args, tmp_path)
        started.append(d)
        return d

    yield run
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
