"""ADD_BATCH on the bookie: each entry is a plain add of its own, one answer for all."""

from __future__ import annotations

import asyncio

import pytest
from harness import KEY, entry

from embedlog.bookie.bookie import parse_batch
from embedlog.transport.base import next_txn
from embedlog.transport.server import BookieGoneError
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    AddFlags,
    FrameError,
    OpCode,
    ReadFlags,
    Request,
    pack_entries,
    unpack_results,
)

LONG = 3600.0


def batch(lid: int, entries: list[tuple[int, bytes]], **kw) -> Request:
    kw.setdefault("master_key", KEY)
    return Request(
        OpCode.ADD_BATCH, next_txn(), lid, entries[0][0], body=pack_entries(entries), **kw
    )


def test_a_batch_stores_every_entry_and_answers_each(harness):
    h = harness()
    h.boot()
    entries = [(e, entry(1, e, b"p%d" % e, lac=e - 1)) for e in (0, 2, 3, 5)]  # any ids
    resp = h.run(h.serve(batch(1, entries)))
    assert resp.status == StatusCode.EOK
    assert unpack_results(resp.body) == [(StatusCode.EOK, -1)] * 4
    for e, body in entries:
        assert h.read(1, e).body == body


def test_each_entry_gets_its_own_verdict(harness):
    h = harness()
    h.boot()
    good, wrong_id = entry(1, 0, b"a"), entry(1, 9, b"b")  # header says 9, batch says 1
    resp = h.run(h.serve(batch(1, [(0, good), (1, wrong_id)])))
    assert resp.status == StatusCode.EBADREQ  # the first failure's code
    assert [s for s, _ in unpack_results(resp.body)] == [StatusCode.EOK, StatusCode.EBADREQ]
    assert h.read(1, 0).status == StatusCode.EOK
    assert h.read(1, 1).status == StatusCode.ENOENTRY


def test_a_fenced_ledger_refuses_a_batch_unless_it_is_recovery(harness):
    h = harness()
    h.boot()
    assert h.add(1, 0).status == StatusCode.EOK
    assert h.read(1, -1, flags=ReadFlags.FENCE).status == StatusCode.EOK
    entries = [(1, entry(1, 1)), (2, entry(1, 2))]
    resp = h.run(h.serve(batch(1, entries)))
    assert [s for s, _ in unpack_results(resp.body)] == [StatusCode.EFENCED] * 2
    resp = h.run(h.serve(batch(1, entries, flags=AddFlags.RECOVERY)))
    assert resp.status == StatusCode.EOK


def test_malformed_batches_are_bad_requests(harness):
    h = harness()
    h.boot()
    dup = batch(1, [(0, entry(1, 0)), (0, entry(1, 0))])
    assert h.run(h.serve(dup)).status == StatusCode.EBADREQ
    cut = Request(OpCode.ADD_BATCH, next_txn(), 1, 0, master_key=KEY, body=b"\x00\x01")
    assert h.run(h.serve(cut)).status == StatusCode.EBADREQ
    trunc = batch(1, [(0, entry(1, 0))], flags=AddFlags.TRUNCATE)
    assert h.run(h.serve(trunc)).status == StatusCode.EBADREQ
    assert h.read(1, 0).status in (StatusCode.ENOLEDGER, StatusCode.ENOENTRY)
    # Each refusal counts (bookie_rejected_requests); a read's negative answer does not.
    assert h.bookie is not None and h.bookie.metrics.rejected_requests == 3


def test_a_crash_before_the_fsync_answers_the_batch_with_nothing(harness):
    h = harness(flush_interval=LONG, journal_max_group_wait=5.0)
    h.boot()

    async def send_and_crash():
        t = asyncio.ensure_future(h.serve(batch(7, [(0, entry(7, 0)), (1, entry(7, 1))])))
        await asyncio.sleep(0.05)
        assert not t.done()  # not durable yet: no answer
        h.bookie.crash()
        return await asyncio.gather(t, return_exceptions=True)

    [result] = h.run(send_and_crash())
    assert isinstance(result, BookieGoneError)
    h.boot()
    assert h.read(7, 0).status == StatusCode.ENOLEDGER


