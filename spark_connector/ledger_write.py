"""Writing a task's rows into a new ledger, and the write into new ledgers (no ``stream``).

The task side (``RowsToLedger``) is shared with the stream sinks, whose tasks write
their rows into temporary ledgers the same way.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from spark_connector.options import OptionError, WriteOptions
from spark_connector.reading import connect
from spark_connector.records import RECORD_ROWS, ROW_FORMAT, RecordColumns, pack

if TYPE_CHECKING:
    from embedlog.client import Client

log = logging.getLogger("spark_connector")


class EmbedlogCommitMessage(WriterCommitMessage):
    """What one write task made: a closed ledger (``ledger_id`` -1 for an empty partition)."""

    def __init__(self, partition_id: int, ledger_id: int, entries: int) -> None:
        self.partition_id = partition_id
        self.ledger_id = ledger_id
        self.entries = entries

    def __repr__(self) -> str:
        return (
            f"EmbedlogCommitMessage(partition {self.partition_id}: ledger {self.ledger_id}, "
            f"{self.entries} entries)"
        )


def task_context() -> tuple[int, int, Any]:
    """(partition id, attempt number, TaskContext or None) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return -1, -1, None
    return ctx.partitionId(), ctx.attemptNumber(), ctx


class RowsToLedger:
    """Turns a task's rows into one new closed ledger: its ``data`` column, in order.

    ``records``: the ledger is a stream write's temporary one, and keeps each row's
    ``key``, ``headers`` and ``timestamp`` columns (records.py) when the schema has any.
    """

    def __init__(self, opts: WriteOptions, schema: StructType, *, records: bool = False) -> None:
        self.opts = opts
        columns = RecordColumns(schema) if records else None
        self.columns = columns if columns is not None and columns.any else None
        names = [f.name.lower() for f in schema.fields]
        if "data" not in names:
            raise OptionError(
                "writing to embedlog needs a 'data' column (binary or string), got columns "
                f"{schema.fieldNames()}"
            )
        self.data_index = names.index("data")
        field = schema.fields[self.data_index]
        if not isinstance(field.dataType, BinaryType | StringType):
            raise OptionError(
                f"column 'data' must be binary or string, not {field.dataType.simpleString()}"
            )
        self.data_is_string = isinstance(field.dataType, StringType)

    def payload(self, row: Any) -> bytes:
        value = row[self.data_index]
        if value is None:
            raise ValueError("column 'data' is null: an entry needs bytes")
        if self.data_is_string:
            return str(value).encode("utf-8")
        return bytes(value)

    def write(self, rows: Iterator[Any], custom_metadata: dict[str, bytes]) -> tuple[int, int]:
        """(ledger id, entries) of the ledger made of ``rows``; (-1, 0) when there are none.

        A failure deletes the ledger before it is raised: the driver's abort hears only
        of the tasks that succeeded.
        """
        from embedlog import DigestType

        opts = self.opts
        rows = iter(rows)
        first = next(rows, None)
        if first is None:
            return -1, 0
        columns = self.columns
        if columns is not None:
            custom_metadata = {**custom_metadata, ROW_FORMAT: RECORD_ROWS}
        client = connect(opts.conn, "write")
        try:
            wh = client.create_ledger(
                opts.ensemble_size,
                opts.write_quorum,
                opts.ack_quorum,
                digest=DigestType[opts.digest],
                password=opts.conn.password,
                custom_metadata=custom_metadata,
            )
            try:
                pending: deque[Any] = deque()
                count = 0
                for row in _chain(first, rows):
                    data = self.payload(row)
                    if columns is not None:
                        data = pack(data, columns.fields(row))
                    pending.append(wh.add_async(data))
                    count += 1
                    if len(pending) >= opts.window:
                        pending.popleft().result()
                while pending:
                    pending.popleft().result()
                wh.close()
            except BaseException:
                delete_quietly(client, wh.ledger_id)
                raise
            return wh.ledger_id, count
        finally:
            client.close()


class EmbedlogWriter(DataSourceWriter):
    """Each partition's ``data`` column, in order, becomes one new closed ledger."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.rows = RowsToLedger(opts, schema)
        self.write_id = uuid.uuid4().hex  # the same in every task: this object is pickled

    def _custom_metadata(self, partition_id: int, attempt: int) -> dict[str, bytes]:
        meta = {
            "spark.writeId": self.write_id.encode(),
            "spark.partitionId": str(partition_id).encode(),
            "spark.attempt": str(attempt).encode(),
        }
        if self.opts.tag is not None:
            meta["spark.writeTag"] = self.opts.tag.encode("utf-8")
        return meta

    def write(self, iterator: Iterator[Any]) -> EmbedlogCommitMessage:
        partition_id, attempt, _ = task_context()
        lid, count = self.rows.write(iterator, self._custom_metadata(partition_id, attempt))
        return EmbedlogCommitMessage(partition_id, lid, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job succeeded: keep the ledgers of the committed tasks, delete the others.

        Others: ledgers carrying this write's id that no commit message names, i.e. those
        of task attempts Spark discarded (speculative duplicates, attempts killed after
        they closed their ledger). Keeping them would duplicate rows.
        """
        kept = made(messages)
        client = connect(self.opts.conn, "commit")
        try:
            for lid in ledgers_with(client, "spark.writeId", self.write_id.encode()):
                if lid not in kept:
                    delete_quietly(client, lid)
        finally:
            client.close()
        log.info("embedlog write %s committed ledgers %s", self.write_id, sorted(kept))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed: delete every ledger this write made."""
        client = connect(self.opts.conn, "abort")
        try:
            found = ledgers_with(client, "spark.writeId", self.write_id.encode())
            for lid in made(messages) | set(found):
                delete_quietly(client, lid)
        finally:
            client.close()


def ledgers_with(client: Client, key: str, value: bytes) -> list[int]:
    """Ids, ascending, of the ledgers whose custom metadata holds ``key`` = ``value``.

    One metadata read per ledger in the cluster; ledgers deleted meanwhile are skipped.
    ``ledgers_with(client, "spark.writeTag", tag.encode())`` finds what a tagged write made.
    """
    return [lid for lid, meta in custom_metadata_of_all(client) if meta.get(key) == value]


def custom_metadata_of_all(client: Client) -> list[tuple[int, dict[str, bytes]]]:
    """(ledger id, custom metadata) of every ledger, ascending (deleted meanwhile: left out)."""
    from embedlog.errors import NoSuchLedgerError

    out = []
    for lid in sorted(client.list_ledgers()):
        try:
            md = client.ledger_metadata(lid)
        except NoSuchLedgerError:
            continue
        out.append((lid, dict(md.custom_metadata)))
    return out


def made(messages: list[WriterCommitMessage | None]) -> set[int]:
    return {
        m.ledger_id for m in messages if isinstance(m, EmbedlogCommitMessage) and m.ledger_id >= 0
    }


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def delete_quietly(client: Client, ledger_id: int) -> None:
    from embedlog.errors import BKError, NoSuchLedgerError

    try:
        client.delete_ledger(ledger_id)
    except NoSuchLedgerError:
        pass
    except (BKError, OSError) as exc:
        log.warning("could not delete ledger %d of a failed write: %s", ledger_id, exc)
