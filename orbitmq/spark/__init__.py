"""OrbitMQ as a PySpark data source (`format("orbitmq")`): batch and Structured Streaming reads and writes through
the Python Data Source API (pyspark >= 4.0, install the `spark` extra).

PySpark 4 registers the format by itself once the package is installed (the top-level module `pyspark_orbitmq`),
provided Spark's Python workers run an interpreter that has orbitmq. `register(spark)` does it explicitly and
also points a local session's workers at the running interpreter (workers.setup_worker_python).
"""

from __future__ import annotations

from typing import Any

from orbitmq.spark.workers import WorkerPythonError, setup_worker_python

__all__ = ["WorkerPythonError", "register", "setup_worker_python"]


def register(spark: Any) -> None:
    """Register the `orbitmq` format on a SparkSession and check which Python its workers run."""
    from orbitmq.spark.datasource import OrbitMQDataSource

    setup_worker_python(spark)
    if not _known(spark):  # registering over PySpark's own registration would only log a warning
        spark.dataSource.register(OrbitMQDataSource)


def _known(spark: Any) -> bool:
    """Whether the session already resolves format("orbitmq") (found by PySpark's lookup, or registered)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists("orbitmq"))
    except Exception:  # noqa: BLE001 - a JVM API that may change: register, as before
        return False
