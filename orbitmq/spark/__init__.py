"""OrbitMQ as a PySpark data source (`format("orbitmq")`): batch and Structured Streaming reads and writes through
the Python Data Source API (pyspark >= 4.0, install the `spark` extra). `register(spark)` makes the format known.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the `orbitmq` format on a SparkSession (needed once per session)."""
    from orbitmq.spark.source import OrbitMQDataSource

    spark.dataSource.register(OrbitMQDataSource)
