"""StateDurableWhenAnswered and TruncatesOncePerTerm (oracle_durable.py): what a bookie's
simulated disk holds when it answers, judged on a disk written here, and the campaign's
survivors (survivor_mutants.py) caught at the seeds pinned here."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import attrs
import crc32c
from seed_search import caught_then_clean
from survivor_mutants import (
    noop_answered_from_write_cache,
    term_raise_answered_early,
    truncation_repeats,
)

from embedlog.bookie.entrylog import LOCATION, RECORD
from embedlog.bookie.entrylog import SUFFIX as LOG_SUFFIX
from embedlog.bookie.index import LedgerIndex, LedgerInfo
from embedlog.bookie.journal_replay import FRAME, SUFFIX
from embedlog.bookie.records import add_prefix, state_record, truncate_record
from embedlog.testing.oracle_durable import (
    DROPPED,
    DURABLE_RULE,
    NOOP_RULE,
    ONCE_RULE,
    DurableStateRule,
    durable_state,
)
from embedlog.testing.sim import run_seed
from embedlog.testing.simdisk import MemoryDisk, SimFile
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    AddFlags,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
)

LID = 7
DATA = Path("/sim/bookie-1")
INCARNATION = object()


class Bookie:
    """One bookie's disk, written as its journal and index would write it."""

    def __init__(self, term: int = 1) -> None:
        self.disk = MemoryDisk(random.Random(0), lambda: 0.0)
        for d in ("journal", "index"):
            self.disk.mkdir(DATA / d)
        index = LedgerIndex(DATA / "index", create=True, disk=self.disk)
        index.commit([], [(LID, LedgerInfo(term=term))], checkpoint=0)
        index.close()
        f = self.disk.open_append(DATA / "journal" / f"{0:020d}{SUFFIX}")
        assert isinstance(f, SimFile)
        self.journal = f
        self.seen: list[str] = []
        self.counts: Counter[str] = Counter()
        self.rule = DurableStateRule(
            lambda _b: (self.disk, DATA, INCARNATION),
            lambda rule, detail: self.seen.append(rule),
            self.counts,
        )

    def journal_state(self, record: bytes, *, sync: bool) -> None:
        self.journal.append(FRAME.pack(len(record), crc32c.crc32c(record)) + record)
        if sync:
            self.journal.sync()

    def raise_term(self, term: int, *, sync: bool) -> None:
        self.journal_state(state_record(LID, LedgerInfo(term=term)), sync=sync)

    def cut(self, term: int) -> None:
        info = LedgerInfo(term=term, truncated_term=term)
        self.journal_state(truncate_record(LID, 3, info, frozenset()), sync=True)

    def journal_add(self, req: Request, *, sync: bool = True) -> None:
        """The add's record, as the journal writes it (a no-op's, journal on or off)."""
        self.journal_state(add_prefix(req.ledger_id, req.entry_id) + req.body, sync=sync)

    def answer(
        self, req: Request, status: StatusCode = StatusCode.EOK, *, noop_journaled: bool = True
    ) -> None:
        """``req`` answered; a truncating no-op answered EOK has its record journaled and
        synced first (as the bookie does), unless ``noop_journaled`` is False."""
        if (
            noop_journaled
            and status == StatusCode.EOK
            and req.op == OpCode.ADD
            and req.flags & AddFlags.TRUNCATE
        ):
            self.journal_add(req)
        self.rule.answered("bookie-1", req, Response.to(req, status, entry_id=req.entry_id))


def add(txn: int, term: int, flags: int = 0) -> Request:
    return Request(OpCode.ADD, txn, LID, txn, flags=flags, term=term, body=b"e")


def test_the_durable_state_is_the_index_then_the_fsynced_state_records():
    b = Bookie(term=1)
    assert durable_state(b.disk, DATA, LID) == LedgerInfo(term=1)
    b.raise_term(3, sync=False)
    assert durable_state(b.disk, DATA, LID) == LedgerInfo(term=1)
    b.journal.sync()
    assert durable_state(b.disk, DATA, LID) == LedgerInfo(term=3)
    assert durable_state(b.disk, DATA, LID + 1) is None


