"""What every direction shares: connecting from a Spark worker, opening a ledger the way
the connector reads it, resolving stream names, and reading one partition's rows.

Every piece runs in a Spark Python worker, a process other than the application's, so no
client crosses a pickle: each step connects with ``embedlog.connect(metadataUri)`` and
closes again, and only parsed options and partitions (plain numbers) travel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from spark_connector.options import ConnectionOptions, LedgerRef

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.ledger.entries import Entry
    from embedlog.ledger.handles import ReadHandle
    from embedlog.unbounded.ledger import UnboundedLedger


class DataLossError(RuntimeError):
    """Entries a query was to read were trimmed first (failOnDataLoss=true)."""


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


def resolve(client: Client, refs: Sequence[LedgerRef]) -> dict[LedgerRef, int]:
    """Each ref (a ledger id or a stream name) -> its ledger id; an unknown name raises
    NoSuchLedgerInMetadataError. Ids are taken as they are (a missing one fails later,
    where it is opened)."""
    return {
        ref: ref if isinstance(ref, int) else client.runtime.run(client.stream_id_aio(ref))
        for ref in refs
    }


def unique_ids(ids: dict[LedgerRef, int]) -> tuple[int, ...]:
    """The ledger ids in the order given, once each (a name and its id may both be given)."""
    return tuple(dict.fromkeys(ids.values()))


class LedgerView:
    """One ledger as the connector reads it: bounded, or unbounded (followed, never taken over).

    Both are opened without disturbing a live writer. An unbounded ledger's no-op
    entries are left out (its ids keep their gaps).
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

    def entry_id_at(self, ms: int, option: str) -> int:
        """The first entry whose record's timestamp is at or after ``ms`` (milliseconds
        since the epoch; LAC + 1 when none is): ``ul.entry_id_at``, for option ``option``."""
        if not self.unbounded:
            from spark_connector.options import OptionError

            raise OptionError(
                f"option {option!r}: ledger {self.ledger_id} is a bounded ledger, whose "
                "entries carry no timestamp; name only streams, or use startingOffsets/"
                "endingOffsets"
            )
        return int(self._handle.entry_id_at(ms / 1000))  # type: ignore[union-attr]

    def refresh(self) -> int:
        """The LAC the bookies confirm now (a closed ledger: its last entry); for an
        unbounded ledger also its trim point as the metadata says now."""
        if self.is_closed:
            return self.last_add_confirmed
        return int(self._handle.read_last_add_confirmed())

    def read(self, first: int, last: int, fail_on_data_loss: bool) -> list[Entry]:
        """Entries first..last; those trimmed first are skipped, or raise DataLossError."""
        from embedlog.errors import NoSuchEntryError

        for _ in range(3):  # a trim between reading the trim point and the entries: again
            start = checked_start(self.ledger_id, first, self.first_entry, fail_on_data_loss)
            if start > last:
                return []
            try:
                return self._handle.read(start, last)
            except NoSuchEntryError:
                if not self.unbounded:
                    raise
                self.refresh()  # re-reads the metadata, and with it the trim point
        start = checked_start(self.ledger_id, first, self.first_entry, fail_on_data_loss)
        return self._handle.read(start, last) if start <= last else []


def checked_start(ledger_id: int, first: int, stored_from: int, fail_on_data_loss: bool) -> int:
    """Where to read from when ``first`` is wanted and entries from ``stored_from`` on
    are stored: Kafka's convention, failing the query unless failOnDataLoss=false."""
    if first >= stored_from:
        return first
    if fail_on_data_loss:
        raise DataLossError(
            f"ledger {ledger_id}: entries {first}..{stored_from - 1} were trimmed before "
            "the query read them (retention or trim). Set option failOnDataLoss=false to "
            "skip trimmed entries instead of failing"
        )
    return stored_from


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
    conn: ConnectionOptions, part: InputPartition, batch: int, fail_on_data_loss: bool = True
) -> Iterator[Row]:
    """The rows of one partition, read ``batch`` entries per request."""
    if not isinstance(part, LedgerRange):  # Spark's placeholder when there is nothing to read
        return
    client = connect(conn, "read")
    try:
        view = LedgerView(client, part.ledger_id, conn.password)
        for start in range(part.first, part.last + 1, batch):
            end = min(start + batch - 1, part.last)
            for entry in view.read(start, end, fail_on_data_loss):
                yield row_of(entry)
    finally:
        client.close()


# ledger_id, entry_id, data, timestamp, key, headers: options.SCHEMA
Row = tuple[int, int, bytes, datetime | None, bytes | None, dict[str, bytes]]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def row_of(entry: Entry) -> Row:
    """An entry as a row of SCHEMA; an entry without a record (bounded ledgers, stream
    entries from before records) has no timestamp, no key and no headers."""
    seconds = entry.timestamp
    if seconds is None:
        return (entry.ledger_id, entry.entry_id, entry.data, None, entry.key, {})
    # Through whole microseconds (what the record keeps), not a float's rounding.
    when = _EPOCH + timedelta(microseconds=round(seconds * 1_000_000))
    headers = dict(entry.headers) if entry.headers else {}
    return (entry.ledger_id, entry.entry_id, entry.data, when, entry.key, headers)
