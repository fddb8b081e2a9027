"""The article's log-divergence scenario (shared/seeds/unbounded-ledgers.md).

c1 writes {0: A} to every bookie and {1: B} only to b1. c2 takes over without
hearing from b1 (its fence and recovery reads to b1 are lost), recovers entry 0 and
appends C while b1 is unreachable. With the truncate no-op, b1 drops B when the no-op
reaches it (the takeover cannot complete before it does) and C lands after the no-op:
every bookie agrees on every id and readers see A then C. Without the no-op (the
test-only unsafe switch), C is acknowledged at id 1 by b2 and b3 while b1 keeps B at
id 1: the log has diverged, and a reader that asks b1 first reads B instead of C.
"""

from __future__ import annotations

from unbounded_helpers import replicas, stored, wait_until


def article_scenario(cluster, *, unsafe: bool):
    c1 = cluster.client("c1", request_timeout=5.0)
    ul1 = c1.create_unbounded(3, 3, 2)
    md = ul1.metadata
    ensemble = md.last_fragment[1]
    # b1 is the bookie readers ask first for entry 1 (write set of 1 starts at index 1).
    b1, b2, b3 = ensemble[1], ensemble[2], ensemble[0]
    lid = ul1.ledger_id

    assert ul1.append(b"A") == 0
    wait_until(lambda: all(stored(cluster, b, lid, 0) == b"A" for b in ensemble))
    cluster.network.block("c1", b2)
    cluster.network.block("c1", b3)
    pending_b = ul1.append_async(b"B")  # reaches b1 only; never acknowledged
    wait_until(lambda: stored(cluster, b1, lid, 1) == b"B")

    c2 = cluster.client("c2", request_timeout=5.0, unsafe_takeover_without_noop=unsafe)
    cluster.network.drop_next("c2", b1, "fence", 5)
    cluster.network.drop_next("c2", b1, "recovery_read", 100)
    ul2 = c2.open_unbounded(lid)
    assert ul2.term == 2
    cluster.network.block("c2", b1)  # b1 unreachable while C is appended
    c_id = ul2.append(b"C")
    cluster.network.heal()
    assert not pending_b.done() or pending_b.exception() is not None
    return c2, ul2, lid, c_id, (b1, b2, b3)


def test_truncate_noop_prevents_the_articles_log_divergence(cluster):
    _c2, ul2, lid, c_id, (b1, _b2, _b3) = article_scenario(cluster, unsafe=False)
    assert c_id == 2  # the no-op took id 1
    md = ul2.metadata
    # The no-op reached b1 before the takeover completed: B is gone there.
    assert stored(cluster, b1, lid, 1) == b""
    for eid in range(c_id + 1):
        held = {v for v in replicas(cluster, md, eid).values() if v is not None}
        assert len(held) == 1, f"entry {eid} diverged: {replicas(cluster, md, eid)}"
    for name in ("r1", "r2"):
        reader = cluster.client(name).open_unbounded(lid, takeover=False)
        wait_until(lambda r=reader: r.read_last_add_confirmed() >= c_id)  # explicit LAC
        assert [e.data for e in reader.read(0, c_id)] == [b"A", b"C"]
        assert [e.entry_id for e in reader.read(0, c_id)] == [0, 2]


def test_without_the_noop_the_log_diverges(cluster):
    _c2, ul2, lid, c_id, (b1, b2, b3) = article_scenario(cluster, unsafe=True)
    assert c_id == 1  # C reused the id B had on b1
    md = ul2.metadata
    held = replicas(cluster, md, 1)
    assert held[b1] == b"B" and held[b2] == b"C" and held[b3] == b"C"  # divergence
    reader = cluster.client("r1").open_unbounded(lid, takeover=False)
    wait_until(lambda: reader.read_last_add_confirmed() >= c_id)
    # Readers ask b1 first for entry 1: the acknowledged C is lost to them.
    assert [e.data for e in reader.read(0, 1)] == [b"A", b"B"]


def test_the_noop_truncates_what_an_older_term_left_above_it(cluster):
    """The article's scenario with two of c1's entries on b1 only (B at 1, B2 at 2). The
    no-op lands at 1 (over B); only its truncate removes B2, which c2's C at 2 does not
    overwrite on b1 while b1 is unreachable: without it the write set of 2 holds B2 and C."""
    c1 = cluster.client("c1", request_timeout=5.0)
    ul1 = c1.create_unbounded(3, 3, 2)
    ensemble = ul1.metadata.last_fragment[1]
    b1, b2, b3 = ensemble[1], ensemble[2], ensemble[0]
    lid = ul1.ledger_id
    assert ul1.append(b"A") == 0
    wait_until(lambda: all(stored(cluster, b, lid, 0) == b"A" for b in ensemble))
    cluster.network.block("c1", b2)
    cluster.network.block("c1", b3)
    ul1.append_async(b"B")
    ul1.append_async(b"B2")
    wait_until(lambda: stored(cluster, b1, lid, 2) == b"B2")

    c2 = cluster.client("c2", request_timeout=5.0)
    cluster.network.drop_next("c2", b1, "fence", 5)
    cluster.network.drop_next("c2", b1, "recovery_read", 100)
    ul2 = c2.open_unbounded(lid)
    assert ul2.last_add_confirmed == 1  # the no-op
    cluster.network.block("c2", b1)
    assert ul2.append(b"C") == 2
    cluster.network.heal()
    assert replicas(cluster, ul2.metadata, 2) == {b1: None, b2: b"C", b3: b"C"}
