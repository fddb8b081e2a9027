"""Fencing and ledger recovery under faults, including the TLA+ model's counterexamples.

Every rule gets a test that breaks it (through a client's unsafe_* switch) and
shows the damage, next to the test that shows the rule holding.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time

import pytest

from embedlog import (
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerState,
    NoSuchEntryError,
)
from embedlog.metadata.striping import write_set_bookies
from embedlog.wire.entry import HEADER


def write(wh, n, prefix=b"e"):
    return [wh.add(prefix + b"%d" % i) for i in range(n)]


def test_old_writer_is_fenced_and_its_later_entries_never_become_readable(cluster):
    c1 = cluster.client("c1")
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 10)
    rh = cluster.client("c2").open_ledger(wh.ledger_id)
    assert rh.is_closed and rh.last_add_confirmed == 9
    with pytest.raises(LedgerFencedError):
        wh.add(b"too late")
    with pytest.raises(LedgerFencedError):
        wh.add(b"still too late")
    md = cluster.client("c3").ledger_metadata(wh.ledger_id)
    assert md.last_entry_id == 9
    # Recovery closed it exactly where this writer's acknowledgements end: closing
    # as the writer then succeeds (replication-protocol.md, "Closing a ledger as a writer").
    wh.close()


def test_writer_close_fails_when_recovery_closed_elsewhere(cluster):
    """The writer confirmed more than the closed ledger holds: its close must fail."""
    c1 = cluster.client("c1")
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 3)
    # Another client closes the ledger at entry 1 by a metadata CAS (as a buggy or
    # malicious recoverer might); the writer confirmed up to 2.
    md = c1.ledger_metadata(wh.ledger_id)
    cluster.metadata.write_ledger(md.evolve(state=LedgerState.CLOSED, last_entry_id=1))
    with pytest.raises(LedgerClosedError, match="confirmed up to 2"):
        wh.close()


def test_writer_close_fails_while_another_client_recovers(cluster):
    c1 = cluster.client("c1")
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 3)
    md = c1.ledger_metadata(wh.ledger_id)
    cluster.metadata.write_ledger(md.evolve(state=LedgerState.IN_RECOVERY))
    with pytest.raises(LedgerFencedError, match="being recovered"):
        wh.close()


def test_recovery_with_one_bookie_down_completes(cluster):
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    write(wh, 20)
    cluster.crash_bookie(cluster.bookie_ids[2])
    rh = cluster.client("c2", request_timeout=0.5).open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 19
    assert rh.read(19, 19)[0].data == b"e19"


def test_recovery_aborts_when_a_write_set_is_unreachable_and_succeeds_later(cluster):
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    write(wh, 5)
    c2 = cluster.client("c2", request_timeout=0.3)
    for b in cluster.bookie_ids:
        cluster.network.block("c2", b)
    with pytest.raises(LedgerRecoveryError):
        c2.open_ledger(wh.ledger_id)
    md = c2.ledger_metadata(wh.ledger_id)
    assert md.state is LedgerState.IN_RECOVERY  # not closed, not truncated
    cluster.network.heal()
    rh = c2.open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 4


def _e5_wq2_aq2_with_two_bookies_down(make_cluster, down):
    """Nine acknowledged entries on a 5-bookie E5 WQ2 AQ2 ledger, then the ensemble's
    bookies at ``down`` (indexes) crash."""
    cluster = make_cluster(5)
    wh = cluster.client("c1").create_ledger(5, 2, 2)
    # Recovery writes the entries past the LAC back to their whole write set (AQ = WQ),
    # and all five bookies are in the ensemble, so none can replace a crashed one: the
    # last entry, 8, is on slots 3 and 4, which stay up in both tests.
    assert write(wh, 9) == list(range(9))
    ensemble = wh.metadata.ensembles[0]
    for i in down:
        cluster.crash_bookie(ensemble[i])
    return cluster, wh, ensemble


def test_e5_wq2_aq2_recovers_with_two_non_adjacent_bookies_down(make_cluster):
    """Every write set ({0,1} {1,2} {2,3} {3,4} {4,0}) keeps one live bookie, so fencing
    reaches quorum coverage (1) in each; E - AQ + 1 = 4 fenced bookies are not needed."""
    cluster, wh, _ = _e5_wq2_aq2_with_two_bookies_down(make_cluster, down=(0, 2))
    rh = cluster.client("c2", request_timeout=0.5).open_ledger(wh.ledger_id)
    assert rh.is_closed and rh.last_add_confirmed == 8
    assert [e.data for e in rh.read(0, 8)] == [b"e%d" % i for i in range(9)]
    with pytest.raises(LedgerFencedError):
        wh.add(b"too late")


def test_e5_wq2_aq2_recovery_aborts_with_two_adjacent_bookies_down(make_cluster):
    """Write set {0, 1} is an ack quorum nobody could fence: abort, never truncate."""
    cluster, wh, ensemble = _e5_wq2_aq2_with_two_bookies_down(make_cluster, down=(0, 1))
    c2 = cluster.client("c2", request_timeout=0.5)
    with pytest.raises(LedgerRecoveryError, match="every write set of 2 needs 1 fenced"):
        c2.open_ledger(wh.ledger_id)
    assert c2.ledger_metadata(wh.ledger_id).state is LedgerState.IN_RECOVERY
    cluster.start_bookie(ensemble[0])
    cluster.start_bookie(ensemble[1])
    rh = c2.open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 8
    assert [e.data for e in rh.read(0, 8)] == [b"e%d" % i for i in range(9)]


def test_recovery_aborts_instead_of_truncating_when_reads_are_unknown(cluster):
    """Fencing succeeds, but the reads past the LAC see only unknowns: abort, never close."""
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    write(wh, 5)  # LAC on bookies is 3 (the LAC travels with the next entry)
    c2 = cluster.client("c2", request_timeout=0.3)
    for b in cluster.bookie_ids:
        cluster.network.drop_next("c2", b, "recovery_read", count=100)
    with pytest.raises(LedgerRecoveryError):
        c2.open_ledger(wh.ledger_id)
    assert c2.ledger_metadata(wh.ledger_id).state is LedgerState.IN_RECOVERY
    cluster.network.heal()
    assert c2.open_ledger(wh.ledger_id).last_add_confirmed == 4


def test_an_entry_lost_on_one_bookie_does_not_truncate(cluster):
    """closing-ledgers-safely.md: entry lost on b1; b2 answers NoSuchEntry; b3 has it."""
    c1 = cluster.client("c1", request_timeout=0.5)
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 3)
    b1, b2, _b3 = wh.metadata.ensembles[0]
    # Entry 3 reaches b1 and b3 only (as after an ensemble change); then b1 loses it.
    cluster.network.drop_next("c1", b2, "add")
    assert wh.add(b"e3") == 3
    cluster.stop_bookie(b1)
    cluster.wipe_bookie(b1, "all")
    # (b1 stays down: with an empty disk it would refuse to boot anyway.)
    rh = cluster.client("c2", request_timeout=0.5).open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 3
    assert rh.read(3, 3)[0].data == b"e3"


def test_concurrent_recoveries_converge(cluster):
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    write(wh, 30)
    clients = [cluster.client(f"r{i}") for i in range(3)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        handles = list(pool.map(lambda c: c.open_ledger(wh.ledger_id), clients))
    assert {h.last_add_confirmed for h in handles} == {29}


def test_ensemble_change_under_a_crashed_bookie_keeps_acked_entries(make_cluster):
    cluster = make_cluster(4)
    c1 = cluster.client("c1", request_timeout=0.5)
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 20)
    victim = wh.metadata.ensembles[0][1]
    cluster.crash_bookie(victim)
    acked = write(wh, 20, prefix=b"after")
    assert acked == list(range(20, 40))
    md = wh.metadata
    assert len(md.ensembles) == 2 and victim not in md.ensembles[max(md.ensembles)]
    wh.close()
    rh = cluster.client("c2").open_ledger(wh.ledger_id)
    data = [e.data for e in rh.read(0, 39)]
    assert data[:20] == [b"e%d" % i for i in range(20)]
    assert data[20:] == [b"after%d" % i for i in range(20)]


def test_an_ensemble_change_starts_at_the_first_unacknowledged_entry(make_cluster):
    """AQ = WQ = 3: no entry is acknowledged without its copy on the bookie that takes the
    crashed one's slot. The new fragment starts at the first entry not acknowledged (10):
    later, the entries queued before the change would stay on the dead bookie and never
    complete; earlier, acknowledged entries would move to a bookie that never got them."""
    cluster = make_cluster(4)
    wh = cluster.client("c1", request_timeout=0.5).create_ledger(3, 3, 3)
    write(wh, 10)
    old = wh.metadata.ensembles[0]
    victim = old[1]
    cluster.crash_bookie(victim)
    assert burst(cluster, wh, [b"e%d" % i for i in range(10, 30)]) == list(range(10, 30))
    md = wh.metadata
    assert [first for first, _ in md.fragments] == [0, 10]
    (spare,) = set(md.fragments[1][1]) - set(old)
    for e in range(30):
        for b in write_set_bookies(e, md.ensemble_for(e), 3):
            if b != victim:
                assert cluster.read_from_bookie(b, wh.ledger_id, e) == b"e%d" % e
    with pytest.raises(NoSuchEntryError):
        cluster.read_from_bookie(spare, wh.ledger_id, 9)


# -- the TLA+ model's counterexamples (github.com/Vanlightly/bookkeeper-tlaplus, README) --------


def _defect1(cluster, *, unsafe: bool):
    """Defect 1: a lost fence plus a late entry let the old writer commit after the close.

    w1's e0 is lost to b1, reaches b2, and reaches b3 late. w2's fence to b3 is
    lost; w2's recovery read of e0 at b2 is lost too, so w2 sees NoSuchEntry
    from b1 and b3 and closes the ledger empty. Then w1's e0 lands on b3.
    """
    w1 = cluster.client("w1", request_timeout=5.0)
    wh = w1.create_ledger(3, 3, 2)
    b1, b2, b3 = wh.metadata.ensembles[0]
    cluster.network.drop_next("w1", b1, "add")
    cluster.network.delay("w1", b3, 1.5)
    fut = wh.add_async(b"e0")
    time.sleep(0.2)  # e0 is on b2 now
    cluster.network.drop_next("w2", b3, "fence")
    cluster.network.drop_next("w2", b2, "recovery_read")
    w2 = cluster.client("w2", request_timeout=0.5, unsafe_recovery_reads_without_fence=unsafe)
    rh = w2.open_ledger(wh.ledger_id)
    assert rh.is_closed and rh.last_add_confirmed == -1
    return fut, wh.ledger_id


def test_defect1_recovery_reads_fence_so_the_late_entry_is_refused(cluster):
    fut, _ = _defect1(cluster, unsafe=False)
    with pytest.raises(LedgerFencedError):
        fut.result(timeout=30)


def test_defect1_without_fencing_recovery_reads_an_acked_entry_is_lost(cluster):
    fut, ledger_id = _defect1(cluster, unsafe=True)
    assert fut.result(timeout=30) == 0  # acknowledged to w1's caller ...
    md = cluster.client("check").ledger_metadata(ledger_id)
    assert md.last_entry_id == -1  # ... but the closed ledger ends before it: data loss


def _defect2(make_cluster, *, unsafe: bool):
    """Defect 2: the new last fragment's bookies report LAC -1; recovery must not start at -1."""
    cluster = make_cluster(4)
    w1 = cluster.client("w1", request_timeout=0.3)
    wh = w1.create_ledger(2, 2, 2)
    write(wh, 10)
    b1, b2 = wh.metadata.ensembles[0]
    b3, b4 = [b for b in cluster.bookie_ids if b not in (b1, b2)]
    # Entry 10 fails on b1 and b2, the ensemble changes to {b3, b4}, and w1 dies before
    # entry 10 reaches the new bookies.
    for b in (b1, b2):
        cluster.network.block("w1", b)
    for b in (b3, b4):
        cluster.network.block("w1", b)
    wh.add_async(b"e10")
    deadline = time.monotonic() + 30
    while len(w1.ledger_metadata(wh.ledger_id).ensembles) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    md = w1.ledger_metadata(wh.ledger_id)
    assert md.ensembles[10] and set(md.ensembles[10]) == {b3, b4}
    w2 = cluster.client("w2", request_timeout=0.5, unsafe_recovery_from_minus_one=unsafe)
    return cluster, wh, w2


