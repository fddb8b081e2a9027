"""FenceAndTermHold (oracle_fence_term.py): a bookie never acknowledges an add that reached it
after a fence or a higher term it answered as made, whatever its disk lost meanwhile;
and a BP-46 boot that puts an owed stream in limbo without its term, caught at the seed
pinned here."""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager

import pytest
from seed_search import caught_then_clean, patched

from embedlog.bookie import adds, boot
from embedlog.bookie.integrity import Protection
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_fence_term import RULE, FenceAndTermRule
from embedlog.unbounded.rules import DELETED_TERM
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    NO_TERM,
    AddFlags,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
    pack_entries,
    pack_results,
)

LID = 7


class Bookie:
    """One bookie as the rule sees it: requests reach it, then are answered."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.rule = FenceAndTermRule(lambda r, _d: self.seen.append(r), Counter())
        self.n = 0

    def arrive(self, op: OpCode, *, term: int = NO_TERM, flags: int = 0) -> Request:
        self.n += 1
        body = pack_entries([(self.n, b"x")]) if op == OpCode.ADD_BATCH else b"x"
        req = Request(op, self.n, LID, self.n, flags=flags, term=term, body=body)
        self.rule.arrived("b1", req)
        return req

    def answer(self, req: Request, status: StatusCode = StatusCode.EOK) -> None:
        body = pack_results([(status, req.term)]) if req.op == OpCode.ADD_BATCH else b""
        resp = Response(req.op, req.txn, status, LID, req.entry_id, body=body)
        self.rule.answered("b1", req, resp)


def test_an_add_admitted_before_a_raise_may_be_answered_after_it():
    b = Bookie()
    add = b.arrive(OpCode.ADD_BATCH, term=1)  # waits for its state record
    raise_ = b.arrive(OpCode.READ, term=2)
    b.answer(raise_)
    b.answer(add)
    assert b.seen == []


@pytest.mark.parametrize("raise_first", [True, False])
def test_an_older_terms_add_arriving_after_a_raise_is_caught_whichever_answer_comes_first(
    raise_first,
):
    b = Bookie()
    raise_ = b.arrive(OpCode.READ, term=2)
    add = b.arrive(OpCode.ADD, term=1)
    for req in (raise_, add) if raise_first else (add, raise_):
        b.answer(req)
    assert b.seen == [RULE]


@pytest.mark.parametrize(
    ("raise_status", "add_term", "caught"),
    [
        (StatusCode.EOK, 2, False),  # the raise's own term
        (StatusCode.EOK, 3, False),
        (StatusCode.EIO, 1, False),  # a raise answered as failed promised nothing
        (StatusCode.ENOENTRY, 1, True),  # a recovery read raised it, the entry absent
    ],
)
def test_the_terms_floor(raise_status, add_term, caught):
    b = Bookie()
    raise_ = b.arrive(OpCode.READ, term=2, flags=ReadFlags.RECOVERY)
    b.answer(raise_, raise_status)
    b.answer(b.arrive(OpCode.ADD, term=add_term))
    assert b.seen == ([RULE] if caught else [])


@pytest.mark.parametrize(("flags", "caught"), [(AddFlags.NONE, True), (AddFlags.RECOVERY, False)])
def test_a_fence_refuses_plain_adds_not_a_recoverys_write_back(flags, caught):
    b = Bookie()
    fence = b.arrive(OpCode.READ, flags=ReadFlags.FENCE)
    b.answer(fence, StatusCode.ENOENTRY)
    b.answer(b.arrive(OpCode.ADD, flags=flags))
    assert b.seen == ([RULE] if caught else [])


@pytest.mark.parametrize("fence_first", [True, False])
def test_a_plain_add_arriving_after_a_fence_is_caught_whichever_answer_comes_first(
    fence_first,
):
    b = Bookie()
    fence = b.arrive(OpCode.READ, flags=ReadFlags.FENCE)
    add = b.arrive(OpCode.ADD)
    for req in (fence, add) if fence_first else (add, fence):
        b.answer(req)
    assert b.seen == [RULE]


@pytest.mark.parametrize(
    ("status", "caught"), [(StatusCode.EOK, True), (StatusCode.EINVALIDTERM, False)]
)
def test_a_batch_is_judged_by_its_entries_results(status, caught):
    b = Bookie()
    b.answer(b.arrive(OpCode.READ, term=3))
    batch = b.arrive(OpCode.ADD_BATCH, term=2)
    results = pack_results([(StatusCode.EINVALIDTERM, 3), (status, 3)])
    b.rule.answered(
        "b1",
        batch,
        Response(batch.op, batch.txn, StatusCode.EOK, LID, batch.entry_id, body=results),
    )
    assert b.seen == ([RULE] if caught else [])


def test_a_deleted_stream_is_no_longer_judged():
    """A takeover's raise, then the delete's fence, then (the bookie wiped, the stream
    gone from the metadata) a displaced writer's add: the tombstone rules judge it."""
    b = Bookie()
    b.answer(b.arrive(OpCode.READ, term=5))
    b.answer(b.arrive(OpCode.READ, term=DELETED_TERM))
    b.answer(b.arrive(OpCode.ADD, term=4))
    assert b.seen == []


