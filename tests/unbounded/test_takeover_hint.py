"""The term-raising reads of a takeover (takeover.read_lafr_with_term): what they hand on.

Recovery reads ahead (16 at a time) only up to the highest last entry the bookies that
took the term report (``read_forward``'s ``last_held``); these tests pin that the hint
is the highest of the answers that count, and never one of an answer that does not."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from embedlog.unbounded.takeover import read_lafr_with_term
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, Response

LID = 9
TERM = 4
ENSEMBLE = ("b1", "b2", "b3")


class TermBookies:
    """``ctx.bookies``: each bookie answers the term read with (status, term, lafr, lac,
    last entry) from ``answers``."""

    def __init__(self, answers: dict[str, tuple[int, int, int, int, int]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def call(self, bookie: str, op: OpCode, lid: int, eid: int, **kw: object) -> Response:
        await asyncio.sleep(0)
        self.asked.append((bookie, kw["term"]))  # type: ignore[arg-type]
        status, term, lafr, lac, last = self.answers[bookie]
        return Response.to(
            Request(op, 1, lid, eid), status, term=term, lafr=lafr, lac=lac, last_entry_id=last
        )


def raise_term(
    answers: dict[str, tuple[int, int, int, int, int]], ack_quorum: int = 1
) -> tuple[int, int, int]:
    """E3 WQ3; with AQ 1 the term must reach all three bookies, so every answer counts."""
    ctx = SimpleNamespace(bookies=TermBookies(answers))
    md = SimpleNamespace(ledger_id=LID, write_quorum=3, ack_quorum=ack_quorum)
    result = asyncio.run(read_lafr_with_term(ctx, md, ENSEMBLE, b"k", TERM))  # type: ignore[arg-type]
    assert {term for _bookie, term in ctx.bookies.asked} == {TERM}
    return result


def test_the_highest_lafr_lac_and_last_entry_of_the_answers_are_handed_on():
    ok = StatusCode.EOK
    lafr, lac, last_held = raise_term(
        {"b1": (ok, TERM, 3, 5, 7), "b2": (ok, TERM, 4, 4, 12), "b3": (ok, TERM, 2, 6, 6)}
    )
    # Each is the highest of its own kind, wherever it came from: b2 holds entry 12.
    assert (lafr, lac, last_held) == (4, 6, 12)


def test_an_answer_of_another_term_adds_nothing_to_the_hint():
    ok = StatusCode.EOK
    lafr, lac, last_held = raise_term(
        {
            "b1": (ok, TERM, 3, 5, 7),
            "b2": (ok, TERM - 1, 9, 9, 40),  # a stale answer: discarded
            "b3": (ok, TERM, 2, 6, 8),
        },
        ack_quorum=2,  # b1 and b3 cover every write set without b2
    )
    assert (lafr, lac, last_held) == (3, 6, 8)


def test_a_bookie_that_holds_nothing_reports_minus_one():
    ok = StatusCode.EOK
    answers = {b: (ok, TERM, -1, -1, -1) for b in ENSEMBLE}
    assert raise_term(answers) == (-1, -1, -1)
