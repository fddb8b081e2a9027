"""An unbounded ledger's truncation of term T drops the older terms' entries above its
cut point and never T's own (embedlog/bookie/truncation.py): table tests of the rules,
then a bookie that meets a TRIM ABOVE after this term's entries, live and replayed."""

from __future__ import annotations

import pytest

from embedlog.bookie.truncation import (
    digest_len_of_noop,
    digest_len_of_trim,
    dropped_by_truncation,
    trim_above_body,
)
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_NOOP, FLAG_TERM, TERM, Digester, DigestType
from embedlog.wire.messages import AddFlags, OpCode, TrimFlags

LONG = 3600.0
CRC = Digester(DigestType.CRC32C)


def made_by(term: int | None, lid: int = 1, eid: int = 5, payload: bytes = b"p", flags: int = 0):
    if term is None:
        return CRC.pack(lid, eid, -1, payload, flags)
    return CRC.pack(lid, eid, -1, TERM.pack(term) + payload, flags | FLAG_TERM)


@pytest.mark.parametrize(
    ("entry_term", "cut_term", "digest_len", "dropped"),
    [
        (1, 2, 4, True),  # an older term's leftover goes
        (2, 2, 4, False),  # the cutting term's own entry stays, whenever it came
        (None, 2, 4, True),  # an entry without a term is judged older
        (2, 2, None, True),  # no digest length told: no term can be read, all go
        (3, 2, 4, False),  # (a newer term's entry: the bookie refuses such a cut first)
    ],
)
def test_dropped_by_truncation(entry_term, cut_term, digest_len, dropped):
    assert dropped_by_truncation(made_by(entry_term), cut_term, digest_len) is dropped


def test_digest_lengths_told():
    assert digest_len_of_trim(trim_above_body(4)) == 4
    assert digest_len_of_trim(trim_above_body(32)) == 32
    for bad in (b"", b"\x05", b"\x04\x04"):
        assert digest_len_of_trim(bad) is None
    for kind, n in ((DigestType.CRC32C, 4), (DigestType.MAC, 32), (DigestType.DUMMY, 0)):
        noop = Digester(kind, b"pw").pack(1, 3, -1, TERM.pack(7), FLAG_NOOP | FLAG_TERM)
        assert digest_len_of_noop(noop) == n
    assert digest_len_of_noop(made_by(7)) is None  # not a no-op
    assert digest_len_of_noop(CRC.pack(1, 3, -1, b"", FLAG_NOOP)) is None  # no term


def _add(h, eid: int, term: int, payload: bytes, **kw):
    return h.request(OpCode.ADD, 1, eid, body=made_by(term, 1, eid, payload), term=term, **kw)


def _trim_above(h, at: int, term: int, body: bytes = trim_above_body(4)):
    return h.request(OpCode.TRIM, 1, at, flags=TrimFlags.ABOVE, term=term, body=body)


def _payloads(h, ids):
    out = {}
    for eid in ids:
        resp = h.read(1, eid)
        out[eid] = resp.body[-1:] if resp.status == StatusCode.EOK else None
    return out


