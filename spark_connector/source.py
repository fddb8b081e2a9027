"""The "embedlog" data source: batch read, streaming read and batch write.

Every piece here runs in a Spark Python worker, a process other than the
application's: planning (``partitions``, ``latestOffset``, ``commit``/``abort``
of a write) in one the driver starts, ``read``/``write`` in the executors'.
So no client crosses a pickle: each step connects with
``embedlog.connect(metadataUri)`` and closes again (the stream reader keeps one
client for the life of its query, in the one process that plans its batches),
and the only state that travels is the parsed options and the partitions
(plain numbers).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from spark_connector.options import (
    SCHEMA,
    ConnectionOptions,
    OptionError,
    ReadOptions,
    StreamOptions,
    WriteOptions,
)

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.ledger.entries import Entry
    from embedlog.ledger.handles import ReadHandle
    from embedlog.unbounded.ledger import UnboundedLedger

log = logging.getLogger("spark_connector")


def connect(conn: ConnectionOptions, role: str) -> Client:
    import embedlog

    return embedlog.connect(
        conn.metadata_uri,
        name=f"spark-{role}-{os.getpid()}",
        request_timeout=conn.request_timeout,
        tls_ca=conn.tls_ca,
        tls_cert=conn.tls_cert,
        tls_key=conn.tls_key,
    )


class LedgerView:
    """One ledger as the connector reads it: bounded, or unbounded (followed, never taken over).

    Both are opened without disturbing a live writer. An unbounded ledger's no-op
    entries are left out (its ids keep their gaps) and its trimmed entries are skipped.
    """

    def __init__(self, client: Client, ledger_id: int, password: bytes) -> None:
        self.ledger_id = ledger_id
        md = client.ledger_metadata(ledger_id)
        self.unbounded = bool(getattr(md, "unbounded", False))
        self._handle: ReadHandle | UnboundedLedger
        if self.unbounded:
            self._handle = client.open_unbounded(ledger_id, password=password, takeover=False)
        else:
            self._handle = client.open_ledger(ledger_id, password=password, recover=False)

    @property
    def first_entry(self) -> int:
        """The lowest entry id still stored (0, or an unbounded ledger's trim point)."""
        if not self.unbounded:
            return 0
        from embedlog.unbounded import layout

        return int(layout.first_entry(self._handle.metadata))

    @property
    def is_closed(self) -> bool:
        return not self.unbounded and bool(self._handle.is_closed)  # type: ignore[union-attr]

    @property
    def last_add_confirmed(self) -> int:
        return int(self._handle.last_add_confirmed)

    def refresh(self) -> int:
        """The LAC the bookies confirm now (a closed ledger: its last entry)."""
        if self.is_closed:
            return self.last_add_confirmed
        return int(self._handle.read_last_add_confirmed())

    def read(self, first: int, last: int) -> list[Entry]:
        first = max(first, self.first_entry)
        if first > last:
            return []
        return self._handle.read(first, last)


# -- partitions ---------------------------------------------------------------------------


class LedgerRange(InputPartition):
    """Entries ``first..last`` (inclusive) of one ledger: one Spark task."""

    def __init__(self, ledger_id: int, first: int, last: int) -> None:
        super().__init__((ledger_id, first, last))
        self.ledger_id = ledger_id
        self.first = first
        self.last = last

    def __repr__(self) -> str:
        return f"LedgerRange(ledger {self.ledger_id}, entries {self.first}..{self.last})"


def split_range(ledger_id: int, first: int, last: int, size: int) -> list[LedgerRange]:
    """``first..last`` cut into ranges of at most ``size`` entries (none when empty)."""
    return [
        LedgerRange(ledger_id, start, min(start + size - 1, last))
        for start in range(first, last + 1, size)
    ]


def read_range(
    conn: ConnectionOptions, part: InputPartition, batch: int
) -> Iterator[tuple[int, int, bytes]]:
    """The rows of one partition, read ``batch`` entries per request."""
    if not isinstance(part, LedgerRange):  # Spark's placeholder when there is nothing to read
        return
    client = connect(conn, "read")
    try:
        view = LedgerView(client, part.ledger_id, conn.password)
        for start in range(part.first, part.last + 1, batch):
            for entry in view.read(start, min(start + batch - 1, part.last)):
                yield (part.ledger_id, entry.entry_id, entry.data)
    finally:
        client.close()


# -- batch read ---------------------------------------------------------------------------


class EmbedlogBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        out: list[InputPartition] = []
        client = connect(opts.conn, "plan")
        try:
            if opts.ledgers is None:
                from embedlog.errors import NoSuchLedgerError

                for lid in sorted(client.list_ledgers()):
                    try:
                        out.extend(self._plan(client, lid))
                    except NoSuchLedgerError:
                        continue  # deleted since it was listed
            else:
                for lid in opts.ledgers:
                    out.extend(self._plan(client, lid))
        finally:
            client.close()
        return out

    def _plan(self, client: Client, ledger_id: int) -> list[LedgerRange]:
        opts = self.opts
        view = LedgerView(client, ledger_id, opts.conn.password)
        if opts.recover and not view.unbounded and not view.is_closed:
            # Close it at its true end first (fencing its writer).
            client.open_ledger(ledger_id, password=opts.conn.password, recover=True)
            view = LedgerView(client, ledger_id, opts.conn.password)
        # A closed ledger ends at its last entry; an open one at the LAC seen now.
        return split_range(
            ledger_id, view.first_entry, view.last_add_confirmed, opts.entries_per_partition
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, bytes]]:
        return read_range(self.opts.conn, partition, self.opts.read_batch)


