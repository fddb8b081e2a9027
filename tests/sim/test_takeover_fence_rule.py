"""FenceCoversEveryWriteSet for stream takeovers (oracle_fence.py): a takeover fences
with its new term, and reads forward only once every write set of the last fragment
holds WQ - AQ + 1 bookies that took that term. The fencing mutant (fence_mutants.py),
which counts bookies instead of write sets, is caught in ``unbounded`` at the seed
pinned here."""

from __future__ import annotations

from collections import Counter

import pytest
from fence_mutants import fence_counts_bookies_not_write_sets
from seed_search import first_caught

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_fence import RULE, FenceRule
from embedlog.testing.sim import run_seed
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import DigestType
from embedlog.wire.messages import OpCode, ReadFlags, Request, Response

LID = 4
ENS = ("b1", "b2", "b3", "b4")  # E 4, WQ 3, AQ 2: each write set needs 2 with the term
MD = LedgerMetadata(
    ledger_id=LID,
    ensemble_size=4,
    write_quorum=3,
    ack_quorum=2,
    fragments=((0, ENS),),
    digest_type=DigestType.CRC32C,
    unbounded=True,
    term=5,
)


def fence(rule: FenceRule, term: int, took: dict[str, int]) -> None:
    """A takeover's term-raising reads to every bookie; ``took``: bookie -> the term its
    EOK carries (left out: no EOK)."""
    for b in ENS:
        req = Request(OpCode.READ, 1, LID, -1, term=term)
        rule.sent("t", b, req)
        if b in took:
            resp = Response(OpCode.READ, 1, StatusCode.EOK, LID, -1, term=took[b])
        else:
            resp = Response(OpCode.READ, 1, StatusCode.EIO, LID, -1)
        rule.answered("t", b, req, resp)


def read_forward(rule: FenceRule, term: int) -> None:
    rule.sent("t", "b1", Request(OpCode.READ, 2, LID, 0, flags=ReadFlags.RECOVERY, term=term))


def judged(*rounds: tuple[int, dict[str, int]]) -> list[str]:
    seen: list[str] = []
    rule = FenceRule(lambda _lid: MD, lambda r, _d: seen.append(r), Counter())
    for term, took in rounds:
        fence(rule, term, took)
    read_forward(rule, rounds[-1][0])
    return seen


@pytest.mark.parametrize(
    ("took", "short"),
    [
        ({"b1": 5, "b2": 5, "b3": 5, "b4": 5}, False),
        ({"b1": 5, "b2": 5, "b4": 5}, False),  # every write set holds two
        ({"b1": 5, "b3": 5}, True),  # the write set b2, b3, b4 holds one
        # b2's EOK carries a higher term: it did not take this one
        ({"b1": 5, "b2": 6, "b4": 5}, True),
    ],
)
def test_a_takeover_reads_forward_only_once_its_term_covers_every_write_set(took, short):
    assert judged((5, took)) == ([RULE] if short else [])


def test_what_an_earlier_term_fenced_counts_for_nothing_in_the_next():
    everyone = {b: 5 for b in ENS}
    assert judged((5, everyone), (6, {"b1": 6})) == [RULE]
    assert judged((5, {"b1": 5}), (6, {b: 6 for b in ENS})) == []


# The fencing mutant's first violating seed of `unbounded` (a change may move it: the
# test then searches from 0 up to SEARCH and says where to pin it).
FIRST = 3
SEARCH = 100


def test_a_takeover_fenced_short_of_a_write_set_is_caught():
    seed, _ = first_caught(fence_counts_bookies_not_write_sets, "unbounded", FIRST, SEARCH, RULE)
    clean = run_seed(seed, "unbounded", keep_trace=False)
    assert clean.ok and clean.counts["check.fence_coverage"] > 0
