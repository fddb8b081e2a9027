"""The stream layer's invariants (oracle_streams.py) as tables of small histories: what
each rule must flag, and the histories it must let pass (commits and trims that
overlap, limits that justify a trim, answers on the wire when a delete returned)."""

from __future__ import annotations

from collections import Counter

import pytest

from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.testing.oracle_streams import (
    CURSOR_RULE,
    DELETE_RULE,
    RETENTION_RULE,
    StreamRules,
)
from embedlog.unbounded.retention import Retention
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, Response

LID = 7


class History:
    """A StreamRules fed by hand, with a clock the test moves."""

    def __init__(self, retention: Retention | None = None, overrides: bool = False) -> None:
        self.now = 0.0
        self.acked: dict[int, dict[int, tuple[bytes, int, str]]] = {}
        self.violations: list[tuple[str, str]] = []
        self.rules = StreamRules(
            lambda: self.now,
            lambda rule, detail: self.violations.append((rule, detail)),
            self.acked,
            Counter(),
        )
        self.rules.created(LID, retention, overrides)

    def ack(self, eid: int, payload: bytes | None = None, *, at: float | None = None) -> bytes:
        """An append of ``payload`` (at ``at``), sent to the bookies and acknowledged now."""
        payload = payload if payload is not None else b"p%03d" % eid
        before, self.now = self.now, at if at is not None else self.now
        self.rules.appended(payload)
        self.now = before
        self.rules.sent(LID, eid, payload)
        self.acked.setdefault(LID, {})[eid] = (payload, 1, "w")
        self.rules.acknowledged(LID, eid, payload, "w")
        return payload

    def commit(self, cursor: str, at: int, *, force: bool = False, ok: bool = True) -> None:
        op = self.rules.commit_started(LID, cursor, at, force)
        self.rules.commit_returned(op, ok=ok)

    def rules_of(self) -> list[str]:
        return [rule for rule, _ in self.violations]


# -- NoTrimPassesACommittedCursor ------------------------------------------------------------


def test_a_trim_past_a_commit_that_returned_is_flagged():
    h = History(Retention(max_entries=2))
    for e in range(10):
        h.ack(e)
    h.commit("c", 3)
    h.rules.first_kept(LID, 4)  # up to x + 1: allowed
    assert h.violations == []
    h.rules.first_kept(LID, 6)
    assert h.rules_of() == [CURSOR_RULE]
    assert "cursor 'c', committed at 3" in h.violations[0][1]


def test_a_trim_that_landed_before_the_commit_returned_is_not_judged_by_it():
    h = History(Retention(max_entries=2))
    for e in range(10):
        h.ack(e)
    op = h.rules.commit_started(LID, "c", 1, False)
    h.rules.first_kept(LID, 6)  # the trim's compare-and-swap applied while the commit ran
    h.rules.commit_returned(op, ok=True)
    assert h.violations == []
    h.rules.first_kept(LID, 8)  # a later trim: past x + 1 = 2
    assert h.rules_of() == [CURSOR_RULE]


@pytest.mark.parametrize(
    "history",
    [
        "overrides",  # retention_overrides_cursors=True
        "force in flight",  # the cursor may move back while the trim decides
        "deleted cursor",
        "failed commit",  # its outcome is unknown: no promise
        "manual trim",  # trim() passes cursors by design
    ],
)
def test_no_promise_no_violation(history):
    h = History(Retention(max_entries=2), overrides=history == "overrides")
    for e in range(10):
        h.ack(e)
    if history == "force in flight":
        h.commit("c", 3)
        h.rules.commit_started(LID, "c", 1, True)  # not returned yet
    elif history == "deleted cursor":
        h.commit("c", 3)
        h.rules.commit_returned(h.rules.commit_started(LID, "c", None, False), ok=True)
    elif history == "failed commit":
        h.commit("c", 3, ok=False)
    elif history == "manual trim":
        h.commit("c", 3)
        h.rules.trimmed_by_hand(LID)
    else:
        h.commit("c", 3)
    h.rules.first_kept(LID, 8)
    assert CURSOR_RULE not in h.rules_of()


def test_a_commit_that_may_have_moved_the_cursor_forward_lets_trims_follow_it():
    h = History(Retention(max_entries=2))
    for e in range(10):
        h.ack(e)
    h.commit("c", 1)
    h.commit("c", 4, ok=False)  # a ConnectionLoss: it may have applied
    h.rules.first_kept(LID, 5)
    assert h.violations == []
    h.rules.commit_started(LID, "c", 6, False)  # in flight: may have landed
    h.rules.first_kept(LID, 7)
    assert h.violations == []
    h.rules.first_kept(LID, 8)
    assert h.rules_of() == [CURSOR_RULE]


def test_a_force_commit_that_returned_protects_its_own_position():
    h = History(Retention(max_entries=2))
    for e in range(10):
        h.ack(e)
    h.commit("c", 5)
    h.commit("c", 2, force=True)
    h.rules.first_kept(LID, 4)
    assert h.rules_of() == [CURSOR_RULE]


def test_a_force_commit_that_ran_beside_another_commit_settles_at_the_higher_of_them():
    # Seed 4848 of unbounded-streams: a force commit back to 2 applied first and was
    # answered last; a forward commit to 14, invoked while it was in flight, applied
    # after it and returned first. The cursor is at 14: a trim to 15 passes nothing.
    h = History(Retention(max_entries=2))
    for e in range(20):
        h.ack(e)
    h.commit("a", 18)
    back = h.rules.commit_started(LID, "a", 2, True)
    h.commit("a", 14)
    h.rules.commit_returned(back, ok=True)
    h.rules.first_kept(LID, 15)
    assert h.violations == []
    # Both moves are done: the cursor is at 2 or at 14, whatever it was before them.
    h.rules.first_kept(LID, 16)
    assert h.rules_of() == [CURSOR_RULE]