# -- streaming read -----------------------------------------------------------------------


def _read_limit_rows(limit: Any) -> int | None:
    """The row cap of a ReadMaxRows limit (PySpark >= 4.2), else None."""
    rows = getattr(limit, "max_rows", None)
    if rows is None:
        rows = getattr(limit, "maxRows", None)
    return int(rows) if rows is not None else None


try:  # PySpark >= 4.2: read limits and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    READ_LIMITS = True
    _STREAM_BASES: tuple[type, ...] = (DataSourceStreamReader, SupportsTriggerAvailableNow)
except ImportError:  # PySpark 4.0/4.1: no limits; Spark wraps the source for AvailableNow
    READ_LIMITS = False
    _STREAM_BASES = (DataSourceStreamReader,)


def _pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


class EmbedlogStreamReader(*_STREAM_BASES):  # type: ignore[misc]
    """Follows ledgers as their writers add entries (each ledger's LAC), until they close.

    Offsets are ``{"<ledger id>": <next entry id to read>}``.
    """

    def __init__(self, opts: StreamOptions) -> None:
        self.opts = opts
        self._client: Client | None = None
        self._views: dict[int, LedgerView] = {}
        self._latest: dict[str, int] | None = None
        self._available_now: dict[str, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _views={})
        return state

    def _view(self, ledger_id: int) -> LedgerView:
        view = self._views.get(ledger_id)
        if view is None:
            if self._client is None:
                self._client = connect(self.opts.conn, "stream")
            view = LedgerView(self._client, ledger_id, self.opts.conn.password)
            self._views[ledger_id] = view
        return view

    def _available(self) -> dict[str, int]:
        """Each ledger's next entry id past what its bookies confirm now."""
        out = {str(lid): self._view(lid).refresh() + 1 for lid in self.opts.ledgers}
        self._latest = out
        return out

    def initialOffset(self) -> dict[str, int]:
        starting = self.opts.starting
        if isinstance(starting, dict):
            return dict(starting)
        if starting == "latest":
            return self._available()
        return {str(lid): self._view(lid).first_entry for lid in self.opts.ledgers}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict[str, int]:
        # PySpark 4.0/4.1 call latestOffset(); 4.2+ pass the batch's start and a read limit.
        available = self._available()
        if self._available_now is not None:  # Trigger.AvailableNow: no further than its start
            available = {k: min(v, self._available_now.get(k, v)) for k, v in available.items()}
        if start is None:
            return available
        cap = _read_limit_rows(limit)
        out = {}
        for lid in self.opts.ledgers:
            key = str(lid)
            begin = int(start.get(key, 0))
            take = max(0, available[key] - begin)
            if cap is not None:
                take = min(take, cap)
                cap -= take
            out[key] = begin + take
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what is confirmed now, in as many batches as it takes."""
        self._available_now = self._available()

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.opts.max_entries_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_entries_per_trigger)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        for lid in self.opts.ledgers:
            key = str(lid)
            first = int(start.get(key, 0)) if start else 0
            last = int(end.get(key, first)) - 1
            out.extend(split_range(lid, first, last, self.opts.entries_per_partition))
        return out

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, bytes]]:
        return read_range(self.opts.conn, partition, self.opts.read_batch)

    def commit(self, end: dict) -> None:
        """Nothing to release: entries stay in the ledger until it is deleted."""

    def stop(self) -> None:
        client, self._client = self._client, None
        self._views.clear()
        if client is not None:
            client.close()


# -- batch write --------------------------------------------------------------------------


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


def _task_ids() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return -1, -1
    return ctx.partitionId(), ctx.attemptNumber()


class EmbedlogWriter(DataSourceWriter):
    """Each partition's ``data`` column, in order, becomes one new closed ledger."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
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

    def _payload(self, row: Any) -> bytes:
        value = row[self.data_index]
        if value is None:
            raise ValueError("column 'data' is null: an entry needs bytes")
        if self.data_is_string:
            return str(value).encode("utf-8")
        return bytes(value)

    def write(self, iterator: Iterator[Any]) -> EmbedlogCommitMessage:
        from embedlog import DigestType

        opts = self.opts
        partition_id, attempt = _task_ids()
        rows = iter(iterator)
        first = next(rows, None)
        if first is None:
            return EmbedlogCommitMessage(partition_id, -1, 0)
        client = connect(opts.conn, "write")
        try:
            wh = client.create_ledger(
                opts.ensemble_size,
                opts.write_quorum,
                opts.ack_quorum,
                digest=DigestType[opts.digest],
                password=opts.conn.password,
                custom_metadata=self._custom_metadata(partition_id, attempt),
            )
            try:
                pending: deque[Any] = deque()
                count = 0
                for row in _chain(first, rows):
                    pending.append(wh.add_async(self._payload(row)))
                    count += 1
                    if len(pending) >= opts.window:
                        pending.popleft().result()
                while pending:
                    pending.popleft().result()
                wh.close()
            except BaseException:
                # This attempt failed: its ledger must not look like data. (The driver's
                # abort() only hears of the tasks that succeeded.)
                _delete_quietly(client, wh.ledger_id)
                raise
            return EmbedlogCommitMessage(partition_id, wh.ledger_id, count)
        finally:
            client.close()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job succeeded: keep the ledgers of the committed tasks, delete the others.

        Others: ledgers carrying this write's id that no commit message names, i.e. those
        of task attempts Spark discarded (speculative duplicates, attempts killed after
        they closed their ledger). Keeping them would duplicate rows.
        """
        kept = _made(messages)
        client = connect(self.opts.conn, "commit")
        try:
            for lid in self._ledgers_of_this_write(client):
                if lid not in kept:
                    _delete_quietly(client, lid)
        finally:
            client.close()
        log.info("embedlog write %s committed ledgers %s", self.write_id, sorted(kept))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed: delete every ledger this write made."""
        client = connect(self.opts.conn, "abort")
        try:
            for lid in _made(messages) | set(self._ledgers_of_this_write(client)):
                _delete_quietly(client, lid)
        finally:
            client.close()

    def _ledgers_of_this_write(self, client: Client) -> list[int]:
        return ledgers_with(client, "spark.writeId", self.write_id.encode())