def test_a_batch_is_admitted_once_with_the_verdict_a_single_add_would_get(harness):
    """The ledger's checks run once per batch: each entry must get what it would have
    got alone (term, password, read-only), and one raising the term raises it once."""
    h = harness()
    h.boot()
    entries = [(0, entry(3, 0)), (1, entry(3, 1))]
    resp = h.run(h.serve(batch(3, entries, term=5)))
    assert unpack_results(resp.body) == [(StatusCode.EOK, 5)] * 2
    stale = h.run(h.serve(batch(3, [(2, entry(3, 2))], term=4)))
    assert stale.status == StatusCode.EINVALIDTERM
    assert unpack_results(stale.body) == [(StatusCode.EINVALIDTERM, 5)]
    wrong = h.run(h.serve(batch(3, [(2, entry(3, 2))], term=5, master_key=b"k" * 20)))
    assert [s for s, _ in unpack_results(wrong.body)] == [StatusCode.EUA]
    assert h.read(3, 2).status == StatusCode.ENOENTRY
    h.bookie.readonly = True
    ro = h.run(h.serve(batch(3, [(2, entry(3, 2)), (3, entry(3, 3))], term=5)))
    assert [s for s, _ in unpack_results(ro.body)] == [StatusCode.EREADONLY] * 2


def test_a_batch_of_only_bad_headers_leaves_no_ledger_behind(harness):
    h = harness()
    h.boot()
    resp = h.run(h.serve(batch(4, [(0, entry(5, 0)), (1, b"short")])))
    assert [s for s, _ in unpack_results(resp.body)] == [StatusCode.EBADREQ] * 2
    assert h.read(4, -1).status == StatusCode.ENOLEDGER


def test_an_acknowledged_batch_survives_a_crash_from_the_journal(harness):
    h = harness(flush_interval=LONG)  # nothing reaches ledger storage before the crash
    h.boot()
    entries = [(e, entry(8, e, b"v%d" % e, lac=e - 1)) for e in range(10)]
    assert h.run(h.serve(batch(8, entries))).status == StatusCode.EOK
    h.crash()
    h.boot()
    for e, body in entries:
        assert h.read(8, e).body == body
    assert h.read(8, -1).lac == 8  # the highest LAC in the batch's headers


def test_a_crash_replays_only_the_entries_of_a_batch_that_were_accepted(harness):
    """A batch is one journal record; one with a refused entry journals the others only."""
    h = harness(flush_interval=LONG)
    h.boot()
    good, wrong_id = entry(9, 0, b"a"), entry(9, 7, b"b")
    resp = h.run(h.serve(batch(9, [(0, good), (1, wrong_id), (2, entry(9, 2, b"c"))])))
    assert [s for s, _ in unpack_results(resp.body)] == [
        StatusCode.EOK,
        StatusCode.EBADREQ,
        StatusCode.EOK,
    ]
    h.crash()
    h.boot()
    assert h.read(9, 0).body == good
    assert h.read(9, 1).status == StatusCode.ENOENTRY
    assert h.read(9, 2).status == StatusCode.EOK


# -- parse_batch: the bookie's one-pass parse and header check ------------------------------


def test_parse_batch_accepts_entries_whose_headers_match_in_batch_order():
    entries = [(5, entry(1, 5, lac=3)), (2, entry(1, 2, lac=4)), (9, entry(1, 9, lac=1))]
    accepted, statuses, lac = parse_batch(1, pack_entries(entries))
    assert list(accepted.items()) == entries
    assert statuses is None  # nothing refused: no verdict list at all
    assert lac == 4  # the highest, not the last


def test_parse_batch_refuses_bad_headers_alone():
    entries = [
        (0, entry(1, 0)),
        (1, entry(2, 1)),
        (2, b"short"),
        (3, entry(1, 9)),
        (4, entry(1, 4)),
    ]
    accepted, statuses, _ = parse_batch(1, pack_entries(entries))
    assert list(accepted) == [0, 4]
    bad = StatusCode.EBADREQ
    assert statuses == [StatusCode.EOK, bad, bad, bad, StatusCode.EOK]


@pytest.mark.parametrize(
    "entries",
    [
        [(0, entry(1, 0)), (0, entry(1, 0))],  # the same entry twice
        [(0, entry(1, 0)), (0, b"short")],  # an accepted id again, refused
        [(3, b"x"), (3, b"y")],  # a refused id twice
    ],
)
def test_parse_batch_rejects_a_batch_that_repeats_an_id(entries):
    with pytest.raises(FrameError, match="repeats"):
        parse_batch(1, pack_entries(entries))


def test_parse_batch_rejects_a_body_that_is_not_whole():
    body = pack_entries([(0, entry(1, 0)), (1, entry(1, 1))])
    for cut in (body[:5], body[:-1], body[:20]):
        with pytest.raises(FrameError, match="truncated"):
            parse_batch(1, cut)
    assert parse_batch(1, b"") == ({}, None, -1)