def test_defect2_recovery_starts_at_the_last_fragment(make_cluster):
    _cluster, wh, w2 = _defect2(make_cluster, unsafe=False)
    rh = w2.open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 9
    assert [e.data for e in rh.read(0, 9)] == [b"e%d" % i for i in range(10)]


def test_defect2_starting_at_minus_one_truncates_the_ledger(make_cluster):
    _cluster, wh, w2 = _defect2(make_cluster, unsafe=True)
    rh = w2.open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed < 9  # ten acknowledged entries lost


# -- a writer's ensemble change that loses its compare-and-swap ------------------------------


@pytest.mark.parametrize("recovery", ["closed", "aborted"])
def test_an_ensemble_change_that_loses_to_a_recovery_fails_the_writers_adds(make_cluster, recovery):
    """replication-protocol.md: the writer's ensemble change fails its CAS, re-reads, finds
    the ledger no longer OPEN and fails its adds. Three spare bookies that nobody fenced
    would take the late entry: a writer that went ahead with its new fragment would have
    it acknowledged after the recovery decided the ledger's end."""
    cluster = make_cluster(6)
    c1 = cluster.client("c1", request_timeout=0.5)
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 5)
    lid = wh.ledger_id
    ensemble = wh.metadata.ensembles[0]
    c2 = cluster.client("c2", request_timeout=0.5)
    if recovery == "closed":
        assert c2.open_ledger(lid).last_add_confirmed == 4
    else:  # fenced, then aborted: the ledger stays IN_RECOVERY
        for b in ensemble:
            cluster.network.drop_next("c2", b, "recovery_read", count=100)
        with pytest.raises(LedgerRecoveryError):
            c2.open_ledger(lid)
    recovered = c2.ledger_metadata(lid)
    # The writer hears nothing more from its bookies (no fenced answer either): its only way
    # to learn about the recovery is the CAS of the ensemble change their timeouts start.
    for b in ensemble:
        cluster.network.block("c1", b)
    late = wh.add_async(b"late")
    expected = LedgerClosedError if recovery == "closed" else LedgerFencedError
    with pytest.raises(expected, match="ensemble change"):
        late.result()
    with pytest.raises(expected):
        wh.add(b"later")
    assert c2.ledger_metadata(lid).version == recovered.version  # no fragment was added
    spares = set(cluster.bookie_ids) - set(ensemble)
    assert all(not cluster.bookie(b).ledger_entries(lid) for b in spares)


