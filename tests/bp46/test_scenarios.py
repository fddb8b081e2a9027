"""BP-46 (running without the journal): the BP's two data-loss scenarios, replayed.

Each scenario runs twice: with the protection (no acknowledged entry is lost) and
with the bookie's unsafe switch that removes it (the loss the TLA+ model found
happens here too). The unsafe runs prove these tests can see the bug.
"""

from __future__ import annotations

import pytest

from embedlog import LedgerFencedError, LedgerRecoveryError
from embedlog.cluster_bookies import repair_client_name
from embedlog.errors import NoSuchEntryError, NoSuchLedgerError, UnknownError
from embedlog.transport.base import next_txn
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import AddFlags, OpCode, Request

NO_FLUSH = 3600.0  # nothing reaches ledger storage unless the test asks: a crash loses it
# Request timeouts far above what a loaded machine needs (a fence waits for a journal fsync).
# Only a blocked bookie ever runs into them, and the outcomes below never wait for one,
# except where a test says so.
TIMEOUT = 30.0


def _scenario_one(make_cluster, *, skip_fence: bool):
    """C1 keeps writing after C2 recovered and closed the ledger.

    The fence to B3 was lost, and B2 came back with an empty disk (a crash that
    lost every unflushed operation, fences included). C1's next entry reaches B2
    and B3 while B1's refusal is slow.
    """
    cluster = make_cluster(
        3,
        journal_write_data=False,
        flush_interval=NO_FLUSH,
        auto_fix_cookies=True,
        unsafe_skip_fence_on_boot=skip_fence,
    )
    b1, b2, b3 = cluster.bookie_ids
    c1 = cluster.client("c1", request_timeout=TIMEOUT)
    wh = c1.create_ledger(3, 3, 2)
    assert wh.add(b"E0") == 0  # reaches all three

    c2 = cluster.client("c2", request_timeout=TIMEOUT)
    cluster.network.block("c2", b3)  # the fence (and every recovery read) to B3 is lost
    rh = c2.open_ledger(wh.ledger_id)
    assert rh.is_closed and rh.last_add_confirmed == 0

    cluster.crash_bookie(b2)
    cluster.wipe_bookie(b2, "all")
    cluster.start_bookie(b2)  # suspicious boot: cookies missing

    # B1's EFENCED arrives after B2's and B3's answers (well within c1's request timeout).
    cluster.network.delay("c1", b1, 2.0)
    return cluster, wh


def test_scenario_one_closed_ledger_refuses_the_old_writer_after_a_wiped_boot(make_cluster):
    cluster, wh = _scenario_one(make_cluster, skip_fence=False)
    with pytest.raises(LedgerFencedError):
        wh.add(b"E1")
    md = cluster.metadata.read_ledger(wh.ledger_id)
    assert md.last_entry_id == 0  # covers every acknowledged entry (E0)
    b2 = cluster.bookie_ids[1]
    assert cluster.bookie(b2).ledger_info(wh.ledger_id).fenced


def test_scenario_one_without_fence_on_boot_acknowledges_an_entry_the_ledger_lost(make_cluster):
    cluster, wh = _scenario_one(make_cluster, skip_fence=True)
    acked = wh.add(b"E1")  # B2 (empty disk, unfenced) and B3 (never fenced) acknowledge it
    assert acked == 1
    md = cluster.metadata.read_ledger(wh.ledger_id)
    assert md.is_closed and md.last_entry_id == 0  # the acknowledged entry 1 is lost


def _scenario_two(make_cluster, *, skip_limbo: bool):
    """An entry acknowledged by B1 and B3 is lost by B1 in a crash; B2 never got it."""
    cluster = make_cluster(
        3,
        journal_write_data=False,
        flush_interval=NO_FLUSH,
        unsafe_skip_limbo=skip_limbo,
        repair_retry_interval=0.2,
    )
    b1, b2, b3 = cluster.bookie_ids
    # No explicit LAC (BookKeeper's default): no bookie learns that E0 was acknowledged.
    # Sent 0.2 s after the ack, it would reach B1 whenever B1's reboot took that long, and
    # recovery would then keep E0 without reading it: a slow machine would change the story.
    c1 = cluster.client("c1", request_timeout=TIMEOUT, explicit_lac_interval=0)
    cluster.network.block("c1", b2)  # B2 fails to respond
    wh = c1.create_ledger(3, 3, 2)
    assert wh.add(b"E0") == 0  # acknowledged by B1 and B3

    cluster.crash_bookie(b1)  # E0 was only in B1's write cache: gone
    # B3 is slow/unreachable for everyone recovering, B1's own repair included.
    cluster.network.block(repair_client_name(b1), b3)
    cluster.network.block("c2", b3)
    if skip_limbo:
        # Without limbo B1's own repair could recover the ledger as well (B1 and B2 both
        # answer NoSuchEntry) and race c2 to close it. Keep it from B2 too: then c2's
        # recovery is the one that decides, as in the run with limbo.
        cluster.network.block(repair_client_name(b1), b2)
    cluster.start_bookie(b1)
    with pytest.raises(NoSuchEntryError) if skip_limbo else pytest.raises(UnknownError):
        cluster.read_from_bookie(b1, wh.ledger_id, 0)
    return cluster, wh


