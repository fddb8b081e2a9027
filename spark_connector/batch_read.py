"""Batch reads: ``spark.read.format("embedlog")``, one partition per entry range."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition

from spark_connector.options import OptionError, ReadOptions, resolve_offsets
from spark_connector.reading import (
    LedgerRange,
    LedgerView,
    Row,
    connect,
    read_range,
    resolve,
    split_range,
    unique_ids,
)

if TYPE_CHECKING:
    from embedlog.client import Client


def read_bounds(
    ledger_id: int,
    stored: tuple[int, int],
    starting: dict[str, int] | None,
    ending: dict[str, int] | None,
) -> tuple[int, int]:
    """(first, last) entry ids to read of ``ledger_id``, whose entries ``stored`` =
    (trim point, last confirmed) are there; offsets are next-entry ids (ending exclusive).

    A starting offset below the trim point is kept (the read then skips or fails, as
    failOnDataLoss says); an ending offset past what is confirmed is refused: the rows
    asked for do not exist yet.
    """
    low, lac = stored
    first = low if starting is None else starting[str(ledger_id)]
    if ending is None:
        return first, lac
    end = ending[str(ledger_id)]
    if end - 1 > lac:
        raise OptionError(
            f"endingOffsets asks for ledger {ledger_id} up to entry {end - 1}, but its last "
            f"confirmed entry is {lac}"
        )
    return first, end - 1


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
                        out.extend(self._plan(client, lid, None, None))
                    except NoSuchLedgerError:
                        continue  # deleted since it was listed
            else:
                ids = resolve(client, opts.ledgers)
                starting = (
                    resolve_offsets(opts.starting, ids, "startingOffsets")
                    if isinstance(opts.starting, dict)
                    else None
                )
                ending = (
                    resolve_offsets(opts.ending, ids, "endingOffsets")
                    if isinstance(opts.ending, dict)
                    else None
                )
                for lid in unique_ids(ids):
                    out.extend(self._plan(client, lid, starting, ending))
        finally:
            client.close()
        return out

    def _plan(
        self,
        client: Client,
        ledger_id: int,
        starting: dict[str, int] | None,
        ending: dict[str, int] | None,
    ) -> list[LedgerRange]:
        opts = self.opts
        view = LedgerView(client, ledger_id, opts.conn.password)
        if opts.recover and not view.unbounded and not view.is_closed:
            # Close it at its true end first (fencing its writer).
            client.open_ledger(ledger_id, password=opts.conn.password, recover=True)
            view = LedgerView(client, ledger_id, opts.conn.password)
        lac = view.last_add_confirmed
        if opts.starting_ms is not None:
            starting = {str(ledger_id): view.entry_id_at(opts.starting_ms, "startingTimestamp")}
        if opts.ending_ms is not None:
            # Not past the LAC seen above: the search may have seen a later one.
            end = view.entry_id_at(opts.ending_ms, "endingTimestamp")
            ending = {str(ledger_id): min(end, lac + 1)}
        # A closed ledger ends at its last entry; an open one at the LAC seen now.
        first, last = read_bounds(ledger_id, (view.first_entry, lac), starting, ending)
        return split_range(ledger_id, first, last, opts.entries_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Row]:
        opts = self.opts
        return read_range(opts.conn, partition, opts.read_batch, opts.fail_on_data_loss)