def test_a_dropped_ledger_keeps_no_state_to_lose():
    """A delete raises a stream's term (a read carrying DELETED_TERM), then drops it: the
    read's answer may come after the drop's index batch removed its state."""
    b = Bookie(term=1)
    index = LedgerIndex(DATA / "index", disk=b.disk)
    index.commit([], [(LID, None)], tombstones={LID: b"k"})
    index.close()
    assert durable_state(b.disk, DATA, LID) is DROPPED
    b.answer(Request(OpCode.READ, 1, LID, -1, flags=ReadFlags.FENCE, term=2**62))
    assert b.seen == []


def test_an_add_that_raised_the_term_answered_before_it_is_durable_is_flagged():
    b = Bookie(term=1)
    req = add(1, 3)
    b.rule.arrived("bookie-1", req)
    b.raise_term(3, sync=False)
    b.answer(req)
    assert b.seen == [DURABLE_RULE]


def test_an_add_answered_once_its_term_is_durable_holds():
    b = Bookie(term=1)
    req = add(1, 3)
    b.rule.arrived("bookie-1", req)
    b.raise_term(3, sync=True)
    b.answer(req)
    assert b.seen == []


def test_an_add_of_a_term_an_earlier_request_raised_and_waits_for_is_not_judged():
    """Journal off: the raiser waits for its record; the next add of that term is answered
    from the write cache at once. Judged again once the raiser is answered EOK."""
    b = Bookie(term=1)
    raiser, follower, later = add(1, 3), add(2, 3), add(3, 3)
    b.rule.arrived("bookie-1", raiser)
    b.rule.arrived("bookie-1", follower)
    b.raise_term(3, sync=False)
    b.answer(follower)
    assert b.seen == []
    b.journal.sync()
    b.answer(raiser)
    b.rule.arrived("bookie-1", later)
    b.answer(later)
    assert b.seen == []


def test_an_earlier_request_refused_does_not_excuse_an_add():
    b = Bookie(term=1)
    refused, req = add(1, 3), add(2, 3)
    b.rule.arrived("bookie-1", refused)
    b.rule.arrived("bookie-1", req)
    b.answer(refused, StatusCode.EFENCED)
    b.raise_term(3, sync=False)
    b.answer(req)
    assert b.seen == [DURABLE_RULE]


def test_fence_and_term_reads_truncations_and_trims_are_judged_at_every_answer():
    for req in [
        Request(OpCode.READ, 1, LID, -1, flags=ReadFlags.FENCE),
        Request(OpCode.READ, 2, LID, -1, term=3),
        add(3, 3, flags=AddFlags.TRUNCATE),
        Request(OpCode.TRIM, 4, LID, 3, flags=TrimFlags.ABOVE, term=3, body=b"\x04"),
    ]:
        b = Bookie(term=1)
        b.rule.arrived("bookie-1", add(9, 3))  # pending: excuses plain adds only
        b.rule.arrived("bookie-1", req)
        b.raise_term(3, sync=False)
        b.answer(req, noop_journaled=False)  # its record would sync the term's with it
        noop = req.op == OpCode.ADD
        assert b.seen == [DURABLE_RULE] + ([NOOP_RULE] if noop else []), req


def test_a_no_op_answered_before_its_record_is_durable_is_flagged():
    b = Bookie(term=1)
    b.cut(3)
    noop = add(1, 3, flags=AddFlags.TRUNCATE)
    b.journal_add(noop, sync=False)  # in the journal's buffer, not fsync'd
    b.answer(noop, noop_journaled=False)
    assert b.seen == [NOOP_RULE]
    b.journal.sync()
    b.answer(noop, noop_journaled=False)
    assert b.seen == [NOOP_RULE]  # durable now: holds
    other = add(2, 3, flags=AddFlags.TRUNCATE)
    b.journal_add(attrs.evolve(other, body=b"another entry"))  # not the entry answered
    b.answer(other, noop_journaled=False)
    assert b.seen == [NOOP_RULE, NOOP_RULE]
    assert b.counts["check.noop_durable"] == 3


def test_a_no_op_flushed_to_the_entry_log_is_durable():
    """Its journal file removed after a flush (or never read): the index's location, within
    the entry log's synced bytes, holding exactly the no-op."""
    b = Bookie(term=1)
    b.cut(3)
    noop = add(1, 3, flags=AddFlags.TRUNCATE)
    b.disk.mkdir(DATA / "ledgers")
    log = b.disk.open_append(DATA / "ledgers" / f"{0:08d}{LOG_SUFFIX}")
    assert isinstance(log, SimFile)
    log.append(b"x" * 10 + RECORD.pack(len(noop.body), 0, LID, noop.entry_id) + noop.body)
    index = LedgerIndex(DATA / "index", disk=b.disk)
    where = LOCATION.pack(0, 10, len(noop.body))
    index.commit([(LID, [noop.entry_id], [where])], [], checkpoint=0)
    index.close()
    b.answer(noop, noop_journaled=False)
    assert b.seen == [NOOP_RULE]  # the entry log's bytes were not synced yet
    log.sync()
    b.answer(noop, noop_journaled=False)
    assert b.seen == [NOOP_RULE]
    assert b.counts["check.noop_durable.flushed"] == 1


