"""PySpark 4 data source for embedlog ledgers (see docs/spark.md).

    from spark_connector import register
    register(spark)
    spark.read.format("embedlog").option("metadataUri", "zk://127.0.0.1:2181/embedlog").load()

Rows are ``ledger_id long, entry_id long, data binary``. Spark's Python workers
are other processes, so the cluster must share its metadata through ZooKeeper
(``zk://``) and serve its bookies over TCP.
"""

from spark_connector.options import SCHEMA, OptionError
from spark_connector.source import (
    EmbedlogBatchReader,
    EmbedlogCommitMessage,
    EmbedlogDataSource,
    EmbedlogStreamReader,
    EmbedlogWriter,
    LedgerRange,
    ledgers_with,
    register,
)

__all__ = [
    "SCHEMA",
    "EmbedlogBatchReader",
    "EmbedlogCommitMessage",
    "EmbedlogDataSource",
    "EmbedlogStreamReader",
    "EmbedlogWriter",
    "LedgerRange",
    "OptionError",
    "ledgers_with",
    "register",
]
