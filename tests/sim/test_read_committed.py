"""ReadersSeeOnlyCommitted (oracle_quorum.py: ``AckQuorumRule.read``): when a reader is
handed an entry, AQ distinct bookies have answered an add of it with that payload; and a
follower that reads one entry past the LAC it saw, caught at the seed pinned here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from seed_search import caught_then_clean

from embedlog.ledger.entries import Entry
from embedlog.ledger.handles import ReadHandle, read_entries
from embedlog.testing.oracle_quorum import READ_RULE, AckQuorumRule
from embedlog.unbounded import follow
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, Response

LID = 7


def rule() -> tuple[AckQuorumRule, list[str]]:
    seen: list[str] = []
    # Entries here are their payloads (no header): the rule only compares them.
    return AckQuorumRule(bytes, lambda r, _d: seen.append(r), Counter()), seen


@pytest.mark.parametrize(
    ("answers", "short"),
    [
        ([("b1", b"p"), ("b2", b"p")], False),
        ([("b1", b"p")], True),  # stored on one bookie: one past the LAC
        ([], True),  # stored, its answer not given yet
        ([("b1", b"p"), ("b2", b"q")], True),  # another payload (another term's) is no copy
        ([("b1", b"p"), ("b1", b"p")], True),  # the same bookie twice is one
        ([("b1", b"p"), ("b2", b"p"), ("b3", b"p")], False),
    ],
)
def test_a_reader_sees_an_entry_only_once_aq_bookies_answered_its_add(answers, short):
    r, seen = rule()
    for bookie, payload in answers:
        req = Request(OpCode.ADD, 1, LID, 4, body=payload)
        r.answered(bookie, req, Response(OpCode.ADD, 1, StatusCode.EOK, LID, 4))
    r.read(LID, 4, b"p", 2, "f0")
    assert seen == ([READ_RULE] if short else [])


@contextmanager
def follower_reads_past_lac() -> Iterator[None]:
    """A follower's read beside its long poll asks one entry more than the LAC it saw
    allows, and hands it out when a bookie has it stored."""
    read = follow._read_or_none

    async def mutant(ctx: Any, md: Any, digester: Any, first: int, last: int) -> Any:
        return await read(ctx, md, digester, first, last + 1)

    follow._read_or_none = mutant  # type: ignore[assignment]
    try:
        yield
    finally:
        follow._read_or_none = read  # type: ignore[assignment]


FIRST = 22  # first violating seed of `unbounded` (searched again from 0 when moved)
SEARCH = 300


def test_a_follower_reading_past_the_lac_is_caught():
    caught_then_clean(
        follower_reads_past_lac, "unbounded", FIRST, SEARCH, READ_RULE, "check.read_committed"
    )


@contextmanager
def reader_reads_past_lac() -> Iterator[None]:
    """A reader of an open bounded ledger is handed entries past the LAC it knows, without
    asking the bookies again (ReadHandle.read_aio's guard left out)."""
    read_aio = ReadHandle.read_aio

    async def unguarded(self: ReadHandle, first: int, last: int) -> list[Entry]:
        return await read_entries(self._ctx, self._md, self._digester, first, last)

    ReadHandle.read_aio = unguarded  # type: ignore[method-assign]
    try:
        yield
    finally:
        ReadHandle.read_aio = read_aio  # type: ignore[method-assign]


TAIL_FIRST = 0  # first violating seed of `bounded-tailing`
TAIL_SEARCH = 100


def test_a_reader_of_an_open_ledger_handed_entries_past_the_lac_is_caught():
    caught_then_clean(
        reader_reads_past_lac, "bounded-tailing", TAIL_FIRST, TAIL_SEARCH, READ_RULE, "tail.read"
    )
