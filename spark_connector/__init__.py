"""PySpark 4 data source for embedlog ledgers and streams (see docs/spark.md).

    from spark_connector import register
    register(spark)
    spark.read.format("embedlog").option("metadataUri", "zk://127.0.0.1:2181/embedlog").load()

Rows are ``ledger_id long, entry_id long, data binary, timestamp timestamp, key binary,
headers map<string, binary>`` (the last three: a stream record's). Spark's Python workers
are other processes, so the cluster must share its metadata through ZooKeeper
(``zk://``) and serve its bookies over TCP.
"""

from spark_connector import _requires  # noqa: F401  (first: names the extra if PySpark is missing)
from spark_connector.batch_read import EmbedlogBatchReader
from spark_connector.exactly_once import SinkRecord
from spark_connector.ledger_write import EmbedlogCommitMessage, EmbedlogWriter, ledgers_with
from spark_connector.options import SCHEMA, OptionError
from spark_connector.reading import DataLossError, LedgerRange
from spark_connector.sink import EmbedlogStreamAppender, TemporaryLedger
from spark_connector.source import EmbedlogDataSource, register
from spark_connector.stream_commit import StreamCommitError, forget_sink, temporary_ledgers
from spark_connector.stream_read import EmbedlogStreamReader
from spark_connector.stream_sink import EmbedlogStreamSink
from spark_connector.workers import WorkerPythonError

__all__ = [
    "SCHEMA",
    "DataLossError",
    "EmbedlogBatchReader",
    "EmbedlogCommitMessage",
    "EmbedlogDataSource",
    "EmbedlogStreamAppender",
    "EmbedlogStreamReader",
    "EmbedlogStreamSink",
    "EmbedlogWriter",
    "LedgerRange",
    "OptionError",
    "SinkRecord",
    "StreamCommitError",
    "TemporaryLedger",
    "WorkerPythonError",
    "forget_sink",
    "ledgers_with",
    "register",
    "temporary_ledgers",
]
