"""What a bookie's answer to an add means for the writer.

An EOK of a counted term from a bookie that still holds the entry's slot in the
metadata is an ack; a refusal fails the writer (fenced, another term, wrong
password, the ledger deleted) or replaces the bookie; no answer (a timeout, a lost connection) is an
unknown outcome, and the bookie is replaced (ensemble_change.py). A mixin of
``LedgerWriter`` (writer.py), which holds the state and the hooks.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING

from embedlog.errors import (
    BKError,
    InvalidTermError,
    LedgerDeletedError,
    LedgerFencedError,
    TlsHandshakeError,
    UnauthorizedAccessError,
)
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.pending import PendingAdd
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    DELETED_TERM,
    NO_TERM,
    RESULT_SIZE,
    FrameError,
    Response,
    unpack_results,
)

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)


class Refused(enum.Enum):
    IGNORE = "ignore"  # about an entry already settled: nothing left to do for it
    REPLACE = "replace"  # the bookie failed this add: replace it (or retry it)


def refusal_outcome(
    status: int, term: int, *, settled: bool, ledger_id: int, bookie: str, writer_term: int
) -> BKError | Refused:
    """What one bookie's refusal (``status`` != EOK, with the bookie's ``term``) of one
    entry means: the error every add of the writer fails with, or ``Refused``."""
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


class AddAnswers:
    # The writer's state these methods share with it (writer.py sets it up).
    md: LedgerMetadata
    term: int
    error: BKError | None
    _plain_acks: bool
    _tls_refused: dict[str, TlsHandshakeError]

    if TYPE_CHECKING:

        def fail(self, error: BKError) -> None: ...

        def _complete(self) -> None: ...

        def _counts(self, term: int) -> bool: ...

        def _acked(self, p: PendingAdd, idx: int) -> None: ...

        def _bookie_failed(self, bookie: str) -> None: ...

    def _on_add_answer(
        self, fut: asyncio.Future[Response], p: PendingAdd, idx: int, bookie: str
    ) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self._no_answer(exc, p, bookie)
            return
        resp = fut.result()
        self._on_results([p], idx, bookie, [(resp.status, resp.term)])

    def _on_batch_answer(
        self, fut: asyncio.Future[Response], run: list[PendingAdd], idx: int, bookie: str
    ) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            body = fut.result().body
            one = body[:RESULT_SIZE]
            if len(one) == RESULT_SIZE and body == one * len(run):  # one verdict for all
                status, term = unpack_results(one)[0]
                if status == StatusCode.EOK:
                    self._on_all_ok(run, idx, bookie, term)
                    return
            try:
                results = unpack_results(body)
            except FrameError as bad:
                exc = bad
            else:
                if len(results) != len(run):
                    exc = FrameError(f"{len(results)} results for a batch of {len(run)}")
        if exc is not None:
            self._no_answer(exc, run[0], bookie)
            return
        self._on_results(run, idx, bookie, results)

    def _on_all_ok(self, run: list[PendingAdd], idx: int, bookie: str, term: int) -> None:
        """``bookie`` (slot ``idx``) answered EOK of ``term`` for every entry of ``run``: the
        common answer, counted without a verdict per entry (``_on_results`` says why)."""
        if self._counts(term):
            first, ensemble = self.md.fragments[-1]
            # A run is in entry order unless resends joined it: its lowest id is asked.
            lowest = min([p.entry_id for p in run])
            if lowest >= first and ensemble[idx] == bookie and self._plain_acks:
                bit = 1 << idx  # PendingAdd.ack and _acked, inlined: this is per entry
                for p in run:
                    if not (p.acks & bit or p.settled):
                        p.acks |= bit
                        p.acked += 1
            else:
                ok = StatusCode.EOK
                self._on_results(run, idx, bookie, [(ok, term)] * len(run))
                return
        self._complete()

    def _on_results(
        self, run: list[PendingAdd], idx: int, bookie: str, results: list[tuple[int, int]]
    ) -> None:
        """``bookie``'s (status, term) for each entry of ``run`` it was sent as slot ``idx``."""
        md = self.md
        # An ack from a bookie that was replaced meanwhile counts for nothing. Most answers
        # are about the last fragment: whether the bookie still holds the slot there is
        # asked once, not per entry.
        last_first, last_ensemble = md.fragments[-1]
        holds_last = last_ensemble[idx] == bookie
        counted_term, counts = NO_TERM - 1, False
        for p, (status, term) in zip(run, results, strict=True):
            if status != StatusCode.EOK:
                self._on_refusal(p, bookie, status, term)
                if self.error is not None:
                    return
                continue
            if term != counted_term:
                counted_term, counts = term, self._counts(term)
            eid = p.entry_id
            if counts and (
                holds_last if eid >= last_first else md.ensemble_for(eid)[idx] == bookie
            ):
                self._acked(p, idx)
        self._complete()

    def _no_answer(self, exc: BaseException, p: PendingAdd, bookie: str) -> None:
        if isinstance(exc, TlsHandshakeError):
            self._tls_refused[bookie] = exc
        else:
            self._tls_refused.pop(bookie, None)
        if isinstance(exc, UNKNOWN_OUTCOMES):
            log.debug("add %s:%s to %s: %s", self.md.ledger_id, p.entry_id, bookie, exc)
        else:
            log.error("add %s:%s to %s failed: %r", self.md.ledger_id, p.entry_id, bookie, exc)
        self._bookie_failed(bookie)

    def _on_refusal(self, p: PendingAdd, bookie: str, status: int, term: int) -> None:
        """One bookie refused one entry."""
        outcome = refusal_outcome(
            status,
            term,
            settled=p.settled,
            ledger_id=self.md.ledger_id,
            bookie=bookie,
            writer_term=self.term,
        )
        if outcome is Refused.REPLACE:
            log.info("add %s:%s refused by %s: %s", self.md.ledger_id, p.entry_id, bookie, status)
            self._bookie_failed(bookie)
        elif outcome is not Refused.IGNORE:
            self.fail(outcome)


class BatchAnswerFor:
    """Routes one bookie's answer to a batch of adds back to the writer."""

    __slots__ = ("bookie", "idx", "run", "writer")

    def __init__(self, writer: AddAnswers, run: list[PendingAdd], idx: int, bookie: str) -> None:
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

    def __init__(self, writer: AddAnswers, p: PendingAdd, idx: int, bookie: str) -> None:
        self.writer = writer
        self.p = p
        self.idx = idx
        self.bookie = bookie

    def __call__(self, fut: asyncio.Future[Response]) -> None:
        self.writer._on_add_answer(fut, self.p, self.idx, self.bookie)
