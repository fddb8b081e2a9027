"""Writing a DataFrame into an existing stream: ``df.write`` with option ``stream``/``ledger``.

Each task writes its rows into a temporary ledger; the driver's commit appends them to
the stream in partition order (stream_commit.py). The streaming sink (stream_sink.py)
is this with Spark's batch ids.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_connector.exactly_once import NO_BATCH, sink_name
from spark_connector.ledger_write import EmbedlogCommitMessage, RowsToLedger, task_context
from spark_connector.options import WriteOptions
from spark_connector.reading import connect
from spark_connector.stream_commit import (
    StreamCommit,
    StreamCommitError,
    stream_id_of,
    temporary_metadata,
)

log = logging.getLogger("spark_connector")


class TemporaryLedger(EmbedlogCommitMessage):
    """A task's temporary ledger, with the streaming query and batch it was made for."""

    def __init__(
        self,
        partition_id: int,
        ledger_id: int,
        entries: int,
        query_id: str | None,
        batch_id: int,
    ) -> None:
        super().__init__(partition_id, ledger_id, entries)
        self.query_id = query_id
        self.batch_id = batch_id


def temporaries(messages: list[WriterCommitMessage | None]) -> list[TemporaryLedger]:
    """The tasks' temporary ledgers, in partition order (the stream's row order)."""
    found = [m for m in messages if isinstance(m, TemporaryLedger)]
    return sorted(found, key=lambda m: m.partition_id)


class StreamWrite:
    """What the batch and the streaming sink share: the task side and the driver side."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        assert opts.target is not None
        self.opts = opts
        self.rows = RowsToLedger(opts, schema, records=True)
        self.write_id = uuid.uuid4().hex  # the same in every task: this object is pickled
        client = connect(opts.conn, "plan")
        try:  # once, on the driver: every task tags its ledger with the id
            self.stream_id = stream_id_of(client, opts.target)
        finally:
            client.close()

    def write_task(self, iterator: Iterator[Any]) -> TemporaryLedger:
        partition_id, attempt, ctx = task_context()
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        raw_batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        batch = int(raw_batch) if raw_batch is not None else NO_BATCH
        sink = sink_name(query_id, self.write_id)
        meta = temporary_metadata(self.stream_id, self.write_id, sink, batch, partition_id, attempt)
        lid, count = self.rows.write(iterator, meta)
        return TemporaryLedger(partition_id, lid, count, query_id, batch)

    def commit_driver(self, messages: list[WriterCommitMessage | None], batch: int) -> str:
        temps = temporaries(messages)
        query_id = next((m.query_id for m in temps if m.query_id), None)
        sink = sink_name(query_id, self.write_id)
        made = [(m.ledger_id, m.entries) for m in temps if m.ledger_id >= 0]
        if not made:  # no rows: nothing to append, nothing to record
            return "skip"
        client = connect(self.opts.conn, "commit")
        try:
            commit = StreamCommit(client, self.opts, self.stream_id)
            outcome = commit.commit(sink, batch, self.write_id, made)
            # Attempts Spark discarded, and this query's earlier batches' leftovers.
            commit.clean(
                {lid for lid, _ in made},
                write_id=self.write_id,
                sink=sink if batch != NO_BATCH else None,
                upto_batch=batch if batch != NO_BATCH else None,
            )
        finally:
            client.close()
        log.info(
            "stream %d: %s %s batch %d (%d temporary ledgers)",
            self.stream_id,
            sink,
            "appended" if outcome == "append" else "skipped",
            batch,
            len(made),
        )
        return outcome

    def abort_driver(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete this write's temporary ledgers, unless a commit began appending them
        (then they stay until that commit is finished, here or by the next commit)."""
        client = connect(self.opts.conn, "abort")
        try:
            commit = StreamCommit(client, self.opts, self.stream_id)
            if self._began(commit):
                try:
                    ul = client.open_unbounded(
                        self.stream_id, password=self.opts.conn.password, takeover=True
                    )
                    try:
                        commit.finish_unfinished(ul)
                    finally:
                        ul.close()
                except (StreamCommitError, OSError, RuntimeError) as exc:
                    log.warning(
                        "stream %d: a commit that began could not be finished now (%s); "
                        "the next commit into the stream finishes it",
                        self.stream_id,
                        exc,
                    )
            made = {m.ledger_id for m in temporaries(messages) if m.ledger_id >= 0}
            commit.delete(made - _needed(commit))
            commit.clean(set(), write_id=self.write_id)
        finally:
            client.close()

    def _began(self, commit: StreamCommit) -> bool:
        from spark_connector.stream_commit import _records

        return any(
            r.write_id == self.write_id and not r.done
            for r, _ in _records(commit.client, commit.stream_id).values()
        )


def _needed(commit: StreamCommit) -> set[int]:
    from spark_connector.exactly_once import protected
    from spark_connector.stream_commit import _records

    return protected([r for r, _ in _records(commit.client, commit.stream_id).values()])


class EmbedlogStreamAppender(DataSourceWriter):
    """``df.write`` into a stream: the DataFrame's rows, in partition order, appended once."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.impl = StreamWrite(opts, schema)

    def write(self, iterator: Iterator[Any]) -> TemporaryLedger:
        return self.impl.write_task(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.impl.commit_driver(messages, NO_BATCH)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.impl.abort_driver(messages)
