"""The streaming sink: ``df.writeStream.format("embedlog")`` into a stream, exactly once.

Each micro-batch is committed like a batch write into the stream (sink.py), under the
query's sink record: a batch Spark replays after a failure (same query id, from its
checkpoint, same batch id) finds its id recorded and is not appended again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_connector.options import WriteOptions
from spark_connector.sink import StreamWrite, TemporaryLedger


class EmbedlogStreamSink(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.impl = StreamWrite(opts, schema)

    def write(self, iterator: Iterator[Any]) -> TemporaryLedger:
        return self.impl.write_task(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.impl.commit_driver(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.impl.abort_driver(messages)