# -- recovery's write-back -------------------------------------------------------------------


def burst(cluster, wh, payloads):
    """Queue every add in one loop iteration: they all carry the LAC of that moment, so the
    bookies learn nothing about them and recovery writes them all back."""

    async def queue():
        return await asyncio.gather(*(wh.add_aio(p) for p in payloads))

    return cluster.runtime.run(queue())


def raw_lac(cluster, bookie, ledger_id, entry_id):
    """The LAC stamped in the entry as ``bookie`` stores it."""
    body = cluster.bookie(bookie).storage.get(ledger_id, entry_id)
    return HEADER.unpack_from(body)[2]


def test_recovery_writes_carry_the_lac_it_fenced_with(cluster):
    w = cluster.client("w")
    wh = w.create_ledger(3, 3, 2)
    assert burst(cluster, wh, [b"e%d" % i for i in range(64)]) == list(range(64))
    w.close()  # the writer dies before its explicit LAC tells the bookies about 63
    # Every request of the recovery takes 0.3 s: the reads run 16 ahead, so the first
    # sixteen write-backs are acknowledged (0.6 s) before entries 32.. are read (0.9 s).
    # Stamped with the LAC of their moment, those would announce as acknowledged entries
    # the recovery has not written back yet, in a ledger whose end is undecided.
    for b in wh.metadata.ensembles[0]:
        cluster.network.delay("r", b, 0.3)
    rh = cluster.client("r").open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 63
    for b in wh.metadata.ensembles[0]:
        assert {raw_lac(cluster, b, wh.ledger_id, e) for e in range(64)} == {-1}


