"""Invariant 4 (AllCommittedEntriesReachAckQuorum): the rule, and a copy gone missing, in
bounded ledgers and in streams."""

from __future__ import annotations

import pytest

from embedlog.errors import NoSuchLedgerInMetadataError
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.testing.ackquorum import (
    entry_payload,
    exempt,
    missing_copies,
    short_of_ack_quorum,
)
from embedlog.wire.entry import FLAG_NOOP, FLAG_TERM, HEADER, TERM, DigestType

WS = ("b1", "b2", "b3")


@pytest.mark.parametrize(
    ("holders", "lost", "short"),
    [
        ({"b1", "b2", "b3"}, set(), False),
        ({"b1", "b2"}, set(), False),  # AQ = 2 copies is enough
        ({"b1"}, set(), True),
        ({"b1", "b4"}, set(), True),  # a copy outside the write set does not count
        ({"b1"}, {"b2"}, True),  # one lost disk (AQ - 1): still owed
        ({"b1"}, {"b2", "b3"}, False),  # AQ lost disks: exempt
        (set(), {"b1", "b4"}, True),  # a lost disk outside the write set changes nothing
    ],
)
def test_short_of_ack_quorum(holders, lost, short):
    assert short_of_ack_quorum(holders, WS, 2, lost) is short
    assert exempt(WS, 2, lost) is (len(set(WS) & lost) >= 2)


def ledger(**kw) -> LedgerMetadata:
    md = LedgerMetadata(
        ledger_id=7,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        fragments=((0, WS),),
        digest_type=DigestType.CRC32C,
    )
    return md.evolve(**kw)


def test_a_deleted_copy_is_found_and_entries_past_the_end_are_not_owed():
    copies = {b: {0: b"p0", 1: b"p1", 2: b"p2"} for b in WS}
    acked = {7: {0: b"p0", 1: b"p1", 2: b"p2"}}
    md = ledger(state=LedgerState.CLOSED, last_entry_id=1)

    def stored(b: str, lid: int, eid: int) -> bytes | None:
        return copies[b].get(eid)

    assert missing_copies(acked, lambda _l: md, stored, set()) == []
    del copies["b1"][1], copies["b2"][1]  # entry 1 keeps one copy
    copies["b3"][0] = b"other"  # a different payload is no copy
    del copies["b1"][2], copies["b2"][2], copies["b3"][2]  # above the end: not owed
    short = missing_copies(acked, lambda _l: md, stored, set())
    assert [(s.entry_id, s.holders) for s in short] == [(1, ("b3",))]
    assert missing_copies(acked, lambda _l: md, stored, {"b1", "b2"}) == []  # exempt

    def deleted(_lid: int) -> LedgerMetadata:
        raise NoSuchLedgerInMetadataError("gone")

    assert missing_copies(acked, deleted, stored, set()) == []


def stream(**kw) -> LedgerMetadata:
    # Two fragments; a trim dropped the first one (entries 0..3).
    return ledger(unbounded=True, term=2, fragments=((4, WS), (8, ("b2", "b3", "b4")))).evolve(**kw)


def test_streams_owe_copies_above_the_trim_point_only():
    acked = {7: {e: b"p%d" % e for e in range(10)}}
    copies = {b: {e: b"p%d" % e for e in range(10)} for b in (*WS, "b4")}

    def stored(b: str, lid: int, eid: int) -> bytes | None:
        return copies[b].get(eid)

    md = stream()
    for b in copies:  # trimmed: gone everywhere, on purpose
        for e in range(4):
            del copies[b][e]
    assert missing_copies(acked, lambda _l: md, stored, set()) == []
    del copies["b2"][9], copies["b3"][9]  # entry 9 of the second fragment: b4 only
    del copies["b1"][5]  # entry 5: b2 and b3 still hold it
    short = missing_copies(acked, lambda _l: md, stored, set())
    assert [(s.entry_id, s.write_set, s.holders) for s in short] == [
        (9, ("b2", "b3", "b4"), ("b4",))
    ]


@pytest.mark.parametrize(
    ("flags", "body", "payload"),
    [
        (0, b"app", b"app"),  # a bounded ledger's entry
        (FLAG_TERM, TERM.pack(3) + b"app", b"app"),  # a stream's: its term comes first
        (FLAG_TERM | FLAG_NOOP, TERM.pack(3), None),  # a takeover's no-op is nobody's
    ],
)
def test_a_stored_entry_is_compared_by_its_application_payload(flags, body, payload):
    digest = b"\0" * 4
    data = HEADER.pack(7, 1, 0, flags) + digest + body
    assert entry_payload(data, HEADER.size + len(digest)) == payload
