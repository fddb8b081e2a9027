"""AckedByAckQuorum checked again at every committed ensemble change (the model's
BookiePinned, oracle_quorum.py ``metadata_written``): an acknowledged entry the change
moves keeps AQ confirmed copies on its new write set. The campaign's survivor
``pin-misses-fragment-first`` (survivor_mutants.py) is caught at the seed pinned here."""

from __future__ import annotations

from collections import Counter

from seed_search import first_caught
from survivor_mutants import pin_misses_fragment_first

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_quorum import RULE, AckQuorumRule
from embedlog.testing.sim import run_seed
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import DigestType
from embedlog.wire.messages import OpCode, Request, Response

LID = 3


def md(*fragments: tuple[int, tuple[str, ...]]) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=LID,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        fragments=fragments,
        digest_type=DigestType.CRC32C,
        unbounded=True,
        term=1,
    )


FIRST = md((0, ("b1", "b2", "b3")))
ACKED = {0: b"p0", 1: b"p1", 2: b"p2"}


def history(answers: dict[int, tuple[str, ...]]) -> tuple[AckQuorumRule, list[str]]:
    seen: list[str] = []
    rule = AckQuorumRule(bytes, lambda r, _d: seen.append(r), Counter())
    for eid, bookies in answers.items():
        req = Request(OpCode.ADD, eid, LID, eid, term=1, body=ACKED[eid])
        for b in bookies:
            rule.answered(b, req, Response.to(req, StatusCode.EOK, entry_id=eid))
    rule.metadata_written(LID, FIRST, {})
    return rule, seen


def test_replacing_a_bookie_whose_ack_counted_for_a_moved_entry_is_flagged():
    # Entry 2 was acknowledged by b1 and b3; the change replaces b1 from entry 2 on.
    rule, seen = history({0: ("b1", "b2", "b3"), 1: ("b1", "b2", "b3"), 2: ("b1", "b3")})
    rule.metadata_written(LID, md((0, ("b1", "b2", "b3")), (2, ("b4", "b2", "b3"))), ACKED)
    assert seen == [RULE]


def test_replacing_a_bookie_the_moved_entries_do_not_need_holds():
    # b2 never confirmed entry 2: replacing it leaves b1 and b3, AQ.
    rule, seen = history({0: ("b1", "b2", "b3"), 1: ("b1", "b2", "b3"), 2: ("b1", "b3")})
    rule.metadata_written(LID, md((0, ("b1", "b2", "b3")), (2, ("b1", "b4", "b3"))), ACKED)
    assert seen == []


def test_entries_the_change_leaves_in_place_and_writes_that_move_nothing_are_not_judged():
    # Entry 1 (one confirmation short: judged at its ack) stays in the first fragment.
    rule, seen = history({0: ("b1", "b2", "b3"), 1: ("b3",), 2: ("b2", "b3")})
    changed = md((0, ("b1", "b2", "b3")), (2, ("b4", "b2", "b3")))
    rule.metadata_written(LID, changed, ACKED)
    rule.metadata_written(LID, changed, ACKED)  # another write (a trim, a close): no move
    assert seen == []


PINNED = 35  # the mutant's first violating seed of `unbounded-races` (searched if moved)
SEARCH = 200


def test_a_writer_replacing_a_pinned_bookie_is_caught():
    seed, _ = first_caught(pin_misses_fragment_first, "unbounded-races", PINNED, SEARCH, RULE)
    # Without the mutant the writer keeps the pinned bookie (it retries it): the same seed
    # holds, with no ensemble change to judge.
    assert run_seed(seed, "unbounded-races", keep_trace=False).ok