def test_a_refused_add_is_not_judged():
    b = Bookie()
    b.answer(b.arrive(OpCode.READ, term=5))
    b.answer(b.arrive(OpCode.ADD, term=4), StatusCode.EINVALIDTERM)
    b.answer(b.arrive(OpCode.ADD, term=6))
    assert b.seen == []


def _cut(b: Bookie, term: int, *, trim: bool = False) -> Request:
    if trim:
        return b.arrive(OpCode.TRIM, term=term, flags=TrimFlags.ABOVE)
    return b.arrive(OpCode.ADD, term=term, flags=AddFlags.TRUNCATE)


@pytest.mark.parametrize("older_by_trim", [False, True])
@pytest.mark.parametrize("newer_by_trim", [False, True])
def test_an_older_cut_answered_as_made_after_a_newer_one_is_caught(older_by_trim, newer_by_trim):
    b = Bookie()
    older = _cut(b, 1, trim=older_by_trim)  # waits for the storage lock
    newer = _cut(b, 2, trim=newer_by_trim)
    b.answer(newer)
    b.answer(older)
    assert b.seen == [RULE]


@pytest.mark.parametrize(
    ("first", "then", "status", "caught"),
    [
        (1, 2, StatusCode.EOK, False),  # in their order
        (2, 2, StatusCode.EOK, False),  # a duplicate of the same term, answered as made
        (2, 1, StatusCode.EINVALIDTERM, False),  # the stale one refused, as it must be
    ],
)
def test_cuts_in_order_or_refused_are_not_caught(first, then, status, caught):
    b = Bookie()
    b.answer(_cut(b, first))
    b.answer(_cut(b, then), status)
    assert b.seen == ([RULE] if caught else [])


def stale_cut_not_rechecked() -> AbstractContextManager[None]:
    """A cut that waited for the storage lock does not look at the ledger's term again:
    an older takeover's cut still cuts after a newer one's (the check under the lock,
    ``Adds.truncate``'s only use of the term rule, always passes)."""
    return patched(adds, "bookie_accepts_term", lambda stored, term: True)


CUT_FIRST = 656  # first violating seed of `unbounded-races` (searched if moved)
CUT_SEARCH = 1000


def test_a_cut_made_after_a_newer_terms_is_caught():
    caught_then_clean(
        stale_cut_not_rechecked, "unbounded-races", CUT_FIRST, CUT_SEARCH, RULE, "check.cut_order"
    )


def _open_stream_without_term(owed: bool) -> AbstractContextManager[None]:
    """BP-46 phase one leaves an open stream the bookie may owe entries of (``owed``), or
    one that does not list it, at the term its disk has (a wiped disk: none)."""
    protection_for = boot.protection_for

    def mutant(md: LedgerMetadata, *, owes: bool, skip_fence: bool = False) -> Protection:
        plan = protection_for(md, owes=owes, skip_fence=skip_fence)
        if owes == owed and md.unbounded and not md.is_closed:
            return Protection(fence=plan.fence, limbo=plan.limbo, term=None)
        return plan

    return patched(boot, "protection_for", mutant)


def owed_stream_limbo_without_term() -> AbstractContextManager[None]:
    """BP-46 phase one puts an open stream the bookie may owe entries of in limbo, but
    leaves its term as the disk has it (a wiped disk: none)."""
    return _open_stream_without_term(owed=True)


FIRST = 159  # first violating seed of `unbounded-nojournal` (searched again from 0 when moved)
SEARCH = 400


def test_a_boot_that_leaves_an_owed_stream_below_its_term_is_caught():
    caught_then_clean(
        owed_stream_limbo_without_term,
        "unbounded-nojournal",
        FIRST,
        SEARCH,
        RULE,
        "check.fence_and_term",
    )


def unlisted_stream_without_term() -> AbstractContextManager[None]:
    """BP-46 phase one leaves an open stream that does not list the bookie at the term its
    disk has (a wiped disk: none): a takeover raised it there, then replaced it."""
    return _open_stream_without_term(owed=False)


UNLISTED_FIRST = 57  # first violating seed of `unbounded-nojournal-races` (searched if moved)


def test_a_boot_that_leaves_an_unlisted_stream_below_its_term_is_caught():
    # Reached through the displaced wipe (simcombos.py): none of 1,000 seeds before it.
    caught_then_clean(
        unlisted_stream_without_term,
        "unbounded-nojournal-races",
        UNLISTED_FIRST,
        SEARCH,
        RULE,
        "combo.displaced_wipe.done",
    )
