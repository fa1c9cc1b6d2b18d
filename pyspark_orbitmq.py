"""Makes `format("orbitmq")` known to PySpark >= 4.0 without set-up code: at the first data source call of a
session, PySpark imports every installed top-level module named `pyspark_*` and registers its `DefaultSource`.
The implementation lives in `orbitmq.spark`; `orbitmq.spark.register(spark)` does the same explicitly.
"""

from orbitmq.spark.datasource import OrbitMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
