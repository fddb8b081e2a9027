"""The sink record: what a commit into a stream appends, and the decisions made from it.

A stream has one writer, so the connector's tasks write their rows into temporary
ledgers and the driver's commit appends them to the stream, in partition order, as the
stream's writer (it takes the stream over). Before its first append the commit stores a
``SinkRecord`` beside the stream (``embedlog.metadata.sinks``, compare-and-swap): which
temporary ledgers, how many rows, and from which entry id in which term it appends
them. After its last append is acknowledged it marks the record done.

That record plus the stream decide, after any crash, how many of the rows are in:
a takeover fixes the stream's end, the entries of one term form a prefix of what that
term's writer sent, and every entry carries its writer's term. So the rows of the
record's term found from its ``first`` id on are exactly the rows that landed; the next
commit appends the rest (``resumed``), and a streaming batch whose id the record holds
is not appended again when Spark replays it (``decide``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from attrs import evolve, frozen

NO_BATCH = -1  # a batch (not streaming) write: Spark never replays one


@frozen
class SinkRecord:
    batch: int  # the streaming batch id, or NO_BATCH
    write_id: str
    temps: tuple[int, ...]  # the temporary ledgers, in partition order
    total: int  # rows in them
    skip: int  # rows known to be in the stream before ``first``
    first: int  # the entry id where row ``skip`` was to go
    term: int  # the term that appends from ``first``
    done: bool  # every row is in the stream

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "batch": self.batch,
                "writeId": self.write_id,
                "temps": list(self.temps),
                "total": self.total,
                "skip": self.skip,
                "first": self.first,
                "term": self.term,
                "done": self.done,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> SinkRecord:
        d = json.loads(raw)
        return cls(
            batch=int(d["batch"]),
            write_id=str(d["writeId"]),
            temps=tuple(int(t) for t in d["temps"]),
            total=int(d["total"]),
            skip=int(d["skip"]),
            first=int(d["first"]),
            term=int(d["term"]),
            done=bool(d["done"]),
        )


def sink_name(query_id: str | None, write_id: str) -> str:
    """Whose record: a streaming query's (its id survives restarts from its checkpoint,
    so a replayed batch finds the record of its first run), else the one write's."""
    return f"query-{query_id}" if query_id else f"write-{write_id}"


def decide(record: SinkRecord | None, batch: int) -> Literal["append", "skip"]:
    """Whether a commit of ``batch`` appends, given its sink's record.

    A streaming batch at or below the recorded one was committed before (Spark replays
    the last batch after a failure, and batch ids only grow): skip. An unfinished record
    is finished before this is asked, so the recorded batch is wholly in the stream.
    """
    if batch != NO_BATCH and record is not None and record.batch >= batch:
        return "skip"
    return "append"


def landed(record: SinkRecord, entries: Sequence[tuple[int, int | None]]) -> int:
    """How many rows appended from ``record.first`` on are in the stream.

    ``entries``: (entry id, term) of the visible entries from ``record.first`` on, in id
    order. The record's term appended consecutive ids, and a takeover keeps a prefix of
    them; whatever follows (a later term's no-op or entries) is not the record's.
    """
    count = 0
    for entry_id, term in entries:
        if entry_id != record.first + count or term != record.term:
            break
        count += 1
    return min(count, record.total - record.skip)


def count_landed(
    record: SinkRecord,
    kept_from: int,
    entries: Sequence[tuple[int, int | None]],
    taker_term: int,
    taker_start: int,
) -> int | None:
    """How many rows appended from ``record.first`` on are in the stream, counted by a
    commit that took the stream over; None if that cannot be known.

    ``kept_from``: the stream's first kept entry (retention or ``trim`` dropped those
    below); ``entries``: (entry id, term) of the visible entries from
    ``max(record.first, kept_from)`` on, in id order; ``taker_term``, ``taker_start``:
    the asking commit's term and its first entry (the no-op its takeover wrote).

    The record's pin keeps its entries, so they are normally all there. When retention
    passed it anyway (``retention_overrides_cursors``): an entry of the record's term
    above the trim point means every id between was that term's too (it appended
    consecutive ids); and when no term came between the record's and the asker's, the
    record's term ended right below the asker's no-op, since the asker's takeover fixed
    that end. Otherwise nothing left in the stream tells.
    """
    if kept_from <= record.first:
        return landed(record, entries)
    remaining = record.total - record.skip
    if entries and entries[0] == (kept_from, record.term):
        count = kept_from - record.first
        for entry_id, term in entries:
            if entry_id != record.first + count or term != record.term:
                break
            count += 1
        return min(count, remaining)
    if taker_term == record.term + 1:
        return min(max(0, taker_start - record.first), remaining)
    return None


def resumed(record: SinkRecord, count: int, first: int, term: int) -> SinkRecord:
    """The record of a commit that found ``count`` more of its rows in the stream and
    appends the rest from ``first`` in ``term``."""
    skip = record.skip + count
    return evolve(record, skip=skip, first=first, term=term, done=skip >= record.total)


def protected(records: Sequence[SinkRecord]) -> set[int]:
    """Temporary ledgers that must stay: those of records not yet done (a later commit
    appends what is missing from them)."""
    return {t for r in records if not r.done for t in r.temps}
