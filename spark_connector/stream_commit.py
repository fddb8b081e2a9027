"""The driver's side of a write into a stream: take the stream over, finish what crashed
commits left, append the temporary ledgers, record it, delete them (exactly_once.py says
why this is exactly once; pins.py how a commit keeps retention off its rows until done).

Temporary ledgers carry, in their custom metadata, ``spark.temporaryFor`` (the stream's
ledger id), ``spark.writeId``, ``spark.sink`` and ``spark.batchId``, so the ones of tasks
and drivers that died can be found (``temporary_ledgers``) and deleted.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from spark_connector import pins
from spark_connector.exactly_once import (
    NO_BATCH,
    SinkRecord,
    count_landed,
    decide,
    protected,
    resumed,
)
from spark_connector.ledger_write import custom_metadata_of_all, delete_quietly
from spark_connector.options import LedgerRef, WriteOptions
from spark_connector.records import NONE, RECORD_ROWS, ROW_FORMAT, Fields, unpack

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.unbounded.ledger import UnboundedLedger

log = logging.getLogger("spark_connector")

TEMPORARY_FOR = "spark.temporaryFor"


class StreamCommitError(RuntimeError):
    """A commit into a stream could not finish; what it appended is finished by the
    next commit into that stream (nothing is lost or appended twice)."""


def temporary_metadata(
    stream_id: int, write_id: str, sink: str, batch: int, partition: int, attempt: int
) -> dict[str, bytes]:
    return {
        TEMPORARY_FOR: str(stream_id).encode(),
        "spark.writeId": write_id.encode(),
        "spark.sink": sink.encode(),
        "spark.batchId": str(batch).encode(),
        "spark.partitionId": str(partition).encode(),
        "spark.attempt": str(attempt).encode(),
    }


def temporary_ledgers(client: Client, stream_id: int) -> dict[int, dict[str, str]]:
    """The temporary ledgers made for writes into ``stream_id``: id -> their spark.* tags.

    One metadata read per ledger in the cluster.
    """
    want = str(stream_id).encode()
    return {
        lid: {k: v.decode("utf-8", "replace") for k, v in meta.items() if k.startswith("spark.")}
        for lid, meta in custom_metadata_of_all(client)
        if meta.get(TEMPORARY_FOR) == want
    }


def forget_sink(client: Client, stream_id: int, sink: str, *, password: bytes = b"") -> None:
    """Drop sink ``sink``'s record of stream ``stream_id``, its pin and its temporary
    ledgers: the way on after a commit that cannot be finished (StreamCommitError says
    when). A batch Spark replays for that sink is then appended again, whole."""
    for name, (_, version) in _records(client, stream_id).items():
        if name == sink:
            _drop_record(client, stream_id, sink, version)
    ul = client.open_unbounded(stream_id, password=password, takeover=False)
    try:
        pins.unpin(ul, sink)
    finally:
        ul.close()
    for lid, tags in temporary_ledgers(client, stream_id).items():
        if tags.get("spark.sink") == sink:
            delete_quietly(client, lid)


def stream_id_of(client: Client, target: LedgerRef) -> int:
    """The ledger id of the target stream, which must be unbounded."""
    from spark_connector.options import OptionError

    lid = target if isinstance(target, int) else client.runtime.run(client.stream_id_aio(target))
    if not client.ledger_metadata(lid).unbounded:
        raise OptionError(
            f"ledger {lid} is not a stream (an unbounded ledger): a write goes into a stream; "
            "leave out 'stream'/'ledger' to write new ledgers"
        )
    return lid


def _records(client: Client, stream_id: int) -> dict[str, tuple[SinkRecord, int]]:
    from embedlog.metadata import sinks

    raw = client.runtime.run(client.ctx.meta(sinks.read_all, client.ctx.metadata.store, stream_id))
    return {sink: (SinkRecord.from_bytes(data), version) for sink, (data, version) in raw.items()}


def _store(
    client: Client, stream_id: int, sink: str, record: SinkRecord, version: int | None
) -> int:
    """Write ``record`` by compare-and-swap; losing it means another commit took over."""
    from embedlog.metadata import sinks
    from embedlog.metadata.store import MetadataVersionError, NodeExistsError, NoNodeError

    try:
        return int(
            client.runtime.run(
                client.ctx.meta(
                    sinks.write,
                    client.ctx.metadata.store,
                    stream_id,
                    sink,
                    record.to_bytes(),
                    version,
                )
            )
        )
    except (MetadataVersionError, NodeExistsError, NoNodeError) as exc:
        raise StreamCommitError(
            f"the record of sink {sink!r} of stream {stream_id} changed under this commit "
            f"(another commit into the stream took it over): {exc}"
        ) from exc


def _drop_record(client: Client, stream_id: int, sink: str, version: int) -> None:
    from embedlog.metadata import sinks
    from embedlog.metadata.store import MetadataVersionError, NoNodeError

    path = f"{sinks.SINKS}/{stream_id:020d}/{sink}"
    try:
        client.runtime.run(client.ctx.meta(client.ctx.metadata.store.delete, path, version))
    except (MetadataVersionError, NoNodeError):
        pass


class StreamCommit:
    """One commit into one stream, made by the driver (a process Spark starts for it)."""

    def __init__(self, client: Client, opts: WriteOptions, stream_id: int) -> None:
        self.client = client
        self.opts = opts
        self.stream_id = stream_id

    def commit(self, sink: str, batch: int, write_id: str, temps: list[tuple[int, int]]) -> str:
        """Append ``temps`` ((ledger id, rows) in partition order) unless ``batch`` was;
        returns "append" or "skip". Deletes the temporary ledgers either way."""
        ul = self.client.open_unbounded(
            self.stream_id, password=self.opts.conn.password, takeover=True
        )
        try:
            records = self.finish_unfinished(ul)
            found = records.get(sink)
            record = found[0] if found else None
            if decide(record, batch) == "skip":
                self.delete(t for t, _ in temps)
                log.info(
                    "stream %d: batch %d of %s was committed before", self.stream_id, batch, sink
                )
                return "skip"
            todo = [(t, n) for t, n in temps if n > 0]
            new = SinkRecord(
                batch=batch,
                write_id=write_id,
                temps=tuple(t for t, _ in todo),
                total=sum(n for _, n in todo),
                skip=0,
                first=ul.last_add_confirmed + 1,
                term=ul.term,
                done=not todo,
            )
            if todo:
                # Pinned before the record is stored: a driver that dies between the two
                # leaves a pin without a record, which the next commit drops
                # (``finish_unfinished``), never a record whose rows retention may trim
                # before a replay counts them. Pinned again after: another commit's
                # cleanup may have taken the first pin for a stale one (pins.py).
                pins.pin(ul, sink, new.first)
            version = _store(self.client, self.stream_id, sink, new, found[1] if found else None)
            if todo:
                pins.pin(ul, sink, new.first)
                self.append(ul, new)
                version = _store(
                    self.client,
                    self.stream_id,
                    sink,
                    resumed(new, new.total - new.skip, new.first, new.term),
                    version,
                )
                pins.unpin(ul, sink)
            self.delete(t for t, _ in temps)
            if batch == NO_BATCH:
                _drop_record(self.client, self.stream_id, sink, version)
            return "append"
        finally:
            ul.close()

    def finish_unfinished(self, ul: UnboundedLedger) -> dict[str, tuple[SinkRecord, int]]:
        """Finish every record left undone by a commit that died (or was displaced by
        this one's takeover); returns the records as they are then. ``ul`` was just
        taken over: nothing is appended in its term yet."""
        taker_term, taker_start = ul.term, ul.last_add_confirmed
        pins.drop_stale(
            ul, lambda: {s: r for s, (r, _) in _records(self.client, ul.ledger_id).items()}
        )
        records = _records(self.client, self.stream_id)
        # Counted before anything is appended: this term's appends let retention trim.
        counts = {
            sink: self.count(ul, sink, record, taker_term, taker_start)
            for sink, (record, _) in records.items()
            if not record.done
        }
        for sink, (record, version) in sorted(records.items()):
            if record.done:
                if record.batch == NO_BATCH:
                    self.delete(record.temps)
                    _drop_record(self.client, self.stream_id, sink, version)
                continue
            now = resumed(record, counts[sink], ul.last_add_confirmed + 1, ul.term)
            log.warning(
                "stream %d: finishing the commit of sink %s (batch %d) that stopped after "
                "%d of %d rows",
                self.stream_id,
                sink,
                record.batch,
                now.skip,
                record.total,
            )
            version = _store(self.client, self.stream_id, sink, now, version)
            if not now.done:
                pins.pin(ul, sink, now.first)
                self.append(ul, now)
                now = resumed(now, now.total - now.skip, now.first, now.term)
                version = _store(self.client, self.stream_id, sink, now, version)
            pins.unpin(ul, sink)
            records[sink] = (now, version)
            self.delete(record.temps)
        return records

    def count(
        self, ul: UnboundedLedger, sink: str, record: SinkRecord, taker_term: int, taker_start: int
    ) -> int:
        """How many rows of ``record`` from its ``first`` on are in the stream."""
        from embedlog.errors import NoSuchEntryError
        from embedlog.unbounded import follow, layout

        last = min(taker_start, record.first + (record.total - record.skip) - 1)
        for _ in range(5):  # a trim (``trim``, not retention: no writer but us) may race
            md = self.client.ledger_metadata(self.stream_id)
            kept_from = layout.first_entry(md)
            start = max(record.first, kept_from)
            try:
                entries = (
                    ul.runtime.run(follow.read_terms(ul.ctx, md, ul.digester, start, last))
                    if start <= last
                    else []
                )
            except NoSuchEntryError:
                continue
            count = count_landed(record, kept_from, entries, taker_term, taker_start)
            if count is None:
                raise StreamCommitError(_uncountable(self.stream_id, sink, record, kept_from))
            return count
        raise StreamCommitError(
            f"stream {self.stream_id}: entries kept being trimmed while the commit of sink "
            f"{sink} was counted; try again"
        )

    def append(self, ul: UnboundedLedger, record: SinkRecord) -> None:
        """Append rows ``record.skip..`` of the temporary ledgers from ``record.first``,
        and wait until every one is acknowledged."""
        pending: deque[Any] = deque()
        expected = record.first
        for data, fields in self.rows(record.temps, record.skip):
            pending.append(
                ul.append_async(
                    data, key=fields.key, headers=fields.headers, timestamp=fields.timestamp
                )
            )
            if len(pending) >= self.opts.window:
                expected = _check(pending.popleft().result(), expected)
        while pending:
            expected = _check(pending.popleft().result(), expected)

    def rows(self, temps: Iterable[int], skip: int) -> Iterable[tuple[bytes, Fields]]:
        """The rows of ``temps`` in order, the first ``skip`` left out: (data, what the
        record carries besides)."""
        password = self.opts.conn.password
        for lid in temps:
            rh = self.client.open_ledger(lid, password=password, recover=False)
            last = rh.last_add_confirmed
            if skip > last:
                skip -= last + 1
                continue
            packed = rh.metadata.custom_metadata.get(ROW_FORMAT) == RECORD_ROWS
            for entry in rh.entries(skip, last):
                yield unpack(entry.data) if packed else (entry.data, NONE)
            skip = 0

    def delete(self, temps: Iterable[int]) -> None:
        for lid in temps:
            delete_quietly(self.client, lid)

    def clean(
        self,
        keep: set[int],
        *,
        write_id: str | None = None,
        sink: str | None = None,
        upto_batch: int | None = None,
    ) -> None:
        """Delete temporary ledgers of this stream matching ``write_id`` (or ``sink`` with
        a batch id at most ``upto_batch``), except ``keep`` and those an unfinished record
        still needs."""
        needed = keep | protected([r for r, _ in _records(self.client, self.stream_id).values()])
        for lid, tags in temporary_ledgers(self.client, self.stream_id).items():
            if lid in needed:
                continue
            mine = write_id is not None and tags.get("spark.writeId") == write_id
            earlier = (
                sink is not None
                and upto_batch is not None
                and tags.get("spark.sink") == sink
                and int(tags.get("spark.batchId", "-1")) <= upto_batch
            )
            if mine or earlier:
                delete_quietly(self.client, lid)


def _uncountable(stream_id: int, sink: str, record: SinkRecord, kept_from: int) -> str:
    return (
        f"stream {stream_id}: cannot tell how many rows of sink {sink}'s batch {record.batch} "
        f"are in the stream: its commit appended them from entry {record.first} in term "
        f"{record.term}, entries below {kept_from} were trimmed past its cursor "
        f"{pins.pin_name(sink)!r} (the stream has retention_overrides_cursors=True, or the "
        "cursor was deleted), and another term took the stream over since. To let commits "
        f"go on, drop the record: spark_connector.forget_sink(client, {stream_id}, {sink!r}) "
        "(Spark's replay then appends that batch whole: some of its rows may be there twice)"
    )


def _check(entry_id: int, expected: int) -> int:
    # The commit's term appends consecutive ids from the record's first: the record's
    # arithmetic (``landed``) relies on it, so anything else stops the commit.
    if entry_id != expected:
        raise StreamCommitError(
            f"an append went to entry {entry_id}, not {expected}: the stream had another "
            "writer during the commit"
        )
    return expected + 1