def _write_back_through_replacements(cluster):
    """Ten entries, then twenty more in one burst (the bookies' LAC stays at 9) on an E3 WQ2
    ledger of five bookies; recovery client "a" cannot write back to the first two bookies
    of the ensemble, so its write-back replaces them with the two spares."""
    w = cluster.client("w")
    wh = w.create_ledger(3, 2, 2)
    write(wh, 10)
    assert burst(cluster, wh, [b"e%d" % i for i in range(10, 30)]) == list(range(10, 30))
    w.close()  # the writer dies before its explicit LAC tells the bookies about 29
    b1, b2, b3 = wh.metadata.ensembles[0]
    spares = [b for b in cluster.bookie_ids if b not in (b1, b2, b3)]
    for b in (b1, b2):
        cluster.network.drop_next("a", b, "recovery_add", count=1000)
    return wh, (b1, b2, b3), spares


def test_recovery_closes_with_the_fragment_its_write_back_replaced_bookies_in(make_cluster):
    cluster = make_cluster(5)
    wh, (b1, b2, b3), spares = _write_back_through_replacements(cluster)
    rh = cluster.client("a", request_timeout=0.5).open_ledger(wh.ledger_id)
    assert rh.last_add_confirmed == 29
    md = cluster.client("check").ledger_metadata(wh.ledger_id)
    # Every write-back waits on b1 or b2 (each write set holds one), so the replacement
    # fragment starts at the first one, 10, and the closing CAS carries it.
    assert md.fragments[0] == (0, (b1, b2, b3))
    assert md.fragments[1][0] == 10 and set(md.fragments[1][1]) == {*spares, b3}
    assert [e.data for e in rh.read(0, 29)] == [b"e%d" % i for i in range(30)]
    for e in range(10, 30):
        for b in write_set_bookies(e, md.fragments[1][1], 2):
            assert cluster.read_from_bookie(b, wh.ledger_id, e) == b"e%d" % e
            assert raw_lac(cluster, b, wh.ledger_id, e) == 9


