"""``cluster.network.delay_metadata``: a slow metadata store (ZooKeeper) holds back metadata
operations only; the bookies, which share the event loop, go on serving.

Each test sets a delay far longer than it runs, so a held-back operation is seen still
waiting and then released by ``heal()``: the order of events, never their durations.
"""

from __future__ import annotations

import concurrent.futures

from embedlog import LedgerState

LONGER_THAN_THE_TEST = 120.0


def stored_fragments(cluster, ledger_id):
    # The cluster's own blocking metadata calls bypass the delay: what the store holds now.
    return cluster.metadata.read_ledger(ledger_id).ensembles


def test_an_ensemble_change_waits_on_slow_metadata_while_other_adds_flow(make_cluster):
    cluster = make_cluster(5)
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    assert [wh.add(b"e%d" % i) for i in range(5)] == list(range(5))
    other = cluster.client("c2").create_ledger(2, 2, 2)
    victim = next(b for b in wh.metadata.ensembles[0] if b not in other.metadata.ensembles[0])
    cluster.network.delay_metadata(LONGER_THAN_THE_TEST)
    cluster.crash_bookie(victim)
    # Entry 5 finds the victim gone at once, long before the others' fsync'd acks: the
    # ensemble change starts, and waits on the metadata. Entry 5 and the adds made
    # meanwhile wait for the new ensemble (as BookKeeper's do: no ack completes while
    # the change is in flight) ...
    held = [wh.add_async(b"e%d" % i) for i in range(5, 16)]
    # ... while the bookies, which share the loop with the sleeping metadata operation,
    # go on serving another ledger.
    assert [other.add(b"o%d" % i) for i in range(20)] == list(range(20))
    assert not any(f.done() for f in held)
    assert list(stored_fragments(cluster, wh.ledger_id)) == [0]

    cluster.network.heal()
    assert [f.result(timeout=30) for f in held] == list(range(5, 16))  # a hang guard only
    fragments = stored_fragments(cluster, wh.ledger_id)
    assert sorted(fragments) == [0, 5]
    assert victim not in fragments[5]
    wh.close()
    rh = cluster.client("c3").open_ledger(wh.ledger_id)
    assert [e.data for e in rh.read(0, 15)] == [b"e%d" % i for i in range(16)]


def test_a_create_waits_on_slow_metadata_without_stalling_the_bookies(cluster):
    wh = cluster.client("w").create_ledger(3, 3, 2)
    cluster.network.delay_metadata(LONGER_THAN_THE_TEST)
    creator = cluster.client("c")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        creating = pool.submit(creator.create_ledger, 3, 3, 2)
        # The create sleeps on the loop the bookies share: adds complete meanwhile.
        assert [wh.add(b"x%d" % i) for i in range(20)] == list(range(20))
        assert not creating.done()
        assert list(cluster.metadata.list_ledgers()) == [wh.ledger_id]
        cluster.network.heal()
        created = creating.result(timeout=30)  # a hang guard only
    assert sorted(cluster.metadata.list_ledgers()) == sorted([wh.ledger_id, created.ledger_id])
    assert created.add(b"y") == 0


def test_every_ledger_operation_works_under_a_metadata_delay(cluster):
    cluster.network.delay_metadata(0.2)
    c1, c2 = cluster.client("c1"), cluster.client("c2")
    wh = c1.create_ledger(3, 3, 2)
    assert [wh.add(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    assert c2.ledger_metadata(wh.ledger_id).state is LedgerState.OPEN
    rh = c2.open_ledger(wh.ledger_id)  # recovery: IN_RECOVERY, then the closing CAS
    assert rh.is_closed and rh.last_add_confirmed == 2
    assert [e.data for e in rh.read(0, 2)] == [b"e0", b"e1", b"e2"]
    assert list(c2.list_ledgers()) == [wh.ledger_id]
    c2.delete_ledger(wh.ledger_id)
    assert list(c1.list_ledgers()) == []
