"""The everyday path: create, add, read, close, open, delete."""

from __future__ import annotations

import time

import pytest

from embedlog import (
    BKError,
    DigestType,
    LedgerClosedError,
    LedgerState,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from embedlog.errors import ReadPastLastConfirmedError


def test_write_read_close_round_trip(cluster):
    c = cluster.client("c1")
    wh = c.create_ledger(3, 3, 2)
    ids = [wh.add(b"entry-%d" % i) for i in range(50)]
    assert ids == list(range(50))
    assert wh.last_add_confirmed == 49
    assert [e.data for e in wh.read(10, 12)] == [b"entry-10", b"entry-11", b"entry-12"]
    wh.close()
    md = c.ledger_metadata(wh.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 49
    rh = cluster.client("reader").open_ledger(wh.ledger_id)
    assert rh.is_closed and rh.last_add_confirmed == 49
    entries = rh.read(0, 49)
    assert [e.entry_id for e in entries] == list(range(50))
    assert entries[7].data == b"entry-7"
    with pytest.raises(ReadPastLastConfirmedError):
        rh.read(0, 50)


def test_pipelined_adds_complete_in_order(cluster):
    wh = cluster.client().create_ledger(3, 2, 2)
    futures = [wh.add_async(b"x%d" % i) for i in range(2000)]
    assert [f.result() for f in futures] == list(range(2000))
    wh.close()
    # Striped over E=3 with WQ=2: every bookie holds two thirds of the entries.
    for bid in wh.metadata.ensembles[0]:
        held = cluster.bookie(bid).ledger_entries(wh.ledger_id)
        assert len(held) in (1333, 1334)


def test_an_add_with_its_ack_quorum_waits_for_every_earlier_entry(cluster):
    """E3 WQ2: entry 1 is stored by slots 1 and 2 at once, entry 0 waits for slot 0. Entry 1
    must not be acknowledged (nor the LAC move) before entry 0 is: the LAC promises every
    entry up to it."""
    c = cluster.client("c1")
    wh = c.create_ledger(3, 2, 2)
    slow, middle, last = wh.metadata.ensembles[0]
    cluster.network.delay("c1", slow, 2.0)  # well within the request timeout (5 s)
    f0 = wh.add_async(b"e0")
    f1 = wh.add_async(b"e1")
    # Entry 1's whole write set holds it (its answers follow within milliseconds) while
    # entry 0 is still on its way to the slow bookie.
    while not all(1 in cluster.bookie(b).ledger_entries(wh.ledger_id) for b in (middle, last)):
        time.sleep(0.01)
    time.sleep(0.5)
    assert not f0.done()
    assert not f1.done() and wh.last_add_confirmed == -1
    assert (f0.result(), f1.result()) == (0, 1)
    assert wh.last_add_confirmed == 1


def test_reads_fail_over_and_are_negative_only_when_every_bookie_says_so(cluster):
    c1 = cluster.client("c1", request_timeout=30.0)
    wh = c1.create_ledger(3, 3, 2)
    first, second, third = wh.metadata.ensembles[0]
    # Entry 0 never reaches the first bookie of its write set (AQ 2 acknowledges it without);
    # the long request timeout keeps the writer from resending it there before the close.
    cluster.network.drop_next("c1", first, "add")
    assert [wh.add(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    wh.close()
    # The second bookie's entry log loses its data: it answers EIO for every entry.
    cluster.stop_bookie(second)
    for log_file in (cluster.data_dir / second / "ledgers").glob("*.log"):
        if log_file.stat().st_size:
            log_file.write_bytes(log_file.read_bytes()[:10])
    cluster.start_bookie(second)
    with pytest.raises(NoSuchEntryError):
        cluster.read_from_bookie(first, wh.ledger_id, 0)
    with pytest.raises(BKError, match="EIO"):
        cluster.read_from_bookie(second, wh.ledger_id, 0)

    # Entry 0: a negative (first), an error (second), then the copy (third).
    rh = cluster.client("c2", request_timeout=0.5).open_ledger(wh.ledger_id)
    assert rh.read(0, 0)[0].data == b"e0"
    # The third bookie does not answer either: one negative is not "no such entry".
    cluster.network.block("c3", third)
    c3 = cluster.client("c3", request_timeout=0.5).open_ledger(wh.ledger_id)
    with pytest.raises(BKError) as unknown:
        c3.read(0, 0)
    assert not isinstance(unknown.value, NoSuchEntryError)
    # Entry 2's write set starts at the third bookie: a timeout, then the first has it.
    assert c3.read(2, 2)[0].data == b"e2"


@pytest.mark.parametrize(("e", "wq", "aq"), [(2, 3, 2), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
def test_bad_quorums_are_refused(cluster, e, wq, aq):
    with pytest.raises(ValueError, match="ensemble_size >= write_quorum >= ack_quorum >= 1"):
        cluster.client().create_ledger(e, wq, aq)


def test_not_enough_bookies(cluster):
    with pytest.raises(NotEnoughBookiesError):
        cluster.client().create_ledger(4, 3, 2)


def test_wrong_password_is_refused(cluster):
    c = cluster.client()
    wh = c.create_ledger(3, 3, 2, digest=DigestType.MAC, password=b"right")
    wh.add(b"secret")
    with pytest.raises(UnauthorizedAccessError):
        cluster.client("other").open_ledger(wh.ledger_id, password=b"wrong")
    with pytest.raises(UnauthorizedAccessError):
        cluster.client("other").open_ledger(wh.ledger_id, password=b"wrong", recover=False)
    rh = cluster.client("other").open_ledger(wh.ledger_id, password=b"right")
    assert rh.read(0, 0)[0].data == b"secret"


def test_non_recovering_open_follows_a_live_writer(cluster):
    wh = cluster.client("writer").create_ledger(3, 3, 2)
    for i in range(5):
        wh.add(b"%d" % i)
    rh = cluster.client("reader").open_ledger(wh.ledger_id, recover=False)
    assert not rh.is_closed
    assert rh.read_last_add_confirmed() >= 3  # the LAC travels with the next entry
    # The writer is not disturbed: it keeps writing.
    assert wh.add(b"5") == 5
    wh.close()
    assert rh.read_last_add_confirmed() == 5 and rh.is_closed
    assert [e.data for e in rh.read(0, 5)] == [b"%d" % i for i in range(6)]


def test_close_twice_and_add_after_close(cluster):
    wh = cluster.client().create_ledger(3, 3, 2)
    wh.add(b"a")
    wh.close()
    wh.close()  # idempotent: already closed at our LAC
    with pytest.raises(LedgerClosedError):
        wh.add(b"b")


def test_delete_ledger(cluster):
    c = cluster.client()
    wh = c.create_ledger(3, 3, 2)
    wh.add(b"a")
    wh.close()
    assert wh.ledger_id in list(c.list_ledgers())
    c.delete_ledger(wh.ledger_id)
    assert wh.ledger_id not in list(c.list_ledgers())
    with pytest.raises(NoSuchLedgerError):
        c.open_ledger(wh.ledger_id)
    with pytest.raises((NoSuchLedgerError, NoSuchEntryError)):
        cluster.read_from_bookie(wh.metadata.ensembles[0][0], wh.ledger_id, 0)


def test_tampered_replica_does_not_stop_a_read(cluster):
    from embedlog.wire.entry import Digester, DigestType

    c = cluster.client()
    wh = c.create_ledger(3, 3, 3)
    wh.add(b"genuine")
    wh.close()
    first = wh.metadata.ensembles[0][0]
    # Overwrite entry 0 on the first bookie of its write set with a forged body (wrong CRC).
    forged = bytearray(Digester(DigestType.CRC32C).pack(wh.ledger_id, 0, -1, b"forged!"))
    forged[-1] ^= 1
    from embedlog.transport.base import next_txn
    from embedlog.wire.entry import master_key
    from embedlog.wire.messages import OpCode, Request

    req = Request(
        OpCode.ADD, next_txn(), wh.ledger_id, 0, master_key=master_key(b""), body=bytes(forged)
    )
    resp = cluster.runtime.run(cluster.transport.request("evil", first, req, 5.0))
    assert resp.status == 0
    assert cluster.read_from_bookie(first, wh.ledger_id, 0) != b"genuine"
    assert c.open_ledger(wh.ledger_id).read(0, 0)[0].data == b"genuine"


def test_entries_survive_a_full_cluster_restart(make_cluster, tmp_path):
    cl = make_cluster(3, data_dir=tmp_path / "persist")
    wh = cl.client().create_ledger(3, 3, 2)
    for i in range(100):
        wh.add(b"p%d" % i)
    wh.close()
    cl.stop()
    cl2 = make_cluster(3, data_dir=tmp_path / "persist")
    assert cl2.bookie_ids == cl.bookie_ids
    rh = cl2.client().open_ledger(wh.ledger_id)
    assert [e.data for e in rh.read(0, 99)] == [b"p%d" % i for i in range(100)]