def test_a_second_cut_in_one_term_is_flagged():
    b = Bookie(term=1)
    noop = add(1, 3, flags=AddFlags.TRUNCATE)
    b.cut(3)
    b.answer(noop)
    assert b.seen == []
    b.answer(noop)  # a duplicate that found the cut made: no second record
    b.cut(4)
    b.answer(add(2, 4, flags=AddFlags.TRUNCATE))
    assert b.seen == []
    b.cut(4)  # the duplicate of term 4's no-op cut again
    b.answer(add(3, 4, flags=AddFlags.TRUNCATE))
    assert b.seen == [ONCE_RULE]


def test_a_wiped_bookie_starts_its_cuts_afresh():
    b = Bookie(term=1)
    b.cut(3)
    b.answer(add(1, 3, flags=AddFlags.TRUNCATE))
    b.disk.wipe()
    b.rule.lost("bookie-1")
    for d in ("journal", "index"):
        b.disk.mkdir(DATA / d)
    LedgerIndex(DATA / "index", create=True, disk=b.disk).close()
    f = b.disk.open_append(DATA / "journal" / f"{0:020d}{SUFFIX}")
    assert isinstance(f, SimFile)
    b.journal = f
    b.cut(3)
    b.answer(add(2, 3, flags=AddFlags.TRUNCATE))
    assert b.seen == []


DURABLE_FIRST = 0  # first violating seeds (searched again from 0 when moved)
ONCE_FIRST = 6
NOOP_FIRST = 0
SEARCH = 200


def test_an_add_answered_before_its_term_is_durable_is_caught():
    caught_then_clean(
        term_raise_answered_early,
        "unbounded-nojournal",
        DURABLE_FIRST,
        SEARCH,
        DURABLE_RULE,
        "check.state_durable",
    )


def test_a_no_op_answered_from_the_write_cache_is_caught():
    caught_then_clean(
        noop_answered_from_write_cache,
        "unbounded-nojournal",
        NOOP_FIRST,
        SEARCH,
        NOOP_RULE,
        "check.noop_durable",
    )


def test_a_truncation_repeated_within_its_term_is_caught():
    caught_then_clean(
        truncation_repeats, "unbounded-races", ONCE_FIRST, SEARCH, ONCE_RULE, "check.truncates_once"
    )


def test_a_cut_that_failed_and_was_made_by_its_retry_counts_once():
    """A TRIM ABOVE readying a bookie journaled its cut, the flush making the cut durable
    met a failing fsync (EIO), the bookie rolled the cut back, and the writer's retry
    made it: two journal records of the term, one cut (adds.py: ``truncate``). Seed 649
    of `unbounded-streams` was this history in a 10,000-seed run, where the rule counted
    both records."""
    b = Bookie(term=1)
    trim = Request(OpCode.TRIM, 1, LID, 3, flags=TrimFlags.ABOVE, term=3, body=b"\x04")
    b.cut(3)
    b.answer(trim, StatusCode.EIO)
    b.cut(3)  # the retry's record
    b.answer(trim)
    assert b.seen == []
    assert b.counts["check.truncates_once.failed_cut_left_out"] == 1
    b.cut(3)  # a third record, answered EOK like the second: a cut made twice
    b.answer(trim)
    assert b.seen == [ONCE_RULE]


def test_a_history_with_a_cut_made_again_after_a_failed_flush_holds():
    """Seed 638 of `unbounded-races` (the one of seeds 0-3,999 that has it): a cut
    answered EIO, its flush having met a failing fsync, is made again by the retry; the
    rule leaves the failed attempt's record out, and the history holds every invariant."""
    result = run_seed(638, "unbounded-races", keep_trace=False)
    assert result.ok, [str(v) for v in result.violations]
    assert result.counts["check.truncates_once.failed_cut_left_out"] == 1
