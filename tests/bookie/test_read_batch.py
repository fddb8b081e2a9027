"""READ_BATCH on the bookie: a run of entries within its bounds, never a negative, no change."""

from __future__ import annotations

from harness import entry

from embedlog.bookie.entrylog import RECORD
from embedlog.wire.codes import StatusCode
from embedlog.wire.limits import MAX_READ_BATCH_BYTES, MAX_READ_BATCH_ENTRIES, MIB
from embedlog.wire.messages import (
    NO_TERM,
    OpCode,
    ReadFlags,
    pack_read_ask,
    unpack_entries,
)

BIG = 2**32 - 1  # the most a READ_BATCH body can ask for (u32)


def read_batch(h, lid, first, count, stride=1, max_bytes=BIG, **kw):
    kw.setdefault("master_key", b"")  # keyless, like a plain READ
    return h.request(
        OpCode.READ_BATCH, lid, first, body=pack_read_ask(count, stride, max_bytes), **kw
    )


def ids(resp):
    return [eid for eid, _ in unpack_entries(resp.body)]


def flush(h):
    b = h.bookie
    h.run(b.storage.flush(b.journal.lsn))


def test_a_batch_returns_the_asked_entries_in_order_from_cache_and_from_disk(harness):
    h = harness()
    h.boot()
    for e in range(10):
        assert h.add(1, e, b"p%d" % e).status == StatusCode.EOK
    flush(h)  # 0..9 in the entry log, 10..19 in the write cache
    for e in range(10, 20):
        assert h.add(1, e, b"p%d" % e).status == StatusCode.EOK
    resp = read_batch(h, 1, 2, 6, stride=3)
    assert resp.status == StatusCode.EOK
    assert unpack_entries(resp.body) == [
        (e, entry(1, e, b"p%d" % e)) for e in (2, 5, 8, 11, 14, 17)
    ]
    assert ids(read_batch(h, 1, 0, 20)) == list(range(20))


def test_the_bookie_enforces_its_entry_bound_whatever_is_asked(harness):
    h = harness()
    h.boot()
    n = MAX_READ_BATCH_ENTRIES + 10
    for e in range(n):
        h.add(1, e)
    assert ids(read_batch(h, 1, 0, BIG)) == list(range(MAX_READ_BATCH_ENTRIES))
    assert ids(read_batch(h, 1, 0, 7)) == list(range(7))


def test_the_bookie_enforces_its_byte_bound_and_the_one_asked_for(harness):
    h = harness()
    h.boot()
    size = MIB
    for e in range(6):
        h.add(1, e, bytes(size))
    whole = len(entry(1, 0, bytes(size)))
    got = read_batch(h, 1, 0, 6)  # 6 MiB asked for: the bookie's 4 MiB bound cuts it
    assert ids(got) == list(range(MAX_READ_BATCH_BYTES // whole))
    assert sum(len(e) for _, e in unpack_entries(got.body)) <= MAX_READ_BATCH_BYTES
    assert ids(read_batch(h, 1, 0, 6, max_bytes=2 * whole)) == [0, 1]
    # The first entry goes in whatever its size: every entry is readable by batch.
    assert ids(read_batch(h, 1, 3, 6, max_bytes=1)) == [3]


def test_a_batch_stops_before_an_entry_it_does_not_hold_and_says_nothing_negative(harness):
    h = harness()
    h.boot()
    for e in (0, 1, 3):
        h.add(1, e)
    resp = read_batch(h, 1, 0, 4)
    assert (resp.status, ids(resp)) == (StatusCode.EOK, [0, 1])
    resp = read_batch(h, 1, 2, 2)  # the first is absent: no entries, and no negative
    assert (resp.status, ids(resp)) == (StatusCode.EOK, [])
    resp = read_batch(h, 7, 0, 2)  # nor for a ledger the bookie knows nothing of
    assert (resp.status, ids(resp)) == (StatusCode.EOK, [])
    assert h.bookie.ledger_info(7) is None  # and it created nothing


def test_malformed_batch_reads_are_bad_requests_and_change_nothing(harness):
    h = harness()
    h.boot()
    h.add(1, 0)
    for body in (b"", b"\x00" * 11, b"\x00" * 13, pack_read_ask(1, 1, 1) + b"x"):
        resp = h.request(OpCode.READ_BATCH, 1, 0, body=body)
        assert resp.status == StatusCode.EBADREQ, body
    for count, stride, max_bytes in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):
        assert read_batch(h, 1, 0, count, stride, max_bytes).status == StatusCode.EBADREQ
    assert read_batch(h, 1, -1, 1).status == StatusCode.EBADREQ
    # Ids past 64 bits are not asked of the store: the run ends at the last id there is.
    top = 2**63 - 2
    assert h.add(1, top).status == StatusCode.EOK
    flush(h)  # from the index, whose keys hold 64-bit ids
    resp = read_batch(h, 1, top, BIG, stride=2)
    assert (resp.status, ids(resp)) == (StatusCode.EOK, [top])
    # A batch read never fences nor raises a term (those are READs that prove the key).
    assert read_batch(h, 1, 0, 1, flags=ReadFlags.FENCE).status == StatusCode.EBADREQ
    assert read_batch(h, 1, 0, 1, term=5).status == StatusCode.EBADREQ
    info = h.bookie.ledger_info(1)
    assert not info.fenced and info.term == NO_TERM
    assert h.add(1, 1).status == StatusCode.EOK


def test_a_spoilt_record_is_eio_first_and_ends_the_run_later(harness):
    h = harness()
    h.boot()
    for e in range(4):
        h.add(1, e, b"payload-%d" % e)
    flush(h)
    storage = h.bookie.storage
    # Spoil entry 2's record in place (its data, so the record's CRC fails).
    log_id, offset, _length = storage.index.location(1, 2)
    path = storage.logs.path(log_id)
    raw = bytearray(path.read_bytes())
    raw[offset + RECORD.size] ^= 0xFF
    path.write_bytes(bytes(raw))
    resp = read_batch(h, 1, 0, 4)
    assert (resp.status, ids(resp)) == (StatusCode.EOK, [0, 1])
    assert read_batch(h, 1, 2, 2).status == StatusCode.EIO  # never "not held"
    assert h.read(1, 2).status == StatusCode.EIO
