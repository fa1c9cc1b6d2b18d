"""Issue 17 item 1: orbitmq.spark points a local session's Python workers at the running interpreter when nothing
was chosen, and a chosen interpreter that cannot import orbitmq.spark fails at once with one actionable line
(instead of `No module named 'orbitmq.spark'` deep in a task's traceback)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.spark import WorkerPythonError, setup_worker_python


def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "-")  # recorded: restored after the test whatever the code sets
    monkeypatch.delenv("PYSPARK_PYTHON")


def _session(master: str, conf: dict[str, str] | None = None) -> Any:
    sc = SimpleNamespace(master=master, pythonExec="python3",
                         getConf=lambda: SimpleNamespace(get=lambda k, d=None: (conf or {}).get(k, d)))
    return SimpleNamespace(sparkContext=sc)


def test_local_session_without_a_choice_uses_this_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch)
    spark = _session("local[2]")
    assert setup_worker_python(spark) == sys.executable
    assert spark.sparkContext.pythonExec == sys.executable and os.environ["PYSPARK_PYTHON"] == sys.executable


def test_chosen_interpreter_without_orbitmq_fails_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    fake = tmp_path / "python3"  # what a system python without orbitmq answers
    fake.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                    "echo \"ModuleNotFoundError: No module named 'orbitmq'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(fake))
    with pytest.raises(WorkerPythonError) as err:
        setup_worker_python(_session("local[*]"))
    text = str(err.value)
    assert "\n" not in text and str(fake) in text and sys.executable in text
    assert "No module named 'orbitmq'" in text


def test_chosen_interpreter_that_works_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch)
    spark = _session("local[2]", {"spark.pyspark.python": sys.executable})
    assert setup_worker_python(spark) == sys.executable == spark.sparkContext.pythonExec


def test_cluster_session_is_left_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch)
    spark = _session("spark://master:7077")
    assert setup_worker_python(spark) == "python3"
    assert "PYSPARK_PYTHON" not in os.environ
