"""Bookie-side rules for unbounded ledgers, with raw requests to one bookie."""

from __future__ import annotations

import asyncio

import pytest

from embedlog.bookie.truncation import trim_above_body
from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_NOOP, Digester, DigestType, master_key
from embedlog.wire.messages import AddFlags, OpCode, Request, TrimFlags

LID = 77
KEY = master_key(b"")
DIGEST = Digester(DigestType.CRC32C)


def add(cluster, bookie, eid, term, *, flags=0, payload=b"x", lafr=-1, lac=-1):
    entry_flags = FLAG_NOOP if flags & AddFlags.NOOP else 0
    body = DIGEST.pack(LID, eid, lac, payload, entry_flags)
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


def write_lac(cluster, bookie, lac, term, lafr):
    req = Request(OpCode.WRITE_LAC, next_txn(), LID, lac, 0, term, 0, KEY, b"", lafr)
    return cluster.runtime.run(cluster.transport.request("raw", bookie, req, 5.0))


def test_a_write_lac_records_the_lafr_of_the_bookies_own_term_only(cluster):
    """A quiet writer's WRITE_LAC and a takeover's end carry the LAFR. A WRITE_LAC neither
    raises the bookie's term nor is refused for an old one, so a LAFR of another term
    (a deposed writer's) must not be recorded: the LAC still counts."""
    b = cluster.bookie_ids[0]
    for eid in range(3):
        assert add(cluster, b, eid, 2).status == StatusCode.EOK
    info = cluster.bookie(b).ledger_info
    assert write_lac(cluster, b, 1, 1, lafr=2).status == StatusCode.EOK  # term 1: deposed
    assert (info(LID).lafr, info(LID).explicit_lac) == (-1, 1)
    assert write_lac(cluster, b, 2, 3, lafr=2).status == StatusCode.EOK  # not raised yet
    assert (info(LID).lafr, info(LID).explicit_lac, info(LID).term) == (-1, 2, 2)
    assert write_lac(cluster, b, 2, 2, lafr=1).status == StatusCode.EOK  # its own term
    assert info(LID).lafr == 1
    assert write_lac(cluster, b, 2, 2, lafr=0).status == StatusCode.EOK  # never lowered
    assert info(LID).lafr == 1
    req = Request(OpCode.READ, next_txn(), LID, -1, 0, 3, 0, KEY)  # the next takeover's read
    resp = cluster.runtime.run(cluster.transport.request("raw", b, req, 5.0))
    assert (resp.status, resp.lafr) == (StatusCode.EOK, 1)


def test_an_add_answered_after_a_term_raise_carries_its_own_term(cluster):
    """An add of term 1 waits for the journal while a term-2 read raises the stored term.
    Its answer is term 1's acknowledgement and must say so: answering with the stored
    term would make the writer of term 1 discard its own ack as another term's."""
    b = cluster.bookie_ids[0]
    assert add(cluster, b, 0, 1).status == StatusCode.EOK
    cluster.stop_bookie(b)
    cluster.start_bookie(b, journal_max_group_wait=1.0)  # every answer waits 1 s for the journal

    async def raced():
        body = DIGEST.pack(LID, 1, -1, b"x")
        late = Request(OpCode.ADD, next_txn(), LID, 1, 0, 1, 0, KEY, body)
        raising = Request(OpCode.READ, next_txn(), LID, -1, 0, 2, 0, KEY)
        added = asyncio.ensure_future(cluster.transport.request("raw", b, late, 5.0))
        await asyncio.sleep(0.2)  # admitted at term 1, waiting for the journal
        raised = await cluster.transport.request("raw", b, raising, 5.0)
        return await added, raised

    added, raised = cluster.runtime.run(raced())
    assert (added.status, added.term) == (StatusCode.EOK, 1)
    assert (raised.status, raised.term) == (StatusCode.EOK, 2)
    assert cluster.bookie(b).ledger_info(LID).term == 2


