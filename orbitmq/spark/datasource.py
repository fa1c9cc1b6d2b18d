"""The `orbitmq` DataSource class itself, kept light (pyspark's datasource module only): PySpark's start-up lookup of
installed data sources imports it through the top-level module `pyspark_orbitmq`, and the readers and writers
(pyarrow, the SDK) are imported only when a query uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SCHEMA = (
    "key string, body binary, topic string, brokerName string, queueId int, queueOffset long, msgId string, "
    "tags string, properties map<string,string>, bornTimestamp timestamp, storeTimestamp timestamp, "
    "reconsumeTimes int"
)


class OrbitMQDataSource(DataSource):
    """spark.read/readStream/write/writeStream .format("orbitmq")."""

    @classmethod
    def name(cls) -> str:
        return "orbitmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from orbitmq.spark.source import OrbitMQBatchReader

        return OrbitMQBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from orbitmq.spark.source import OrbitMQStreamReader

        return OrbitMQStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from orbitmq.spark.sink import OrbitMQBatchWriter

        return OrbitMQBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from orbitmq.spark.sink import OrbitMQStreamWriter

        return OrbitMQStreamWriter(self.options, schema)
