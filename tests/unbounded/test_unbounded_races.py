"""Races of issue 12 on unbounded ledgers, each through the public API and its faults.

Race 1 (E > WQ): the takeover's truncate no-op reaches only its own write set. A
bookie of the last fragment outside it keeps an older term's unacknowledged entry
at an id the new term writes next; if the new term's add to it is lost, the write
set holds two payloads for one acknowledged id, and a later takeover that hears
from that bookie first recovers the dirty one. Every bookie of the last fragment
must drop older terms' entries above the recovered end before the new term
acknowledges anything.
"""

from __future__ import annotations

import concurrent.futures

from unbounded_helpers import stored, wait_until

from embedlog.metadata.ledger_metadata import LedgerState


def test_a_takeover_clears_the_whole_last_fragment_when_e_exceeds_wq(make_cluster):
    cluster = make_cluster(4)
    net = cluster.network
    ul1 = cluster.client("c1").create_unbounded(4, 3, 2)
    lid = ul1.ledger_id
    s0, s1, s2, s3 = ul1.metadata.last_fragment[1]
    # Write sets (E4 WQ3): 0 -> s0 s1 s2, 1 -> s1 s2 s3, 2 -> s2 s3 s0.
    assert ul1.append(b"t1-0") == 0
    wait_until(lambda: all(stored(cluster, b, lid, 0) == b"t1-0" for b in (s0, s1, s2)))
    for b in (s1, s2, s3):
        net.block("c1", b)
    ul1.append_async(b"t1-1")  # reaches nobody
    ul1.append_async(b"t1-2")  # reaches s0 only: a dirty entry outside write set 1
    wait_until(lambda: stored(cluster, s0, lid, 2) == b"t1-2")

    ul2 = cluster.client("c2").open_unbounded(lid)  # no-op at 1, truncating s1 s2 s3
    s0_after_takeover = stored(cluster, s0, lid, 2)
    net.drop_next("c2", s0, "add")
    assert ul2.append(b"t2-2") == 2  # acknowledged by s2 and s3; s0's copy is lost

    # The next takeover hears from s0 first.
    c3 = cluster.client("c3", request_timeout=2.0)
    net.delay("c3", s2, 0.5)
    net.delay("c3", s3, 0.5)
    ul3 = c3.open_unbounded(lid)
    net.heal()
    assert [e.data for e in ul3.read(0, 2)] == [b"t1-0", b"t2-2"]
    assert s0_after_takeover is None  # dropped although s0 missed the no-op
    ul3.close()


def test_a_trim_during_a_takeover_does_not_abort_it(make_cluster):
    """The takeover's final compare-and-swap loses to a trim's version. The trim only
    dropped fragments below the last one, so the takeover rebases on it and opens its
    term (it used to raise InvalidTermError and leave the ledger IN_RECOVERY)."""
    cluster = make_cluster(3)
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2, fragment_max_entries=5)
    lid = ul1.ledger_id
    for i in range(20):
        ul1.append(b"e%d" % i)
    assert len(ul1.metadata.fragments) == 4
    c2 = cluster.client("c2", request_timeout=5.0)
    for b in cluster.bookie_ids:
        cluster.network.delay("c2", b, 0.3)  # a slow takeover: the trim lands inside it
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        taking = pool.submit(c2.open_unbounded, lid)
        wait_until(lambda: cluster.metadata.read_ledger(lid).term == 2)
        assert cluster.metadata.read_ledger(lid).state is LedgerState.IN_RECOVERY
        cluster.client("c3").open_unbounded(lid, takeover=False).trim(10)
        ul2 = taking.result()
    cluster.network.heal()
    md = cluster.metadata.read_ledger(lid)
    assert (ul2.term, md.state, md.fragments[0][0]) == (2, LedgerState.OPEN, 10)
    appended = ul2.append(b"after")
    assert [e.data for e in ul2.read(10, appended)] == [b"e%d" % i for i in range(10, 20)] + [
        b"after"
    ]
    ul2.close()


def test_an_aborted_takeover_leaves_no_hole_in_the_displaced_writers_sequence(make_cluster):
    """E = WQ = 3. Term 1 leaves c1-4 on b3 only (c1-3 reached nobody). Term 2 finds id 3
    unrecoverable, puts its no-op there on b1 and b2, and is displaced before b3 gets it.
    Term 3 recovers the no-op at 3 and then hears from b3 first for id 4. Entries carry
    the term that made them: c1-4 (term 1) above a term-2 entry is a leftover that was
    never acknowledged. Recovering it would make the stream c1-0, c1-1, c1-2, c1-4."""
    cluster = make_cluster(3)
    net = cluster.network
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2)
    lid = ul1.ledger_id
    b1, b2, b3 = ul1.metadata.last_fragment[1]
    for i in range(3):
        ul1.append(b"c1-%d" % i)
    wait_until(lambda: all(stored(cluster, b, lid, 2) == b"c1-2" for b in (b1, b2, b3)))
    net.block("c1", b1)
    net.block("c1", b2)
    net.drop_next("c1", b3, "add")
    ul1.append_async(b"c1-3")  # reaches nobody
    ul1.append_async(b"c1-4")  # reaches b3 only
    wait_until(lambda: stored(cluster, b3, lid, 4) == b"c1-4")

    c2 = cluster.client("c2", request_timeout=1.0, add_entry_quorum_timeout=3.0)
    net.drop_next("c2", b3, "recovery_add", 100)  # term 2's no-op never reaches b3
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        taking = pool.submit(c2.open_unbounded, lid)
        wait_until(lambda: stored(cluster, b1, lid, 3) == b"")  # the no-op, on b1 and b2
        wait_until(lambda: stored(cluster, b2, lid, 3) == b"")

        c3 = cluster.client("c3", request_timeout=2.0)
        net.delay("c3", b1, 0.2)  # b3 answers first
        net.delay("c3", b2, 0.2)
        ul3 = c3.open_unbounded(lid)
        net.heal()
        assert taking.exception() is not None  # term 2 was displaced
    appended = ul3.append(b"c3-x")
    visible = [e.data for e in ul3.read(0, appended)]
    assert visible == [b"c1-0", b"c1-1", b"c1-2", b"c3-x"]
    ul3.close()