def test_recovery_keeps_its_ensemble_changes_from_a_concurrent_recovery(make_cluster, caplog):
    """Recovery "a" replaces the two bookies it cannot write back to. Were that change
    written to the metadata before its close, recovery "b", starting meanwhile, would take
    the new fragment (spares that hold nothing of entries 10..29 yet) for the ledger's last
    and close it at entry 9: twenty acknowledged entries lost."""
    caplog.set_level(logging.INFO, logger="embedlog.ledger")
    cluster = make_cluster(5)
    wh, _, spares = _write_back_through_replacements(cluster)
    lid = wh.ledger_id
    for b in spares:  # a's write-back to the spares lands 2 s late: b recovers meanwhile
        cluster.network.delay("a", b, 2.0)
    a = cluster.client("a", request_timeout=3.0)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(a.open_ledger, lid)
        while not any("ensemble change" in r.getMessage() for r in caplog.records):
            assert not first.done(), first.result()
            time.sleep(0.01)
        second = cluster.client("b").open_ledger(lid)
        assert second.last_add_confirmed == 29
        assert first.result().last_add_confirmed == 29  # a's close lost: it adopts b's
    md = cluster.client("check").ledger_metadata(lid)
    assert md.last_entry_id == 29 and len(md.fragments) == 1
    assert [e.data for e in second.read(0, 29)] == [b"e%d" % i for i in range(30)]


def test_concurrent_recoveries_that_find_different_ends_converge(cluster):
    """Entry 5 reached only b1 (never acknowledged). Recovery "w" hears b1 first and
    recovers it; recovery "l" hears the two negatives first and ends at 4. The second close
    loses its CAS and adopts the first one's end, whichever it is."""
    c1 = cluster.client("c1", request_timeout=30.0)  # no resend of entry 5 during the test
    wh = c1.create_ledger(3, 3, 2)
    write(wh, 5)
    b1, b2, b3 = wh.metadata.ensembles[0]
    for b in (b2, b3):
        cluster.network.drop_next("c1", b, "add")
    wh.add_async(b"e5")
    while 5 not in cluster.bookie(b1).ledger_entries(wh.ledger_id):
        time.sleep(0.01)
    # The delays order the answers each recovery hears, and keep both running for a second
    # or more, long after each read the metadata.
    cluster.network.delay("w", b1, 1.0)
    for b in (b2, b3):
        cluster.network.delay("w", b, 1.5)
        cluster.network.delay("l", b, 1.0)
    cluster.network.delay("l", b1, 4.0)
    clients = [cluster.client(n, request_timeout=10.0) for n in ("w", "l")]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        handles = list(pool.map(lambda c: c.open_ledger(wh.ledger_id), clients))
    md = cluster.client("check").ledger_metadata(wh.ledger_id)
    assert md.last_entry_id in (4, 5)
    assert [h.last_add_confirmed for h in handles] == [md.last_entry_id] * 2
    assert [e.data for e in handles[0].read(0, 4)] == [b"e%d" % i for i in range(5)]
