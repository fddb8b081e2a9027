"""What a bookie's refusal of an add means for the writer, as a pure function.

An EOK of a counted term from a bookie that still holds the entry's slot in the
metadata is an ack (the add pipeline, pipeline.py, counts it); a refusal fails the
writer (fenced, another term, wrong password, the ledger deleted) or replaces the
bookie; no answer (a timeout, a lost connection) is an unknown outcome, and the bookie
is replaced (pipeline.py, ensemble_change.py). ``AnswerFor`` and ``BatchAnswerFor``
route the answers to the writer.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Protocol

from embedlog.errors import (
    BKError,
    InvalidTermError,
    LedgerDeletedError,
    LedgerFencedError,
    UnauthorizedAccessError,
)
from embedlog.ledger.pending import PendingAdd
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import DELETED_TERM, RESULT_SIZE, FrameError, Response, unpack_results


class Refused(enum.Enum):
    IGNORE = "ignore"  # about an entry the writer needs nothing more of (settled)
    REPLACE = "replace"  # the bookie failed this add: replace it (or retry it)


def refusal_outcome(
    status: int, term: int, *, settled: bool, ledger_id: int, bookie: str, writer_term: int
) -> BKError | Refused:
    """What one bookie's refusal (``status`` != EOK, with the bookie's ``term``) of one
    entry means: the error every add of the writer fails with, or ``Refused``.

    ``settled``: the writer needs nothing more of the entry (a bounded ledger's entry once
    acknowledged; a stream needs its acknowledged entries on their whole write sets)."""
    if status == StatusCode.EDELETED or (
        status == StatusCode.EINVALIDTERM and term >= DELETED_TERM
    ):
        # Whether or not this entry was acknowledged already: nothing added to the
        # ledger from now on could be read, so every later add must fail too. A
        # refusal carrying the deleted term comes from a delete's fence, not a
        # takeover (unbounded/deletion.py).
        return deleted_error(ledger_id, bookie)
    if status == StatusCode.EINVALIDTERM:
        return InvalidTermError(
            f"ledger {ledger_id}: {bookie} has term {term}, above this "
            f"writer's {writer_term}: another client took over"
        )
    if settled:
        return Refused.IGNORE
    if status == StatusCode.EFENCED:
        return LedgerFencedError(f"ledger {ledger_id} was fenced ({bookie})")
    if status == StatusCode.EUA:
        return UnauthorizedAccessError(f"ledger {ledger_id}: wrong password")
    return Refused.REPLACE


def batch_verdicts(body: bytes, count: int) -> int | list[tuple[int, int]]:
    """A bookie's answer to a batch of ``count`` adds: the term of an EOK for every one
    (the common answer, told without a verdict per entry), or (status, term) per entry;
    FrameError if the body does not hold ``count`` results."""
    one = body[:RESULT_SIZE]
    if len(one) == RESULT_SIZE and body == one * count:  # one verdict for all
        status, term = unpack_results(one)[0]
        if status == StatusCode.EOK:
            return term
    results = unpack_results(body)
    if len(results) != count:
        raise FrameError(f"{len(results)} results for a batch of {count}")
    return results


def deleted_error(ledger_id: int, bookie: str) -> LedgerDeletedError:
    """What a writer (or a recovery) that met a bookie's tombstone of its ledger raises."""
    return LedgerDeletedError(
        f"ledger {ledger_id} was deleted ({bookie} dropped it and refuses writes to it): "
        "nothing more can be added to it; create a new ledger (or the stream again) to go on"
    )


class AnswerSink(Protocol):
    """Who takes the answers to adds (the writer, writer.py)."""

    def _on_add_answer(
        self, fut: asyncio.Future[Response], p: PendingAdd, idx: int, bookie: str
    ) -> None: ...

    def _on_batch_answer(
        self, fut: asyncio.Future[Response], run: list[PendingAdd], idx: int, bookie: str
    ) -> None: ...


class BatchAnswerFor:
    """Routes one bookie's answer to a batch of adds back to the writer."""

    __slots__ = ("bookie", "idx", "run", "writer")

    def __init__(self, writer: AnswerSink, run: list[PendingAdd], idx: int, bookie: str) -> None:
        self.writer = writer
        self.run = run
        self.idx = idx
        self.bookie = bookie

    def __call__(self, fut: asyncio.Future[Response]) -> None:
        self.writer._on_batch_answer(fut, self.run, self.idx, self.bookie)


class AnswerFor:
    """Routes one bookie's answer to an add back to the writer (an object, not a closure:
    see embedlog/bookie/adds.py _AddPlan)."""

    __slots__ = ("bookie", "idx", "p", "writer")

    def __init__(self, writer: AnswerSink, p: PendingAdd, idx: int, bookie: str) -> None:
        self.writer = writer
        self.p = p
        self.idx = idx
        self.bookie = bookie

    def __call__(self, fut: asyncio.Future[Response]) -> None:
        self.writer._on_add_answer(fut, self.p, self.idx, self.bookie)