def test_a_trim_above_that_comes_after_this_terms_entries_keeps_them(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    for eid in range(3, 8):  # term 1 wrote up to 7; ids 5..7 were never acknowledged
        assert _add(h, eid, 1, b"o").status == StatusCode.EOK
    h.run(h.bookie.flush())  # some in the index, some in the cache: both are judged
    assert _add(h, 5, 2, b"n").status == StatusCode.EOK  # term 2's 5 came first
    assert _trim_above(h, 4, 2).status == StatusCode.EOK  # the rollover's slow TRIM
    after = {3: b"o", 4: b"o", 5: b"n", 6: None, 7: None}
    assert _payloads(h, range(3, 8)) == after
    # A duplicate is a no-op (once per term), and journal replay makes the same cut.
    assert _add(h, 6, 2, b"n").status == StatusCode.EOK
    assert _trim_above(h, 4, 2).status == StatusCode.EOK
    after[6] = b"n"
    h.crash()
    h.boot()
    assert _payloads(h, range(3, 8)) == after


def test_a_truncating_noop_keeps_this_terms_entries_that_overtook_it(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    for eid in range(0, 6):
        assert _add(h, eid, 1, b"o").status == StatusCode.EOK
    assert _add(h, 4, 2, b"n").status == StatusCode.EOK  # resent before the no-op came
    noop = CRC.pack(1, 3, -1, TERM.pack(2), FLAG_NOOP | FLAG_TERM)
    flags = AddFlags.TRUNCATE | AddFlags.NOOP | AddFlags.RECOVERY
    resp = h.request(OpCode.ADD, 1, 3, body=noop, term=2, flags=flags)
    assert resp.status == StatusCode.EOK
    assert _payloads(h, [2, 4, 5]) == {2: b"o", 4: b"n", 5: None}
    h.crash()
    h.boot()
    assert _payloads(h, [2, 4, 5]) == {2: b"o", 4: b"n", 5: None}


def test_a_trim_above_must_say_the_digest_length(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    assert _add(h, 0, 1, b"o").status == StatusCode.EOK
    for body in (b"", b"\x09"):
        assert _trim_above(h, -1, 2, body).status == StatusCode.EBADREQ
    assert _payloads(h, [0]) == {0: b"o"}


def _trim_req(at: int, term: int, body: bytes = trim_above_body(4)):
    from harness import KEY

    from embedlog.transport.base import next_txn
    from embedlog.wire.messages import Request

    return Request(
        OpCode.TRIM, next_txn(), 1, at, flags=TrimFlags.ABOVE, term=term, body=body, master_key=KEY
    )


def _noop_req(at: int, term: int):
    from harness import KEY

    from embedlog.transport.base import next_txn
    from embedlog.wire.messages import Request

    noop = CRC.pack(1, at, -1, TERM.pack(term), FLAG_NOOP | FLAG_TERM)
    flags = AddFlags.TRUNCATE | AddFlags.NOOP | AddFlags.RECOVERY
    return Request(OpCode.ADD, next_txn(), 1, at, body=noop, term=term, flags=flags, master_key=KEY)


async def _at_once(h, first, second):
    """Both requests admitted while something else (a flush, a gc pass) holds the
    storage's lock, then served in order once it is free."""
    import asyncio

    async with h.bookie.storage.exclusive():
        one = asyncio.ensure_future(h.serve(first))
        for _ in range(20):  # loop turns: it reaches the lock
            await asyncio.sleep(0)
        two = asyncio.ensure_future(h.serve(second))
        for _ in range(20):
            await asyncio.sleep(0)
    return await asyncio.gather(one, two)


@pytest.mark.parametrize("later", ["trim above", "truncating no-op"])
def test_a_cut_that_waited_for_another_raises_the_term_of_the_state_that_one_made(harness, later):
    """Two takeovers' cuts reach a bookie that holds no state of the ledger at once (the
    simulator's unbounded-corrupt seed 224): term 2's TRIM ABOVE makes the state while
    the later term's request waits for the truncation lock. The later one must raise the
    term of that state, durably, before it is answered: a bookie that answered it while
    its state said term 2 would take a term-2 writer's adds after a takeover fenced it."""
    h = harness(flush_interval=LONG)
    h.boot()
    second = _trim_req(4, 3) if later == "trim above" else _noop_req(4, 3)

    async def both():
        return await _at_once(h, _trim_req(4, 2), second)

    first_answer, second_answer = h.run(both())
    assert first_answer.status == StatusCode.EOK
    assert second_answer.status == StatusCode.EOK and second_answer.term == 3
    # The term raised, and term 3's cut kept as made (a delayed duplicate must not cut
    # again): a truncating add that stored the state it was admitted with lost it.
    info = h.bookie.storage.info(1)
    assert (info.term, info.truncated_term) == (3, 3)
    assert _add(h, 5, 2, b"late").status == StatusCode.EINVALIDTERM
    h.crash()
    h.boot()  # journal replay: the raise was durable with the cut
    info = h.bookie.storage.info(1)
    assert (info.term, info.truncated_term) == (3, 3)
    assert _add(h, 5, 2, b"late").status == StatusCode.EINVALIDTERM


def test_a_cut_whose_term_was_passed_while_it_waited_is_refused(harness):
    """Term 3's cut makes the state while term 2's waits for the lock: term 2's is refused
    as of another term (it was admitted against no state), not made or answered EOK."""
    h = harness(flush_interval=LONG)
    h.boot()

    async def both():
        return await _at_once(h, _trim_req(4, 3), _trim_req(4, 2))

    newer, older = h.run(both())
    assert newer.status == StatusCode.EOK
    assert older.status == StatusCode.EINVALIDTERM and older.term == 3
    assert h.bookie.storage.info(1).term == 3
