"""Streaming reads: ``spark.readStream.format("embedlog")`` follows ledgers by their LAC."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from spark_connector.options import StreamOptions, resolve_offsets
from spark_connector.reading import (
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


class EmbedlogStreamReader(*_STREAM_BASES):  # type: ignore[misc]
    """Follows ledgers as their writers add entries (each ledger's LAC), until they close.

    Offsets are ``{"<ledger id>": <next entry id to read>}`` (stream names given as
    options are resolved to ids when the query starts, so a checkpoint names ids).
    """

    def __init__(self, opts: StreamOptions) -> None:
        self.opts = opts
        self._client: Client | None = None
        self._views: dict[int, LedgerView] = {}
        self._ids: dict[Any, int] | None = None
        self._latest: dict[str, int] | None = None
        self._available_now: dict[str, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _views={})
        return state

    def _connected(self) -> Client:
        if self._client is None:
            self._client = connect(self.opts.conn, "stream")
        return self._client

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        if self._ids is None:
            self._ids = resolve(self._connected(), self.opts.ledgers)
        return unique_ids(self._ids)

    def _view(self, ledger_id: int) -> LedgerView:
        view = self._views.get(ledger_id)
        if view is None:
            view = LedgerView(self._connected(), ledger_id, self.opts.conn.password)
            self._views[ledger_id] = view
        return view

    def _available(self) -> dict[str, int]:
        """Each ledger's next entry id past what its bookies confirm now."""
        out = {str(lid): self._view(lid).refresh() + 1 for lid in self.ledger_ids}
        self._latest = out
        return out

    def initialOffset(self) -> dict[str, int]:
        starting = self.opts.starting
        ids = self.ledger_ids
        if self.opts.starting_ms is not None:
            ms = self.opts.starting_ms
            return {str(lid): self._view(lid).entry_id_at(ms, "startingTimestamp") for lid in ids}
        if isinstance(starting, dict):
            assert self._ids is not None
            return resolve_offsets(starting, self._ids, "startingOffsets")
        if starting == "latest":
            return self._available()
        return {str(lid): self._view(lid).first_entry for lid in ids}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict[str, int]:
        # PySpark 4.0/4.1 call latestOffset(); 4.2+ pass the batch's start and a read limit.
        available = self._available()
        if self._available_now is not None:  # Trigger.AvailableNow: no further than its start
            available = {k: min(v, self._available_now.get(k, v)) for k, v in available.items()}
        if start is None:
            return available
        cap = _read_limit_rows(limit)
        out = {}
        for lid in self.ledger_ids:
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
        for key in end:  # the checkpoint's ids: a batch replayed after a restart reads them
            lid = int(key)
            first = int(start.get(key, 0)) if start else 0
            last = int(end[key]) - 1
            out.extend(split_range(lid, first, last, self.opts.entries_per_partition))
        return out

    def read(self, partition: InputPartition) -> Iterator[Row]:
        opts = self.opts
        return read_range(opts.conn, partition, opts.read_batch, opts.fail_on_data_loss)

    def commit(self, end: dict) -> None:
        """Nothing to release: entries stay in the ledger until it is deleted."""

    def stop(self) -> None:
        client, self._client = self._client, None
        self._views.clear()
        if client is not None:
            client.close()