def ledgers_with(client: Client, key: str, value: bytes) -> list[int]:
    """Ids, ascending, of the ledgers whose custom metadata holds ``key`` = ``value``.

    One metadata read per ledger in the cluster; ledgers deleted meanwhile are skipped.
    ``ledgers_with(client, "spark.writeTag", tag.encode())`` finds what a tagged write made.
    """
    from embedlog.errors import NoSuchLedgerError

    out = []
    for lid in client.list_ledgers():
        try:
            md = client.ledger_metadata(lid)
        except NoSuchLedgerError:
            continue
        if md.custom_metadata.get(key) == value:
            out.append(lid)
    return sorted(out)


def _made(messages: list[WriterCommitMessage | None]) -> set[int]:
    return {
        m.ledger_id for m in messages if isinstance(m, EmbedlogCommitMessage) and m.ledger_id >= 0
    }


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _delete_quietly(client: Client, ledger_id: int) -> None:
    from embedlog.errors import BKError, NoSuchLedgerError

    try:
        client.delete_ledger(ledger_id)
    except NoSuchLedgerError:
        pass
    except (BKError, OSError) as exc:
        log.warning("could not delete ledger %d of a failed write: %s", ledger_id, exc)


# -- the data source ----------------------------------------------------------------------


class EmbedlogDataSource(DataSource):
    """``spark.read/readStream/write.format("embedlog")``; see docs/spark.md."""

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

    def writer(self, schema: StructType, overwrite: bool) -> EmbedlogWriter:
        if overwrite:
            raise OptionError(
                "embedlog ledgers are append-only: use mode('append') (each write makes new "
                "ledgers; delete old ones with the embedlog client)"
            )
        return EmbedlogWriter(WriteOptions.parse(self.options), schema)


def register(spark: Any) -> None:
    """Register the "embedlog" data source with ``spark`` (a SparkSession)."""
    spark.dataSource.register(EmbedlogDataSource)