def _fail_the_cut(cluster, bookie, above):
    """Make the bookie's index refuse any batch that deletes this ledger's entries above
    ``above``: the moment of a truncation where a crash comes between its parts."""
    index = cluster.bookie(bookie).storage.index
    real = index.commit

    def commit(locations, infos, deletes=(), checkpoint=None):
        deletes = list(deletes)
        if any(lid == LID and eid > above for lid, eid in deletes):
            raise OSError("injected: the bookie dies before its cut reaches the index")
        return real(locations, infos, deletes, checkpoint)

    index.commit = commit


def _trim_above(cluster, bookie, eid, term):
    body = trim_above_body(4)  # CRC32C
    req = Request(OpCode.TRIM, next_txn(), LID, eid, TrimFlags.ABOVE, term, 0, KEY, body)
    return cluster.runtime.run(cluster.transport.request("raw", bookie, req, 5.0))


@pytest.mark.parametrize("journal_write_data", [True, False])
@pytest.mark.parametrize("how", ["noop", "trim_above"])
def test_a_truncation_cut_short_by_a_crash_is_redone_not_skipped(
    make_cluster, how, journal_write_data
):
    """Whether a bookie applied this term's truncation (truncated_term) and the cut itself
    become durable together: a crash between them must not leave the flag that makes the
    retry a no-op while the older term's entries above the cut survive the reboot."""
    # No background flush: the cut's own flush is the one that would write the ledger
    # state (made dirty by the entries' LACs) with the flag in it.
    cluster = make_cluster(1, flush_interval=3600, journal_write_data=journal_write_data)
    b = cluster.bookie_ids[0]
    for eid in range(4):
        assert add(cluster, b, eid, 1, lac=eid - 1).status == StatusCode.EOK
    cluster.runtime.run(cluster.bookie(b).flush())  # the old term's entries are in the index
    assert add(cluster, b, 4, 1, lac=3).status == StatusCode.EOK  # and one in the cache

    noop = AddFlags.RECOVERY | AddFlags.TRUNCATE | AddFlags.NOOP

    def truncate():
        if how == "noop":
            return add(cluster, b, 2, 2, flags=noop, payload=b"")
        return _trim_above(cluster, b, 2, 2)

    _fail_the_cut(cluster, b, 2)
    assert truncate().status != StatusCode.EOK
    cluster.crash_bookie(b)
    cluster.start_bookie(b)
    # The flag only with its cut.
    after_reboot = cluster.bookie(b)
    if after_reboot.ledger_info(LID).truncated_term == 2:
        assert after_reboot.ledger_entries(LID) == [0, 1, 2]
    # The sender retries in the same term (its first attempt was not acknowledged).
    resp = truncate()
    assert (resp.status, resp.term) == (StatusCode.EOK, 2)
    assert cluster.bookie(b).ledger_entries(LID) == [0, 1, 2]
    assert cluster.bookie(b).ledger_info(LID).truncated_term == 2
    # What the retry skipped or did stays done across another crash.
    cluster.crash_bookie(b)
    cluster.start_bookie(b)
    assert cluster.bookie(b).ledger_entries(LID) == [0, 1, 2]
    assert cluster.bookie(b).ledger_info(LID).truncated_term == 2


def test_a_truncation_whose_cut_failed_is_made_by_the_retry(cluster):
    """No crash this time: the disk refuses the cut once and the bookie keeps serving.
    The flag goes back with the failed cut, so the sender's retry in the same term cuts;
    kept, it would make the retry answer EOK over the older term's entries."""
    b = cluster.bookie_ids[0]
    for eid in range(5):
        assert add(cluster, b, eid, 1, lac=eid - 1).status == StatusCode.EOK
    cluster.runtime.run(cluster.bookie(b).flush())
    index = cluster.bookie(b).storage.index
    healthy = index.commit
    _fail_the_cut(cluster, b, 2)
    assert _trim_above(cluster, b, 2, 2).status != StatusCode.EOK
    index.commit = healthy  # the disk is back
    resp = _trim_above(cluster, b, 2, 2)
    assert (resp.status, resp.term) == (StatusCode.EOK, 2)
    assert cluster.bookie(b).ledger_entries(LID) == [0, 1, 2]
