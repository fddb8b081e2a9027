"""LafrIsFullyReplicated (oracle_quorum.py): every entry of the last fragment at or below
the LAFR a stream writer sends is on its whole write set; a LAFR mutant (lafr_mutants.py)
that passes an entry one confirmation short is caught at the seed pinned here."""

from __future__ import annotations

from collections import Counter

from lafr_mutants import lafr_one_short, writeback_at_ack_quorum

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_quorum import LAFR_RULE, AckQuorumRule, LafrRule
from embedlog.testing.sim import run_seed
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import DigestType
from embedlog.wire.messages import AddFlags, OpCode, Request, Response

LID = 5
MD = LedgerMetadata(
    ledger_id=LID,
    ensemble_size=3,
    write_quorum=3,
    ack_quorum=2,
    fragments=((0, ("b1", "b2", "b3")), (4, ("b1", "b2", "b4"))),
    digest_type=DigestType.CRC32C,
    unbounded=True,
    term=2,  # the writer's term: a displaced writer's LAFR is not judged
)


class History:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.acks = AckQuorumRule(bytes, lambda r, d: self.seen.append(r), Counter())
        self.rule = LafrRule(
            self.acks, lambda _lid: MD, bytes, lambda r, d: self.seen.append(r), Counter()
        )

    def add(self, eid: int, lafr: int, answered_by: tuple[str, ...], flags: int = 0) -> None:
        body = b"p%d" % eid
        req = Request(OpCode.ADD, eid, LID, eid, flags=flags, term=2, body=body, lafr=lafr)
        self.rule.sent("w", req)
        for b in answered_by:
            self.acks.answered(b, req, Response(OpCode.ADD, eid, StatusCode.EOK, LID, eid))


def test_a_lafr_over_an_entry_one_bookie_never_confirmed_is_flagged():
    h = History()
    h.add(4, -1, ("b1", "b2", "b4"))
    h.add(5, 4, ("b2", "b4"))  # LAFR 4: entry 4 is on its whole write set
    assert h.seen == []
    h.add(6, 5, ())  # LAFR 5: entry 5 lacks b1
    assert h.seen == [LAFR_RULE]


def test_the_lafr_a_write_lac_carries_is_judged_as_an_adds():
    """A quiet writer's explicit LAC and a takeover's end (takeover.announce_end) carry
    a LAFR too; a WRITE_LAC without a term (a bounded ledger's) claims none."""
    h = History()
    h.add(4, -1, ("b1", "b2", "b4"))
    h.add(5, -1, ("b2", "b4"))
    h.rule.sent("w", Request(OpCode.WRITE_LAC, 8, LID, 5, lafr=5))  # no term: not judged
    h.rule.sent("w", Request(OpCode.WRITE_LAC, 9, LID, 5, term=2, lafr=4))
    assert h.seen == []
    h.rule.sent("w", Request(OpCode.WRITE_LAC, 10, LID, 5, term=2, lafr=5))  # 5 lacks b1
    assert h.seen == [LAFR_RULE]


def test_entries_below_the_last_fragment_and_recovery_writes_are_not_judged():
    h = History()
    h.add(2, -1, ("b1",))  # in the first fragment: the LAFR passes it (committed)
    h.add(4, 3, ("b1", "b2", "b4"))
    h.add(5, 5, (), flags=AddFlags.RECOVERY)  # a takeover's write carries its start
    assert h.seen == []


def test_a_displaced_writer_and_entries_of_an_earlier_term_are_not_judged():
    """Seeds 722 and 1176 of `unbounded`, 1375 of `unbounded-races` (10,000-seed runs):
    the metadata holds the new term's write sets, not the ones a displaced writer used;
    and a client that takes over again inherits entries it wrote in an earlier term,
    which that term's takeover wrote back (the acks answered the takeover)."""
    h = History()
    h.add(4, -1, ("b1", "b2", "b4"))
    old = Request(OpCode.ADD, 9, LID, 5, term=1, body=b"p5", lafr=5)  # term 1: displaced
    h.rule.sent("w", old)
    assert h.seen == []
    h.add(6, 5, ())  # term 2's LAFR over entry 5, which only term 1's add carried
    assert h.seen == []


FIRST = 0  # the mutant's first violating seed of `unbounded` (searched again if moved)
SEARCH = 200


def test_a_lafr_one_confirmation_short_is_caught():
    def violated(seed: int) -> bool:
        with lafr_one_short():
            result = run_seed(seed, "unbounded", keep_trace=False)
        return LAFR_RULE in [v.invariant for v in result.violations]

    seed = next((s for s in [FIRST, *range(SEARCH)] if violated(s)), None)
    assert seed is not None, f"the LAFR mutant is not caught in {SEARCH} seeds"
    if seed != FIRST:
        print(f"the LAFR mutant is caught at seed {seed} now (pinned: {FIRST})")
    clean = run_seed(seed, "unbounded", keep_trace=False)
    assert clean.ok and clean.counts["check.lafr_entries"] > 0


ANNOUNCE_FIRST = 0  # the first seed of `unbounded` where the takeover mutant is caught
ANNOUNCE_SEARCH = 100


def test_a_takeovers_end_announced_over_a_write_back_short_of_its_write_sets_is_caught():
    """A takeover announces its end as every bookie's LAFR (takeover.announce_end, a
    WRITE_LAC): the rule judges that LAFR too. With the write-back waiting for the ack
    quorum only, an entry one bookie missed is claimed fully replicated."""

    def caught(seed: int) -> bool:
        with writeback_at_ack_quorum():
            result = run_seed(seed, "unbounded", keep_trace=False)
        return any(
            v.invariant == LAFR_RULE and "(WRITE_LAC)" in v.detail for v in result.violations
        )

    seed = next((s for s in [ANNOUNCE_FIRST, *range(ANNOUNCE_SEARCH)] if caught(s)), None)
    assert seed is not None, f"the takeover mutant is not caught in {ANNOUNCE_SEARCH} seeds"
    if seed != ANNOUNCE_FIRST:
        print(f"the takeover mutant is caught at seed {seed} now (pinned: {ANNOUNCE_FIRST})")
    assert run_seed(seed, "unbounded", keep_trace=False).ok
