"""The oracle's invariant checks, one table row per rule (no simulation needed)."""

from __future__ import annotations

from embedlog.testing.oracle import Oracle
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType
from embedlog.wire.messages import AddFlags, OpCode, ReadFlags, Request, Response, pack_entries

DIGEST = Digester(DigestType.CRC32C, b"")


def entry(lid: int, eid: int, payload: bytes) -> bytes:
    return DIGEST.pack(lid, eid, -1, payload)


def oracle() -> Oracle:
    return Oracle(DIGEST.digest_len, lambda *e: None)


def add(o: Oracle, bookie: str, lid: int, eid: int, payload: bytes, flags: int = 0) -> None:
    req = Request(OpCode.ADD, 1, lid, eid, flags, body=entry(lid, eid, payload))
    o.sent("w", bookie, req)
    o.answered("w", bookie, req, Response.to(req, StatusCode.EOK, entry_id=eid))


def read(o: Oracle, bookie: str, lid: int, eid: int, status: int, body: bytes = b"") -> None:
    req = Request(OpCode.READ, 2, lid, eid, ReadFlags.RECOVERY)
    o.answered("r", bookie, req, Response.to(req, status, entry_id=eid, body=body))


def names(o: Oracle) -> list[str]:
    return [v.invariant for v in o.violations]


def test_a_negative_for_an_entry_the_bookie_acknowledged():
    o = oracle()
    add(o, "b1", 0, 3, b"x")
    read(o, "b2", 0, 3, StatusCode.ENOENTRY)  # another bookie: it never had it
    read(o, "b1", 0, 4, StatusCode.ENOENTRY)  # another entry
    read(o, "b1", 0, 3, StatusCode.EUNKNOWN)  # unknown is no negative
    assert names(o) == []
    read(o, "b1", 0, 3, StatusCode.ENOENTRY)
    read(o, "b1", 0, 9, StatusCode.ENOLEDGER)
    assert names(o) == ["NoNegativeForAckedEntry"] * 2


def test_two_payloads_for_one_id_written_or_read():
    o = oracle()
    add(o, "b1", 0, 0, b"a")
    add(o, "b2", 0, 0, b"a", AddFlags.RECOVERY)  # a write-back of the same bytes
    read(o, "b1", 0, 0, StatusCode.EOK, entry(0, 0, b"a"))
    assert names(o) == []
    add(o, "b3", 0, 0, b"b", AddFlags.RECOVERY)
    read(o, "b1", 0, 0, StatusCode.EOK, entry(0, 0, b"c"))
    assert names(o) == ["NoOutOfOrderEntries"] * 2


def test_a_close_below_an_acknowledged_entry_in_either_order():
    o = oracle()
    o.acknowledged(0, 5, b"p")
    o.ledger_closed(0, 5, "r")
    assert names(o) == []
    o.ledger_closed(1, 2, "r")
    o.acknowledged(1, 3, b"p")  # acknowledged after the close
    o.acknowledged(0, 6, b"p")
    o.ledger_closed(0, 4, "checker")  # closed twice, at two ends
    assert names(o) == ["NoDivergenceBetweenClientAndMetaData"] * 4


def test_acknowledged_entries_read_back_with_their_payload():
    o = oracle()
    o.acknowledged(0, 0, b"a")
    o.acknowledged(0, 1, b"b")
    o.read_back(0, {0: b"a", 1: b"b"}, 1, "checker")
    assert names(o) == []
    o.read_back(0, {0: b"a"}, 1, "checker")
    o.read_back(0, {0: b"z", 1: b"b"}, 1, "checker")
    assert names(o) == ["AllAckedEntriesAreReadable"] * 2


def test_a_negative_from_a_bookie_the_metadata_no_longer_makes_responsible():
    # Above a closed ledger's end (2 here) an entry is no part of the ledger: its writer
    # never had it acknowledged. (The simulation also counts write-set membership.)
    o = Oracle(DIGEST.digest_len, lambda *e: None, lambda lid, eid, bookie: eid <= 2)
    add(o, "b1", 0, 3, b"x")
    add(o, "b1", 0, 2, b"y")
    read(o, "b1", 0, 3, StatusCode.ENOENTRY)
    assert names(o) == []
    read(o, "b1", 0, 2, StatusCode.ENOENTRY)
    read(o, "b1", 0, 3, StatusCode.ENOLEDGER)
    assert names(o) == ["NoNegativeForAckedEntry"] * 2


def test_a_bookie_that_lost_data_keeps_its_duty_for_the_ledgers_its_boot_protected_only():
    o = oracle()
    add(o, "b1", 0, 3, b"x")  # ledger 0: the metadata listed b1 when it booted again
    add(o, "b1", 1, 5, b"y")  # ledger 1: it did not (an ensemble change still in flight)
    add(o, "b2", 1, 5, b"y")
    assert o.forget_lost("b1", protected=lambda lid: lid == 0) == [1]
    read(o, "b1", 1, 5, StatusCode.ENOENTRY)  # gone with the disk, and nothing can know
    read(o, "b1", 1, 5, StatusCode.ENOLEDGER)
    read(o, "b2", 1, 5, StatusCode.ENOENTRY)  # another bookie keeps its duty
    assert names(o) == ["NoNegativeForAckedEntry"]
    read(o, "b1", 0, 3, StatusCode.ENOENTRY)  # limbo must have answered "unknown"
    assert names(o) == ["NoNegativeForAckedEntry"] * 2
    add(o, "b1", 1, 6, b"z")  # acknowledged after the wipe: the rule holds again
    read(o, "b1", 1, 6, StatusCode.ENOENTRY)
    assert names(o) == ["NoNegativeForAckedEntry"] * 3


def read_batch(o: Oracle, bookie: str, lid: int, status: int, entries: list) -> None:
    req = Request(OpCode.READ_BATCH, 3, lid, entries[0][0] if entries else 0)
    o.answered("r", bookie, req, Response.to(req, status, body=pack_entries(entries)))


def test_every_entry_a_batch_read_serves_is_checked_and_it_never_answers_a_negative():
    o = oracle()
    add(o, "b1", 0, 0, b"a")
    add(o, "b1", 0, 1, b"b")
    read_batch(o, "b1", 0, StatusCode.EOK, [(0, entry(0, 0, b"a")), (1, entry(0, 1, b"b"))])
    read_batch(o, "b1", 0, StatusCode.EOK, [])  # leaving entries out says nothing
    read_batch(o, "b1", 0, StatusCode.EIO, [])
    assert names(o) == []
    read_batch(o, "b1", 0, StatusCode.EOK, [(0, entry(0, 0, b"a")), (1, entry(0, 1, b"x"))])
    assert names(o) == ["NoOutOfOrderEntries"]
    read_batch(o, "b2", 0, StatusCode.ENOENTRY, [])
    assert names(o) == ["NoOutOfOrderEntries", "NoNegativeForAckedEntry"]
