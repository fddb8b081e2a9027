"""Bookie-side rules for unbounded ledgers, with raw requests to one bookie."""

from __future__ import annotations

from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_NOOP, Digester, DigestType, master_key
from embedlog.wire.messages import AddFlags, OpCode, Request

LID = 77
KEY = master_key(b"")
DIGEST = Digester(DigestType.CRC32C)


def add(cluster, bookie, eid, term, *, flags=0, payload=b"x", lafr=-1):
    entry_flags = FLAG_NOOP if flags & AddFlags.NOOP else 0
    body = DIGEST.pack(LID, eid, -1, payload, entry_flags)
    req = Request(OpCode.ADD, next_txn(), LID, eid, flags, term, 0, KEY, body, lafr)
    return cluster.runtime.run(cluster.transport.request("raw", bookie, req, 5.0))


def test_a_delayed_duplicate_of_the_noop_does_not_truncate_the_new_terms_entries(cluster):
    b = cluster.bookie_ids[0]
    for eid in range(4):
        assert add(cluster, b, eid, 1).status == StatusCode.EOK
    noop = AddFlags.RECOVERY | AddFlags.TRUNCATE | AddFlags.NOOP
    assert add(cluster, b, 2, 2, flags=noop, payload=b"").status == StatusCode.EOK
    assert cluster.bookie(b).ledger_entries(LID) == [0, 1, 2]  # the old term's 3 is gone
    for eid in (3, 4):  # the new term appends
        assert add(cluster, b, eid, 2, payload=b"new").status == StatusCode.EOK
    # The no-op's first copy, delayed in the network, arrives after its retry was acked.
    resp = add(cluster, b, 2, 2, flags=noop, payload=b"")
    assert resp.status == StatusCode.EOK and resp.term == 2
    assert cluster.bookie(b).ledger_entries(LID) == [0, 1, 2, 3, 4]
    # The next term's no-op truncates again.
    assert add(cluster, b, 3, 3, flags=noop, payload=b"").status == StatusCode.EOK
    assert cluster.bookie(b).ledger_entries(LID) == [0, 1, 2, 3]
    assert add(cluster, b, 4, 2).status == StatusCode.EINVALIDTERM


def test_adds_record_the_lafr_and_answers_carry_the_request_term(cluster):
    b = cluster.bookie_ids[0]
    assert add(cluster, b, 0, 1, lafr=-1).term == 1
    assert add(cluster, b, 1, 1, lafr=0).status == StatusCode.EOK
    assert cluster.bookie(b).ledger_info(LID).lafr == 0
    req = Request(OpCode.READ, next_txn(), LID, -1, 0, 2, 0, KEY)  # LAFR read, term 2
    resp = cluster.runtime.run(cluster.transport.request("raw", b, req, 5.0))
    assert (resp.status, resp.term, resp.lafr) == (StatusCode.EOK, 2, 0)
    assert add(cluster, b, 2, 1).status == StatusCode.EINVALIDTERM
