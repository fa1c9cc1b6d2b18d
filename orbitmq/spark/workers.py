"""Which Python runs Spark's Python workers (the readers and writers of the `orbitmq` format).

PySpark started from a script (`python job.py`) runs its workers with $PYSPARK_PYTHON, else `python3` from PATH,
which often lacks orbitmq: the job then fails deep in a task with `No module named 'orbitmq.spark'`. In local mode
the workers run on this machine, so the running interpreter (which has orbitmq) is the right one and is used when
nothing was chosen; an interpreter that was chosen and cannot import orbitmq.spark fails at once with one line.
On a cluster the executors' Python cannot be checked from the driver and is left as configured.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

_CHECKED: dict[str, str | None] = {}  # interpreter -> why it cannot import orbitmq.spark (None: it can)


class WorkerPythonError(RuntimeError):
    """Spark's Python workers would run an interpreter that cannot import orbitmq.spark."""


def import_error(python: str) -> str | None:
    """Why `python` cannot import orbitmq.spark's reader and writer (their last error line), None if it can."""
    if python in _CHECKED:
        return _CHECKED[python]
    why: str | None
    try:
        r = subprocess.run([python, "-c", "import orbitmq.spark.source, orbitmq.spark.sink"], capture_output=True,
                           text=True, timeout=120, check=False)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        why = None if r.returncode == 0 else (lines[-1] if lines else f"exit status {r.returncode}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    _CHECKED[python] = why
    return why


def setup_worker_python(spark: Any) -> str:
    """Make the session's Python workers run an interpreter that has orbitmq; returns it.

    Local mode and nothing chosen (no PYSPARK_PYTHON, no spark.pyspark.python): this interpreter. Local mode and a
    chosen one that cannot import orbitmq.spark: WorkerPythonError naming it and the fix."""
    sc = spark.sparkContext
    chosen = os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python")
    if not str(sc.master).startswith("local"):
        if chosen and sc.pythonExec != chosen:
            sc.pythonExec = chosen
        return str(sc.pythonExec)
    if not chosen:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # also for sessions started later by this process
        sc.pythonExec = sys.executable
        return sys.executable
    if chosen != sys.executable:
        why = import_error(chosen)
        if why is not None:
            raise WorkerPythonError(
                f"Spark's Python workers would run {chosen} (PYSPARK_PYTHON / spark.pyspark.python), which cannot "
                f"import orbitmq.spark ({why}); unset it or set it to {sys.executable}")
    sc.pythonExec = chosen
    return chosen
