"""Range reads by READ_BATCH: what a batch leaves out is read entry by entry with every
rule of a single read (fail over, digest check, negative only when every bookie says so)."""

from __future__ import annotations

import pytest

from embedlog.errors import BKError, NoSuchEntryError
from embedlog.ledger.batch_reads import READ_BATCH_ENTRIES, READ_BATCHES_IN_FLIGHT
from embedlog.transport.base import next_txn
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.limits import MAX_READ_BATCH_BYTES, MIB
from embedlog.wire.messages import OpCode, Request


def read_requests(cluster) -> int:
    return sum(cluster.bookie(b).metrics.read_requests for b in cluster.bookie_ids)


def write(cluster, n, e=3, wq=3, aq=2, size=None, **kw):
    wh = cluster.client("writer", **kw).create_ledger(e, wq, aq)
    payloads = [b"%d-" % i + bytes(size or 0) for i in range(n)]
    for f in [wh.add_async(p) for p in payloads]:
        f.result()
    wh.close()
    return wh.ledger_id, payloads


def forge(cluster, bookie, lid, eid):
    """Overwrite one bookie's copy of an entry with one whose digest fails."""
    forged = bytearray(Digester(DigestType.CRC32C).pack(lid, eid, -1, b"forged!"))
    forged[-1] ^= 1
    req = Request(OpCode.ADD, next_txn(), lid, eid, master_key=master_key(b""), body=bytes(forged))
    assert cluster.runtime.run(cluster.transport.request("evil", bookie, req, 5.0)).status == 0


def test_a_range_is_read_in_batches_spread_over_the_ensemble(cluster):
    n = 3 * READ_BATCH_ENTRIES + 50
    lid, payloads = write(cluster, n)
    before = read_requests(cluster)
    rh = cluster.client("reader").open_ledger(lid)
    assert [e.data for e in rh.read(0, n - 1)] == payloads
    # One request per run of up to READ_BATCH_ENTRIES entries, each bookie its share:
    # a request per entry made n of them.
    per_bookie = [cluster.bookie(b).metrics.read_requests for b in cluster.bookie_ids]
    assert read_requests(cluster) - before <= 3 * 3
    assert all(count >= 1 for count in per_bookie)
    assert [e.data for e in rh.entries(5)] == payloads[5:]


def test_entries_a_bookie_missed_are_read_from_the_others(cluster):
    c = cluster.client("writer")
    wh = c.create_ledger(3, 3, 2)
    lid = wh.ledger_id
    late = wh.metadata.ensembles[0][1]
    payloads = [b"e%d" % i for i in range(60)]
    for p in payloads[:20]:
        wh.add(p)
    # The bookie misses entries 20..39: the writer's adds reach AQ without it.
    cluster.network.block("writer", late)
    for p in payloads[20:40]:
        wh.add(p)
    cluster.network.heal()  # no faults set: reads are batched again
    for p in payloads[40:]:
        wh.add(p)
    wh.close()
    held = set(cluster.bookie(late).ledger_entries(lid))
    assert not held >= set(range(60))  # it does lack some of them
    before = read_requests(cluster)
    assert [e.data for e in cluster.client("reader").open_ledger(lid).read(0, 59)] == payloads
    assert read_requests(cluster) - before < 60


def test_a_spoilt_copy_in_a_batch_is_read_from_another_bookie(cluster):
    lid, payloads = write(cluster, 30, aq=3)
    md = cluster.client("x").open_ledger(lid).metadata
    for eid in (0, 4, 29):
        forge(cluster, md.ensembles[0][eid % 3], lid, eid)  # the head of its write set
    assert [e.data for e in cluster.client("reader").open_ledger(lid).read(0, 29)] == payloads


def test_a_stopped_bookie_costs_nothing_but_its_share(cluster):
    lid, payloads = write(cluster, 100, aq=3)
    cluster.stop_bookie(cluster.bookie_ids[0])
    rh = cluster.client("reader", request_timeout=30.0).open_ledger(lid, recover=False)
    assert [e.data for e in rh.read(0, 99)] == payloads


def test_an_unreadable_entry_log_is_eio_and_the_others_serve(cluster):
    lid, payloads = write(cluster, 40, aq=3)
    broken = cluster.bookie_ids[1]
    cluster.stop_bookie(broken)  # a clean stop flushes: every entry is in its entry log
    for log_file in (cluster.data_dir / broken / "ledgers").glob("*.log"):
        if log_file.stat().st_size:
            log_file.write_bytes(log_file.read_bytes()[:10])
    cluster.start_bookie(broken)
    assert [e.data for e in cluster.client("reader").open_ledger(lid).read(0, 39)] == payloads


