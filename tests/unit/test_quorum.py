"""The quorum rules against the tables in the seed documents."""

import pytest

from embedlog.ledger.quorum import (
    Decision,
    fencing_decision,
    quorum_coverage,
    recovery_read_decision,
)
from embedlog.metadata.striping import write_set, write_set_bookies


def test_write_sets_e4_wq3_match_the_protocol_table():
    # replication-protocol.md: E=4, WQ=3, ensemble B1..B4.
    ensemble = ["B1", "B2", "B3", "B4"]
    table = {
        0: ["B1", "B2", "B3"],
        1: ["B2", "B3", "B4"],
        2: ["B3", "B4", "B1"],
        3: ["B4", "B1", "B2"],
        4: ["B1", "B2", "B3"],
        5: ["B2", "B3", "B4"],
    }
    for entry, expected in table.items():
        assert write_set_bookies(entry, ensemble, 3) == expected


def test_wq_equal_e_has_one_write_set_order_independent():
    assert {frozenset(write_set(e, 3, 3)) for e in range(10)} == {frozenset({0, 1, 2})}


@pytest.mark.parametrize(
    ("wq", "aq", "negatives"),
    [(2, 1, 2), (2, 2, 1), (3, 1, 3), (3, 2, 2), (3, 3, 1), (4, 2, 3), (4, 3, 2), (4, 4, 1)],
)
def test_negative_thresholds_match_closing_ledgers_safely_table(wq, aq, negatives):
    assert quorum_coverage(wq, aq) == negatives
    # One fewer negative with the rest unknown is never enough to close.
    assert (
        recovery_read_decision(
            wq, aq, positive=0, negative=negatives - 1, unknown=wq - negatives + 1
        )
        is Decision.STUCK
    )
    assert recovery_read_decision(wq, aq, 0, negatives, 0) is Decision.NO


def test_one_positive_recovers_an_entry_even_after_negatives():
    assert recovery_read_decision(3, 2, positive=1, negative=1, unknown=1) is Decision.YES


def test_unknowns_are_never_negatives():
    # Figure 9: all unknown -> abort, not close.
    assert recovery_read_decision(3, 2, 0, 0, 3) is Decision.STUCK
    # Figure 10: one negative, one unknown, one outstanding -> wait.
    assert recovery_read_decision(3, 2, 0, 1, 1) is Decision.PENDING


# (E, WQ, AQ, positive slots, unknown slots, decision); unlisted slots have not answered.
FENCING_TABLE = [
    # E == WQ: one write set, the whole ensemble; the old E - AQ + 1 rule.
    (3, 3, 2, {0, 1}, set(), Decision.YES),
    (3, 3, 2, {0}, set(), Decision.PENDING),
    (3, 3, 2, {0}, {1}, Decision.PENDING),
    (3, 3, 2, set(), {1, 2}, Decision.STUCK),
    (3, 3, 3, {2}, {0, 1}, Decision.YES),
    (3, 3, 1, {0, 1}, set(), Decision.PENDING),
    (3, 3, 1, {0, 1}, {2}, Decision.STUCK),
    # E5 WQ2 AQ2, two non-adjacent bookies down: every write set keeps one fenced bookie
    # (E - AQ + 1 = 4 over the ensemble would have been stuck).
    (5, 2, 2, {1, 3, 4}, {0, 2}, Decision.YES),
    (5, 2, 2, {1, 3}, {0, 2}, Decision.PENDING),  # write set {4, 0} waits for 4
    # Two adjacent bookies down: write set {0, 1} is an ack quorum nobody fenced.
    (5, 2, 2, {2, 3, 4}, {0, 1}, Decision.STUCK),
    (5, 2, 2, {2, 3}, {4, 0}, Decision.STUCK),  # wraps round: write set {4, 0}
    # E6 WQ3 AQ2 (QC 2): bookies 0 and 3 down leave each write set two answers.
    (6, 3, 2, {1, 2, 4, 5}, {0, 3}, Decision.YES),
    (6, 3, 2, {1, 3, 4, 5}, {0, 2}, Decision.STUCK),  # write set {0, 1, 2}
    # E5 WQ3 AQ3 (QC 1): two fenced bookies can touch all five write sets.
    (5, 3, 3, {0, 3}, set(), Decision.YES),
    (5, 3, 3, {0, 1}, set(), Decision.PENDING),  # write set {2, 3, 4} has none
    (5, 3, 3, {4}, {1, 2, 3}, Decision.STUCK),
    # E5 WQ2 AQ1 (QC 2): every bookie must be fenced, one unknown is enough to be stuck.
    (5, 2, 1, {0, 1, 2, 3}, set(), Decision.PENDING),
    (5, 2, 1, {0, 1, 2, 3}, {4}, Decision.STUCK),
    (5, 2, 1, {0, 1, 2, 3, 4}, set(), Decision.YES),
]


@pytest.mark.parametrize(("e", "wq", "aq", "positive", "unknown", "expected"), FENCING_TABLE)
def test_fencing_needs_quorum_coverage_in_every_write_set(e, wq, aq, positive, unknown, expected):
    assert fencing_decision(e, wq, aq, positive, unknown) is expected


def _slot_states(e):
    """Every way E bookies can stand: each positive (+), unknown (?) or not answered (.)."""
    from itertools import product

    for states in product("+?.", repeat=e):
        yield (
            {i for i, s in enumerate(states) if s == "+"},
            {i for i, s in enumerate(states) if s == "?"},
        )


def test_fencing_with_e_equal_wq_is_the_ensemble_coverage_rule():
    """With one write set, the rule is the old count: E - AQ + 1 positives, AQ unknowns."""
    for e in range(1, 6):
        for aq in range(1, e + 1):
            for positive, unknown in _slot_states(e):
                if len(positive) >= e - aq + 1:
                    old = Decision.YES
                elif len(unknown) >= aq:
                    old = Decision.STUCK
                else:
                    old = Decision.PENDING
                assert fencing_decision(e, e, aq, positive, unknown) is old


def test_fencing_decision_matches_its_definition_over_ack_quorums():
    """YES iff every ack quorum inside a write set has a fenced member; STUCK iff one
    such ack quorum is wholly unknown (BookKeeper's RRQuorumCoverageSet)."""
    from itertools import combinations

    for e in range(1, 7):
        for wq in range(1, e + 1):
            for aq in range(1, wq + 1):
                quorums = [
                    set(q) for first in range(e) for q in combinations(write_set(first, e, wq), aq)
                ]
                for positive, unknown in _slot_states(e):
                    if all(q & positive for q in quorums):
                        expected = Decision.YES
                    elif any(q <= unknown for q in quorums):
                        expected = Decision.STUCK
                    else:
                        expected = Decision.PENDING
                    assert fencing_decision(e, wq, aq, positive, unknown) is expected, (
                        e,
                        wq,
                        aq,
                        positive,
                        unknown,
                    )


def test_every_ack_quorum_meets_a_coverage_set():
    """The definition behind the numbers: QC/EC members hit every ack quorum."""
    from itertools import combinations

    for cohort in range(1, 6):
        for aq in range(1, cohort + 1):
            need = cohort - aq + 1
            members = range(cohort)
            for chosen in combinations(members, need):
                for quorum in combinations(members, aq):
                    assert set(chosen) & set(quorum)
            # and one fewer leaves some ack quorum untouched
            if need > 1:
                chosen = set(range(need - 1))
                assert any(not (chosen & set(q)) for q in combinations(members, aq))
