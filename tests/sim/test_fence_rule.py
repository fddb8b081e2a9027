"""FenceCoversEveryWriteSet (oracle_fence.py): a recovery reads forward only once its
fence covers every write set of the ensemble; a fencing mutant (fence_mutants.py) that
counts bookies instead of write sets is caught at the seed pinned here."""

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

LID = 3
ENS = ("b1", "b2", "b3", "b4")  # E 4, WQ 3, AQ 2: each write set needs 2 fenced


def md(**kw: object) -> LedgerMetadata:
    base = LedgerMetadata(
        ledger_id=LID,
        ensemble_size=4,
        write_quorum=3,
        ack_quorum=2,
        fragments=((0, ENS),),
        digest_type=DigestType.CRC32C,
    )
    return base.evolve(**kw)


def history(fenced: list[str], meta: LedgerMetadata) -> list[str]:
    seen: list[str] = []
    rule = FenceRule(lambda _lid: meta, lambda r, _d: seen.append(r), Counter())
    for b in ENS:
        req = Request(OpCode.READ, 1, LID, -1, flags=ReadFlags.FENCE)
        rule.sent("r", b, req)
        status = StatusCode.EOK if b in fenced else StatusCode.ENOENTRY
        rule.answered("r", b, req, Response(OpCode.READ, 1, status, LID, -1))
    read = Request(OpCode.READ, 2, LID, 0, flags=ReadFlags.FENCE | ReadFlags.RECOVERY)
    rule.sent("r", "b1", read)
    rule.sent("r", "b2", read)  # judged once
    return seen


@pytest.mark.parametrize(
    ("fenced", "short"),
    [
        (["b1", "b2", "b3", "b4"], False),
        (["b1", "b3"], True),  # the write set b2, b3, b4 holds one
        (["b1", "b2"], True),  # the write set b3, b4, b1 holds one
        (["b1", "b2", "b4"], False),  # three of four: every write set holds two
        (["b2", "b3", "b4"], False),
        (["b1"], True),
    ],
)
def test_every_write_set_needs_its_quorum_coverage(fenced, short):
    assert history(fenced, md()) == ([RULE] if short else [])


def test_unknown_ensembles_are_not_judged():
    # (Streams are judged too, by their takeovers' terms: test_takeover_fence_rule.py.)
    assert history(["b1"], md(fragments=((0, ("b1", "b2", "b5", "b4")),))) == []


# The fencing mutant's first violating seed of `bounded` (a change may move it: the test
# then searches from 0 up to SEARCH and says where to pin it).
FIRST = 4
SEARCH = 200


def test_a_fence_short_of_a_write_set_is_caught():
    seed, _ = first_caught(fence_counts_bookies_not_write_sets, "bounded", FIRST, SEARCH, RULE)
    clean = run_seed(seed, "bounded", keep_trace=False)
    assert clean.ok and clean.counts["check.fence_coverage"] > 0