def test_scenario_two_limbo_keeps_recovery_from_truncating_an_acknowledged_entry(make_cluster):
    cluster, wh = _scenario_two(make_cluster, skip_limbo=False)
    b1 = cluster.bookie_ids[0]
    # c2 gives up on entry 0 only once B3 timed out: this timeout is waited for.
    c2 = cluster.client("c2", request_timeout=3.0)
    with pytest.raises(LedgerRecoveryError, match="cannot tell whether entry 0 exists"):
        c2.open_ledger(wh.ledger_id)
    assert not cluster.metadata.read_ledger(wh.ledger_id).is_closed  # still recoverable

    cluster.network.heal()
    rh = c2.open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 0
    assert [e.data for e in rh.read(0, 0)] == [b"E0"]
    status = cluster.wait_repaired(b1)
    assert status["repair"]["state"] == "done"
    assert cluster.read_from_bookie(b1, wh.ledger_id, 0) == b"E0"  # copied back from a peer
    assert not cluster.bookie(b1).ledger_info(wh.ledger_id).limbo


def test_scenario_two_without_limbo_truncates_the_acknowledged_entry(make_cluster):
    cluster, wh = _scenario_two(make_cluster, skip_limbo=True)
    b1, _b2, b3 = cluster.bookie_ids
    c2 = cluster.client("c2", request_timeout=TIMEOUT)
    rh = c2.open_ledger(wh.ledger_id)  # B1 and B2 both say NoSuchEntry: QC=2 negatives
    assert rh.is_closed and rh.last_add_confirmed == -1  # entry 0 was acknowledged: lost
    assert cluster.read_from_bookie(b3, wh.ledger_id, 0) == b"E0"  # B3 still holds it
    assert cluster.bookie(b1).status()["repair"]["ledgers_recovered"] == 0  # c2 closed it


def test_limbo_turns_only_negatives_into_unknown(make_cluster):
    cluster = make_cluster(
        3, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.2
    )
    b1, b2, b3 = cluster.bookie_ids
    c1 = cluster.client("c1")
    wh = c1.create_ledger(3, 3, 3)
    wh.add(b"kept")
    cluster.runtime.run(cluster.bookie(b1).flush())  # entry 0 durable on B1
    wh.add(b"lost")
    cluster.crash_bookie(b1)
    for peer in (b2, b3):
        cluster.network.block(repair_client_name(b1), peer)  # keep B1 in limbo
    cluster.start_bookie(b1)
    assert cluster.read_from_bookie(b1, wh.ledger_id, 0) == b"kept"  # positives still served
    with pytest.raises(UnknownError):
        cluster.read_from_bookie(b1, wh.ledger_id, 1)  # lost in the crash: not "no such entry"
    with pytest.raises(NoSuchLedgerError):
        cluster.read_from_bookie(b1, 999_999, 0)  # a ledger B1 never belonged to
    status = cluster.bookie(b1).status()
    assert status["limbo_ledgers"] == 1 and status["repair"]["state"] in ("running", "waiting")
    cluster.network.heal()
    cluster.wait_repaired(b1)
    assert cluster.read_from_bookie(b1, wh.ledger_id, 1) == b"lost"


def test_a_bookie_that_acknowledged_a_write_back_before_the_cas_protects_the_ledger(
    make_cluster,
):
    """Found by the simulator (bounded-nojournal, seed 160): a recovery writes entries back
    to a bookie that replaces one of the ensemble, which acknowledges them, crashes
    without the journal and boots before the recovery's ensemble change is in the
    metadata. The metadata does not list it yet, but it holds the ledger's state: it must
    protect the ledger (limbo) until the ledger is closed and the final metadata says
    what it owes, never answer NoSuchEntry for what it acknowledged."""
    cluster = make_cluster(
        4, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.2
    )
    c1 = cluster.client("c1", request_timeout=TIMEOUT)
    wh = c1.create_ledger(3, 3, 2, password=b"pw")
    wh.add(b"e0")
    members = set(cluster.metadata.read_ledger(wh.ledger_id).bookies())
    (joiner,) = set(cluster.bookie_ids) - members
    # The recovery's write-back to the joiner, as the recovery sends it before its CAS.
    body = Digester(DigestType.CRC32C).pack(wh.ledger_id, 0, -1, b"e0")
    req = Request(
        OpCode.ADD,
        next_txn(),
        wh.ledger_id,
        0,
        AddFlags.RECOVERY,
        master_key=master_key(b"pw"),
        body=body,
    )
    resp = cluster.runtime.run(cluster.transport.request("c2", joiner, req, TIMEOUT))
    assert resp.status == 0  # acknowledged
    bookie = cluster.bookie(joiner)
    cluster.runtime.run(bookie.journal.sync())  # its record of the ledger is durable
    cluster.crash_bookie(joiner)  # the entry itself was only in the write cache
    for peer in members:
        cluster.network.block(repair_client_name(joiner), peer)  # its repair cannot finish
    cluster.start_bookie(joiner)
    assert cluster.bookie(joiner).suspicion
    with pytest.raises(UnknownError):
        cluster.read_from_bookie(joiner, wh.ledger_id, 0)  # not "no such entry"
    cluster.network.heal()
    cluster.wait_repaired(joiner)
    # The repair closed the ledger first: the joiner is not in its final metadata, so it
    # owes nothing, and the ledger holds every acknowledged entry.
    md = cluster.metadata.read_ledger(wh.ledger_id)
    assert md.is_closed and joiner not in md.bookies()
    assert [
        e.data for e in cluster.client("c3").open_ledger(wh.ledger_id, password=b"pw").read(0, 0)
    ] == [b"e0"]
