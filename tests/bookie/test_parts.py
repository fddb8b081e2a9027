"""The bookie's request parts alone: each is an object that sees its bookie through the
narrow ``base.Served`` protocol, so a plain stand-in drives it (no Bookie, no boot)."""

from __future__ import annotations

import asyncio
import errno

import pytest
from attrs import define, field

from embedlog.bookie.adds import Adds
from embedlog.bookie.base import BookieState
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.refusals import Refusals
from embedlog.bookie.requests import Requests
from embedlog.bookie.verdicts import Mode
from embedlog.errors import BookieIOError
from embedlog.metrics import BookieMetrics
from embedlog.transport.server import BookieGoneError
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, unpack_results


@define
class StandIn:
    """What ``Served`` asks for, nothing more: no storage or journal (never booted)."""

    state: BookieState = BookieState.SERVING
    mode: Mode = field(factory=Mode)
    bookie_id: str = "b9"
    storage: None = None
    journal: None = None


def refusals(bookie: StandIn) -> tuple[Refusals, list[BaseException], BookieMetrics]:
    met: list[BaseException] = []
    metrics = BookieMetrics()
    return Refusals(bookie, metrics, met.append), met, metrics


READ = Request(OpCode.READ, txn=1, ledger_id=7, entry_id=3)


def test_a_disk_error_is_eio_and_reported_to_the_flusher() -> None:
    part, met, metrics = refusals(StandIn())
    error = OSError(errno.EIO, "bad sector")
    answer = part.failed(READ, error)
    assert answer.status == StatusCode.EIO
    assert met == [error]  # the bookie goes read-only
    assert metrics.rejected_requests == 1


def test_a_damaged_record_is_eio_but_the_disk_is_not_blamed_here() -> None:
    part, met, _ = refusals(StandIn())
    assert part.failed(READ, BookieIOError("record 12 does not read back")).status == StatusCode.EIO
    assert met == []


def test_a_bug_is_raised_not_answered() -> None:
    part, met, _ = refusals(StandIn())
    with pytest.raises(KeyError):
        part.failed(READ, KeyError("bug"))
    assert met == []


@pytest.mark.parametrize("state", [BookieState.STOPPED, BookieState.CRASHED])
def test_a_bookie_gone_under_a_request_answers_nothing(state: BookieState) -> None:
    part, met, _ = refusals(StandIn(state=state))
    with pytest.raises(BookieGoneError, match=f"bookie b9 is {state.value}"):
        part.failed(READ, OSError(errno.EBADF, "closed"))
    assert met == []  # a stopped bookie's closed files are no disk error


@pytest.mark.parametrize(
    ("limbo", "skip_limbo", "status"),
    [
        (False, False, StatusCode.ENOENTRY),
        (True, False, StatusCode.EUNKNOWN),  # BP-46: a limbo ledger cannot say "missing"
        (True, True, StatusCode.ENOENTRY),  # unsafe_skip_limbo
    ],
)
def test_a_negative_follows_the_bookie_s_mode_as_it_is_now(limbo, skip_limbo, status) -> None:
    bookie = StandIn()
    part, _, _ = refusals(bookie)
    info = LedgerInfo(limbo=limbo)
    bookie.mode = Mode(skip_limbo=skip_limbo)  # read at each answer, not at construction
    assert part.missing(READ, info, StatusCode.ENOENTRY).status == status


def test_a_batch_refusal_carries_a_verdict_per_entry() -> None:
    part, _, _ = refusals(StandIn())
    batch = Request(OpCode.ADD_BATCH, txn=2, ledger_id=7, entry_id=0, term=4)
    answer = part.refusal(batch, StatusCode.EFENCED, [StatusCode.EOK, StatusCode.EBADREQ], 4)
    assert answer.status == StatusCode.EFENCED
    assert unpack_results(answer.body) == [(StatusCode.EFENCED, 4), (StatusCode.EBADREQ, 4)]


def test_the_handler_refuses_before_the_bookie_serves() -> None:
    bookie = StandIn(state=BookieState.BOOTING)
    part, _, metrics = refusals(bookie)
    ledgers = LedgerTable()
    adds = Adds(bookie, ledgers, part, None, metrics, None)  # type: ignore[arg-type]
    requests = Requests(bookie, adds, part, ledgers, metrics, None, None)  # type: ignore[arg-type]
    with pytest.raises(BookieGoneError, match="bookie b9 is booting"):
        asyncio.run(requests.handle(READ))