def test_a_commit_that_ran_beside_a_delete_of_its_cursor_protects_nothing():
    # The delete may have been applied after the commit's write, though it returned
    # first: the cursor may be gone, and a trim may pass where it was.
    h = History(Retention(max_entries=2))
    for e in range(30):
        h.ack(e)
    delete = h.rules.commit_started(LID, "a", None, False)
    commit = h.rules.commit_started(LID, "a", 14, False)
    h.rules.commit_returned(delete, ok=True)
    h.rules.commit_returned(commit, ok=True)
    h.rules.first_kept(LID, 18)
    assert h.violations == []
    # A commit with nothing beside it protects its position again.
    h.commit("a", 18)
    h.rules.first_kept(LID, 20)
    assert h.rules_of() == [CURSOR_RULE]


# -- RetentionTrimsOnlyBeyondItsLimits -------------------------------------------------------


@pytest.mark.parametrize(
    ("retention", "first", "flagged"),
    [
        (Retention(max_entries=4), 6, False),  # ids 6..9 kept: 4 entries
        (Retention(max_entries=4), 7, True),  # 3 kept
        (Retention(max_bytes=16), 6, False),  # 4 payloads of 4 bytes kept
        (Retention(max_bytes=16), 7, True),  # 12 bytes kept
        (Retention(max_age=5.0), 3, False),  # 0..2 appended at 0-2 s, trimmed at 10 s
        (Retention(max_age=5.0), 8, True),  # entry 7 was appended at 7 s
        (None, 1, True),  # no retention, nobody trimmed
        (Retention(max_entries=8, max_age=5.0), 5, False),  # age alone justifies it
        (Retention(max_entries=8, max_age=5.0), 7, True),  # entry 6: 4 s before the trim
    ],
)
def test_a_trim_needs_one_limit_that_justifies_it(retention, first, flagged):
    h = History(retention)
    for e in range(10):
        h.ack(e, at=float(e))
    h.now = 10.0
    h.rules.first_kept(LID, first)
    assert (h.rules_of() == [RETENTION_RULE]) is flagged, h.violations


def test_max_entries_counts_no_ops_of_takeovers_as_nothing():
    h = History(Retention(max_entries=4))
    for e in range(6):
        h.ack(e)
    h.rules.took_over(LID, 6)  # the new term's no-op
    h.rules.first_kept(LID, 3)  # kept: 3, 4, 5 and the no-op: 3 entries
    assert h.rules_of() == [RETENTION_RULE]


def test_max_bytes_counts_an_unacknowledged_id_at_its_longest_payload_sent():
    h = History(Retention(max_bytes=12))
    for e in range(4):
        h.ack(e)
    h.rules.sent(LID, 4, b"x" * 8)  # on its way: may be in the stream
    h.rules.first_kept(LID, 3)  # 4 bytes acknowledged + at most 8 on the way
    assert h.violations == []


# -- DeletedLedgerAcknowledgesNothing --------------------------------------------------------


def test_an_append_invoked_after_the_delete_returned_must_not_be_acknowledged():
    h = History()
    h.ack(0)
    early = b"appended before the delete returned"
    h.rules.appended(early)
    h.rules.delete_returned(LID)
    h.rules.acknowledged(LID, 1, early, "w")  # its answers were on the wire: allowed
    assert h.violations == []
    late = b"appended after"
    h.rules.appended(late)
    h.rules.acknowledged(LID, 2, late, "w")
    assert h.rules_of() == [DELETE_RULE]


def test_a_commit_invoked_after_the_delete_returned_must_fail():
    h = History()
    overlapping = h.rules.commit_started(LID, "c", 0, False)
    h.rules.delete_returned(LID)
    h.rules.commit_returned(overlapping, ok=True)
    assert h.violations == []
    h.commit("c", 1, ok=False)
    assert h.violations == []
    h.commit("c", 1)
    assert h.rules_of() == [DELETE_RULE]


def test_a_deleted_stream_leaves_no_cursor_or_sink_record():
    store = MemoryMetadataStore()
    h = History()
    h.rules.delete_returned(LID)
    h.rules.check_end(store)
    assert h.violations == []
    store.create(f"/streams/cursors/{LID:020d}/ghost", b"3")
    h.rules.check_end(store)
    assert h.rules_of() == [DELETE_RULE]
    assert "ghost" in h.violations[0][1]


def _add(eid: int) -> Request:
    return Request(OpCode.ADD, eid, LID, eid)


def _ok(req: Request) -> Response:
    return Response(req.op, req.txn, StatusCode.EOK, LID, req.entry_id)


def test_a_bookie_that_dropped_the_ledger_refuses_adds_sent_after_the_delete():
    h = History()
    delete = Request(OpCode.DELETE_LEDGER, 1, LID)
    h.rules.answered("b1", delete, _ok(delete))
    before = _add(3)
    h.rules.request_sent("b1", before)  # sent before the delete returned
    h.rules.delete_returned(LID)
    after, elsewhere = _add(4), _add(5)
    h.rules.request_sent("b1", after)
    h.rules.request_sent("b2", elsewhere)  # b2 never answered the delete
    h.rules.answered("b1", before, _ok(before))
    h.rules.answered("b2", elsewhere, _ok(elsewhere))
    assert h.violations == []
    h.rules.answered("b1", after, _ok(after))
    assert h.rules_of() == [DELETE_RULE]
    # A bookie that lost its disks lost its tombstones too.
    h.rules.lost_disks("b1")
    again = _add(6)
    h.rules.request_sent("b1", again)
    h.rules.answered("b1", again, _ok(again))
    assert len(h.violations) == 1