def drop_everywhere(cluster, lid, eid, keep=()):
    """Entry ``eid`` leaves the write caches of every bookie but ``keep`` (in memory: the
    ledger was written just now, nothing is flushed yet)."""
    for b in cluster.bookie_ids:
        if b not in keep:
            storage = cluster.bookie(b).storage
            assert storage.cache[lid].pop(eid) is not None


def test_an_entry_no_bookie_has_is_negative_only_when_every_bookie_says_so(make_cluster, tmp_path):
    # Flushes far apart: the entries stay in the write caches, where the test drops them.
    cluster = make_cluster(3, data_dir=tmp_path / "c", flush_interval=3600)
    lid, _ = write(cluster, 20)
    drop_everywhere(cluster, lid, 7)
    rh = cluster.client("reader", request_timeout=0.5).open_ledger(lid, recover=False)
    with pytest.raises(NoSuchEntryError, match=r"entry .*:7"):
        rh.read(0, 19)
    # One bookie that does not answer: no negative any more, whoever else said so.
    cluster.stop_bookie(cluster.bookie_ids[2])
    with pytest.raises(BKError) as unknown:
        rh.read(0, 19)
    assert not isinstance(unknown.value, NoSuchEntryError)


def test_entries_over_the_byte_bound_take_several_batches(cluster):
    size = MIB
    n = 2 * 3 * (MAX_READ_BATCH_BYTES // size)
    lid, payloads = write(cluster, n, size=size, max_entry_size=2 * MIB)
    before = read_requests(cluster)
    assert [e.data for e in cluster.client("reader").open_ledger(lid).read(0, n - 1)] == payloads
    assert read_requests(cluster) - before > 3  # a request per bookie was not enough


def test_e5_wq2_with_an_ensemble_change_reads_every_fragment(make_cluster, tmp_path):
    cluster = make_cluster(6, data_dir=tmp_path / "c")
    wh = cluster.client("writer").create_ledger(5, 2, 2)
    payloads = [b"p%d" % i for i in range(80)]
    for p in payloads[:40]:
        wh.add(p)
    cluster.stop_bookie(wh.metadata.ensembles[0][2])
    for p in payloads[40:]:
        wh.add(p)
    wh.close()
    assert len(wh.metadata.ensembles) == 2
    rh = cluster.client("reader").open_ledger(wh.ledger_id)
    assert [e.data for e in rh.read(0, 79)] == payloads


def test_batch_reads_over_tcp(make_cluster, tmp_path):
    cluster = make_cluster(3, data_dir=tmp_path / "c", transport="tcp")
    lid, payloads = write(cluster, 700)
    before = read_requests(cluster)
    assert [e.data for e in cluster.client("reader").open_ledger(lid).read(0, 699)] == payloads
    assert read_requests(cluster) - before <= 3 * 2


def test_a_bookie_that_does_not_answer_a_batch_is_asked_nothing_more_in_that_read(cluster):
    n = 4 * 3 * READ_BATCH_ENTRIES  # four runs per bookie
    lid, payloads = write(cluster, n, aq=3)
    silent = cluster.bookie_ids[0]
    rh = cluster.client("reader", request_timeout=0.5).open_ledger(lid, recover=False)
    cluster.pause_bookie(silent)
    try:
        assert [e.data for e in rh.read(0, n - 1)] == payloads
        # Only the batches in flight when it went silent: its runs were then read from the
        # next bookie of their write sets, without a timeout each.
        assert cluster.bookie(silent).pause_gate.held == READ_BATCHES_IN_FLIGHT
    finally:
        cluster.resume_bookie(silent)


def test_a_stretch_a_bookie_missed_is_read_on_from_the_next_of_the_write_set(cluster):
    c = cluster.client("writer", request_timeout=30.0)
    wh = c.create_ledger(3, 3, 2)
    late = wh.metadata.ensembles[0][0]
    # The bookie misses entries 0..299 (AQ 2 acknowledges them without it; the long
    # timeout keeps the writer from replacing it).
    cluster.network.block("writer", late)
    payloads = [b"e%d" % i for i in range(300)]
    for f in [wh.add_async(p) for p in payloads]:
        f.result()
    cluster.network.heal()
    wh.close()
    assert not set(cluster.bookie(late).ledger_entries(wh.ledger_id)) & set(range(300))
    before = read_requests(cluster)
    assert [e.data for e in cluster.client("reader").open_ledger(wh.ledger_id).read(0, 299)] == (
        payloads
    )
    # Its share (100 entries) cost an empty answer and one READ per run it heads, then
    # the next bookie of the write set read on: not two requests per entry.
    assert read_requests(cluster) - before < 20
