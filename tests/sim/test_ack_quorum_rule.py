"""AckedByAckQuorum (oracle_quorum.py): at each acknowledgement, AQ distinct bookies of
the entry's write set in the metadata as it is then answered an add of that payload."""

from __future__ import annotations

from collections import Counter

import pytest

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_quorum import RULE, AckQuorumRule
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import DigestType
from embedlog.wire.messages import OpCode, Request, Response, pack_entries, pack_results

LID = 7
MD = LedgerMetadata(
    ledger_id=LID,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    fragments=((0, ("b1", "b2", "b3")), (10, ("b1", "b4", "b3"))),
    digest_type=DigestType.CRC32C,
)


def rule() -> tuple[AckQuorumRule, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    # Entries here are their payloads (no header): the rule only compares them.
    return AckQuorumRule(bytes, lambda r, d: seen.append((r, d)), Counter()), seen


def add(r: AckQuorumRule, bookie: str, eid: int, payload: bytes, ok: bool = True) -> None:
    req = Request(OpCode.ADD, 1, LID, eid, body=payload)
    status = StatusCode.EOK if ok else StatusCode.EFENCED
    r.answered(bookie, req, Response(OpCode.ADD, 1, status, LID, eid))


@pytest.mark.parametrize(
    ("answers", "eid", "short"),
    [
        ([("b1", b"p"), ("b2", b"p")], 0, False),  # entry 0's write set: b1, b2
        ([("b1", b"p")], 0, True),
        ([("b1", b"p"), ("b3", b"p")], 0, True),  # b3 holds no copy of entry 0
        ([("b1", b"p"), ("b2", b"q")], 0, True),  # another payload is no copy
        ([("b1", b"p"), ("b2", b"p"), ("b2", b"p")], 0, False),
        ([("b1", b"p"), ("b2", b"p")], 10, True),  # entry 10 moved to b4, b3
        ([("b3", b"p"), ("b4", b"p")], 10, False),
    ],
)
def test_an_ack_needs_aq_add_answers_from_the_write_set(answers, eid, short):
    r, seen = rule()
    for bookie, payload in answers:
        add(r, bookie, eid, payload)
    r.acknowledged(LID, eid, b"p", MD, "w")
    assert [x[0] for x in seen] == ([RULE] if short else [])


def test_a_refused_add_counts_nothing_and_a_batch_counts_each_entry():
    r, seen = rule()
    add(r, "b1", 0, b"p", ok=False)
    add(r, "b2", 0, b"p")
    r.acknowledged(LID, 0, b"p", MD, "w")
    assert len(seen) == 1
    batch = Request(OpCode.ADD_BATCH, 2, LID, 1, body=pack_entries([(1, b"x"), (2, b"y")]))
    results = pack_results([(StatusCode.EOK, 0), (StatusCode.EFENCED, 0)])
    for bookie in ("b2", "b3"):  # entry 1: b2, b3; entry 2: b3, b1
        r.answered(
            bookie, batch, Response(OpCode.ADD_BATCH, 2, StatusCode.EOK, LID, 1, body=results)
        )
    add(r, "b1", 2, b"y")
    r.acknowledged(LID, 1, b"x", MD, "w")
    r.acknowledged(LID, 2, b"y", MD, "w")
    assert len(seen) == 2 and "7:2" in seen[1][1]


def test_an_entry_trimmed_before_its_ack_is_not_judged():
    r, seen = rule()
    r.acknowledged(LID, 3, b"p", MD.evolve(fragments=((10, ("b1", "b4", "b3")),)), "w")
    assert seen == []
