"""How a bookie says no: refusals, requests that met a disk error, and the negatives
it must not give.

The rule it never breaks: an entry the index says it holds is returned or the read
fails with EIO; it is never reported as missing. A limbo ledger (BP-46) answers
EUNKNOWN where it would otherwise say NoSuchEntry/NoSuchLedger. A disk error that is
not a damaged record makes the bookie read-only (embedlog/bookie/flushing.py). A ledger
the bookie dropped refuses every change with EDELETED (``Refusals.tombstone_answer``; the rule is
``tombstones.tombstone_verdict``) and reads as one it never held, NoSuchLedger.

A part of the Bookie (embedlog/bookie/base.py), which the add path and the other
requests answer through; it sees the bookie through ``Served``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from embedlog.bookie.base import BookieState, Served
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.keys import needs_key
from embedlog.bookie.tombstones import tombstone_verdict
from embedlog.bookie.verdicts import negative
from embedlog.errors import BookieIOError
from embedlog.metrics import BookieMetrics
from embedlog.transport.server import BookieGoneError, Reply
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    NO_TERM,
    FrameError,
    OpCode,
    Request,
    Response,
    pack_results,
    unpack_entries,
)

log = logging.getLogger(__name__)


class Refusals:
    def __init__(
        self,
        bookie: Served,
        metrics: BookieMetrics,
        disk_error: Callable[[BaseException], None],
    ) -> None:
        self.bookie = bookie
        self.metrics = metrics
        # A request met a disk error: the bookie goes read-only (Flusher.met).
        self.disk_error = disk_error

    def refusal(
        self, req: Request, status: int, statuses: list[int] | None = None, term: int = NO_TERM
    ) -> Response:
        """``req`` refused with ``status``. An ADD_BATCH's refusal carries a verdict per
        entry: ``status``, or the one ``statuses`` already holds for entries refused alone."""
        self.metrics.rejected_requests += 1
        if req.op != OpCode.ADD_BATCH:
            return Response.to(req, status, entry_id=req.entry_id, term=term)
        if statuses is None:
            try:
                statuses = [StatusCode.EOK] * len(unpack_entries(req.body))
            except FrameError:
                statuses = []
        results = [(status if s == StatusCode.EOK else s, term) for s in statuses]
        return Response.to(req, status, entry_id=req.entry_id, body=pack_results(results))

    def answer_failure(self, req: Request, exc: BaseException, reply: Reply) -> None:
        """``failed``'s answer to ``reply``, for requests served without a task: what
        ``failed`` raises goes to ``reply`` too (no answer when the bookie is gone, EIO
        for anything else: serve_frame's _FrameAnswer), as from a task's exception."""
        try:
            answer = self.failed(req, exc)
        except Exception as raised:
            reply(raised)
        else:
            reply(answer)

    def failed(self, req: Request, exc: BaseException) -> Response:
        """The answer to a request that hit a disk error; raises BookieGoneError if the
        bookie crashed or stopped under the request (then there is no answer at all), and
        ``exc`` itself if it is no disk error.

        Whatever a request meets once its bookie is gone (closed files, shut executors,
        a journal failing its waiters) is the crash showing, not a failure of its own:
        it ends unanswered, quietly, like the bookie."""
        bookie = self.bookie
        state = bookie.state
        if state is not BookieState.SERVING:
            raise BookieGoneError(f"bookie {bookie.bookie_id} is {state.value}") from exc
        if isinstance(exc, BookieIOError):
            log.error("bookie %s: %s", bookie.bookie_id, exc)
            return self.refusal(req, StatusCode.EIO)
        if not isinstance(exc, OSError):
            raise exc
        log.error("bookie %s: disk error: %s; going read-only", bookie.bookie_id, exc)
        self.disk_error(exc)
        return self.refusal(req, StatusCode.EIO)

    def tombstone_answer(self, req: Request, statuses: list[int] | None = None) -> Response | None:
        """The answer to ``req`` when its ledger is one this bookie dropped and ``req``
        would change it (tombstones.py); None otherwise. Asked where the bookie holds no
        state of the ledger: a dropped ledger has none."""
        storage = self.bookie.storage
        assert storage is not None
        key = storage.tombstones.key(req.ledger_id)
        status = None if key is None else tombstone_verdict(req, key)
        if status is None:
            return None
        return self.dropped_answer(req, status, statuses)

    def dropped_answer(
        self, req: Request, status: StatusCode, statuses: list[int] | None = None
    ) -> Response:
        """The answer a verdict about a dropped ledger (``Verdict.dropped``) gives."""
        if status == StatusCode.EOK:  # a DELETE_LEDGER done already
            return Response.to(req, status, entry_id=req.entry_id)
        return self.refusal(req, status, statuses)

    def tombstone(self, req: Request, info: LedgerInfo | None) -> bytes | None:
        """What the verdicts ask of a ledger's tombstone: its key, looked up only where it
        can matter: for a request that would change the ledger (``keys.needs_key``), where
        the bookie holds no state of it (a dropped ledger has none)."""
        storage = self.bookie.storage
        assert storage is not None
        if info is not None or not needs_key(req):
            return None
        return storage.tombstones.key(req.ledger_id)

    def missing(self, req: Request, info: LedgerInfo | None, status: StatusCode) -> Response:
        """An explicit negative, unless the ledger is in limbo (``verdicts.negative``)."""
        lac = info.known_lac if info is not None else -1
        status = negative(info, status, self.bookie.mode)
        return Response.to(req, status, entry_id=req.entry_id, lac=lac)
