"""RecoveredOnWriteSet (oracle_quorum.py: ``AckQuorumRule`` at a close): every entry a
close commits that no writer was told is acknowledged has AQ bookies of its write set
in the closed metadata that answered an add of it with one payload; and a recovery that
closes with the metadata it started from, caught at the seed pinned here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from seed_search import caught_then_clean

from embedlog.ledger import recovery
from embedlog.ledger.writer import LedgerWriter
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.testing.oracle_quorum import CLOSE_RULE, AckQuorumRule
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import DigestType
from embedlog.wire.messages import OpCode, Request, Response

LID = 7
OPEN = LedgerMetadata(
    ledger_id=LID,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    fragments=((0, ("b1", "b2", "b3")),),
    digest_type=DigestType.CRC32C,
)


def rule() -> tuple[AckQuorumRule, list[str]]:
    seen: list[str] = []
    return AckQuorumRule(bytes, lambda r, _d: seen.append(r), Counter()), seen


def add(r: AckQuorumRule, bookie: str, eid: int, payload: bytes) -> None:
    req = Request(OpCode.ADD, 1, LID, eid, body=payload)
    r.answered(bookie, req, Response(OpCode.ADD, 1, StatusCode.EOK, LID, eid))


def close(r: AckQuorumRule, last: int, acked: dict[int, bytes], **changes: Any) -> None:
    r.metadata_written(LID, OPEN, {})
    closed = OPEN.evolve(state=LedgerState.CLOSED, last_entry_id=last, **changes)
    r.metadata_written(LID, closed, acked)


@pytest.mark.parametrize(
    ("answers", "acked", "fragments", "short"),
    [
        # entry 1's write set: b2, b3
        ([("b2", b"p"), ("b3", b"p")], {}, None, False),
        ([("b2", b"p"), ("b1", b"p")], {}, None, True),  # b1 is not in its write set
        ([("b2", b"p"), ("b3", b"q")], {}, None, True),  # two payloads: one copy of each
        ([("b2", b"p")], {1: b"p"}, None, False),  # acknowledged: judged at its ack
        # the write-back replaced b3 by b4 from entry 1 on, and the close lists it
        (
            [("b2", b"p"), ("b4", b"p")],
            {},
            ((0, ("b1", "b2", "b3")), (1, ("b1", "b2", "b4"))),
            False,
        ),
        # the same write-back, closed with the fragments the recovery started from
        ([("b2", b"p"), ("b4", b"p")], {}, None, True),
    ],
)
def test_a_close_commits_an_entry_only_on_aq_bookies_of_its_write_set(
    answers, acked, fragments, short
):
    r, seen = rule()
    for bookie, payload in answers:
        add(r, bookie, 1, payload)
    for bookie in ("b1", "b2"):  # entry 0 (b1, b2) is on its write set
        add(r, bookie, 0, b"z")
    close(r, 1, acked, **({"fragments": fragments} if fragments else {}))
    assert seen == ([CLOSE_RULE] if short else [])


def test_an_empty_close_and_a_stream_are_not_judged():
    r, seen = rule()
    close(r, -1, {})
    r2, seen2 = rule()
    r2.metadata_written(LID, OPEN.evolve(unbounded=True), {})
    r2.metadata_written(
        LID, OPEN.evolve(unbounded=True, state=LedgerState.CLOSED, last_entry_id=3), {}
    )
    assert seen == [] and seen2 == []


@contextmanager
def close_forgets_write_back_changes() -> Iterator[None]:
    """A recovery closes with the metadata it started from: the replacements its
    write-back made in memory are left out of the closed ledger."""

    class Forgets(LedgerWriter):
        async def drain(self) -> None:
            started = self._started_with  # type: ignore[has-type]
            await super().drain()
            self.md = started

        def __init__(self, ctx: Any, md: LedgerMetadata, *args: Any, **kw: Any) -> None:
            super().__init__(ctx, md, *args, **kw)
            self._started_with = md

    recovery.LedgerWriter = Forgets  # type: ignore[misc]
    try:
        yield
    finally:
        recovery.LedgerWriter = LedgerWriter  # type: ignore[misc]


FIRST = 57  # first violating seed of `bounded-nojournal` (searched again from 0 when moved)
SEARCH = 300


def test_a_recovery_closing_without_its_replacements_is_caught():
    caught_then_clean(
        close_forgets_write_back_changes,
        "bounded-nojournal",
        FIRST,
        SEARCH,
        CLOSE_RULE,
        "check.recovered_on_write_set",
    )
