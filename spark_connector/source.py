"""The "embedlog" data source: which reader or writer each direction gets, and ``register``.

Every piece runs in a Spark Python worker, a process other than the application's:
planning (``partitions``, ``latestOffset``, a write's ``commit``/``abort``) in one the
driver starts, ``read``/``write`` in the executors'. See reading.py for how they reach
the cluster.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from spark_connector.batch_read import EmbedlogBatchReader
from spark_connector.ledger_write import EmbedlogWriter
from spark_connector.options import (
    SCHEMA,
    OptionError,
    ReadOptions,
    StreamOptions,
    WriteOptions,
)
from spark_connector.sink import EmbedlogStreamAppender
from spark_connector.stream_read import READ_LIMITS, EmbedlogStreamReader
from spark_connector.stream_sink import EmbedlogStreamSink


def _pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


class EmbedlogDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("embedlog")``; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "embedlog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> EmbedlogBatchReader:
        return EmbedlogBatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> EmbedlogStreamReader:
        opts = StreamOptions.parse(self.options)
        if opts.max_entries_per_trigger is not None and not READ_LIMITS:
            raise OptionError(
                "option 'maxEntriesPerTrigger' needs PySpark >= 4.2 (where Spark passes read "
                "limits to Python sources); this is PySpark " + _pyspark_version()
            )
        return EmbedlogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError(
                "embedlog ledgers are append-only: use mode('append') (a write makes new "
                "ledgers, or appends to the stream named by 'stream'/'ledger')"
            )
        opts = WriteOptions.parse(self.options, "write")
        if opts.target is not None:
            return EmbedlogStreamAppender(opts, schema)
        return EmbedlogWriter(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            # Spark asks for a truncate in Complete mode: the result table would replace
            # the stream's contents each batch, which an append-only stream cannot do.
            raise OptionError(
                "a stream is append-only: outputMode('complete') would replace its contents "
                "every batch. Use outputMode('append'); an aggregation then needs a "
                "watermark, and each window's result is appended once, when final"
            )
        return EmbedlogStreamSink(WriteOptions.parse(self.options, "writeStream"), schema)


def register(spark: Any, *, check_workers: bool = True) -> None:
    """Register the "embedlog" data source with ``spark`` (a SparkSession).

    First checks that the Python Spark's workers run imports this same connector
    (workers.py); ``check_workers=False`` skips that (about a second: it starts that
    interpreter once).
    """
    if check_workers:
        from spark_connector.workers import check_workers as check

        check(spark)
    spark.dataSource.register(EmbedlogDataSource)
