"""The quorum rules against the tables in the seed documents."""

import pytest

from embedlog.ledger.quorum import (
    Decision,
    ensemble_coverage,
    fencing_decision,
    quorum_coverage,
    recovery_read_decision,
    write_set,
    write_set_bookies,
)


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


@pytest.mark.parametrize(("e", "aq", "ec"), [(3, 2, 2), (3, 3, 1), (5, 2, 4), (4, 3, 2), (3, 1, 3)])
def test_ensemble_coverage(e, aq, ec):
    assert ensemble_coverage(e, aq) == ec
    assert fencing_decision(e, aq, fenced=ec, unknown=0) is Decision.YES
    assert fencing_decision(e, aq, fenced=ec - 1, unknown=0) is Decision.PENDING
    # Once AQ bookies are unknown, some ack quorum may stay unfenced: stuck.
    assert fencing_decision(e, aq, fenced=0, unknown=aq) is Decision.STUCK
    assert fencing_decision(e, aq, fenced=0, unknown=aq - 1) is Decision.PENDING


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
