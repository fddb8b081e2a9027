"""A fragment rollover waits until the full fragment is on every bookie of its write sets.

After the switch nobody replaces a bookie of the old fragment any more. An entry that
reached its ack quorum but not one member of its write set would stay listed on that
member for good; if the member holds an older term's leftover at that id (its TRIM ABOVE
failed, or it missed a takeover's truncation), a reader that asks it first reads the
leftover (found by the simulator: seed 247 of ``unbounded``). So the rollover waits
for the LAFR, and a member that does not confirm is replaced from the LAFR on.
"""

from __future__ import annotations

import errno
import time

from unbounded_helpers import replicas, wait_until


def test_rollover_waits_for_the_whole_write_set_of_the_full_fragment(make_cluster):
    cluster = make_cluster(4)
    client = cluster.client("w", request_timeout=1.0)
    ul = client.create_unbounded(3, 3, 2, fragment_max_entries=4)
    slow = ul.metadata.last_fragment[1][2]
    cluster.network.block("w", slow)  # its adds are lost: acks come from the other two
    payloads = [b"e%d" % i for i in range(10)]
    for p in payloads:
        ul.append(p)
    cluster.network.heal()
    md = ul.metadata
    assert len(md.fragments) >= 2  # rolled over (and replaced the blocked bookie)
    # Every entry of every fragment but the last is on its whole write set, as the
    # metadata lists it: the blocked bookie was replaced before the switch.
    last_first = md.last_fragment[0]
    for eid in range(last_first):
        held = replicas(cluster, md, eid)
        assert set(held.values()) == {payloads[eid]}, (eid, held, md.fragments)
    # The last fragment gets there too (the writer keeps resending until it does).
    wait_until(
        lambda: all(
            set(replicas(cluster, ul.metadata, e).values()) == {payloads[e]}
            for e in range(len(payloads))
        )
    )


def test_a_replacement_is_readied_before_the_metadata_lists_it(make_cluster):
    """An ensemble change moves entries, acknowledged ones too, to the replacement. A
    replacement that still holds an older term's entry at one of their ids (here: one put
    there by hand) would serve readers that payload for an acknowledged id, so it is
    readied (TRIM ABOVE) before the compare-and-swap that lists it; one that cannot be
    readied is never listed (found by the simulator: seed 758 of ``unbounded``)."""
    from unbounded_helpers import raw_add, stored

    cluster = make_cluster(5)
    client = cluster.client("w", request_timeout=0.5)
    ul = client.create_unbounded(4, 3, 2)
    lid = ul.ledger_id
    ensemble = ul.metadata.last_fragment[1]
    (spare,) = set(cluster.bookie_ids) - set(ensemble)
    assert raw_add(cluster, spare, lid, 6, 0, b"stale").status == 0  # an older entry at 6
    cluster.network.block("w", ensemble[0])  # fails: its only replacement is the spare,
    cluster.network.block("w", spare)  # which cannot be readied while this lasts
    futures = [ul.append_async(b"e%d" % i) for i in range(8)]
    time.sleep(2.0)  # the failure is seen, the spare tried and not readied, retried
    assert spare not in ul.metadata.bookies()
    assert stored(cluster, spare, lid, 6) == b"stale"
    cluster.network.heal()
    assert [f.result(timeout=30) for f in futures] == list(range(8))
    wait_until(
        lambda: all(
            set(replicas(cluster, ul.metadata, e).values()) == {b"e%d" % e} for e in range(8)
        )
    )
    if spare in ul.metadata.bookies():  # listed only once readied: the stale entry is gone
        assert stored(cluster, spare, lid, 6) in (b"e6", None)


def test_a_bookie_that_refuses_acknowledged_entries_is_replaced_before_the_rollover(make_cluster):
    """A stream needs each acknowledged entry on its whole write set before its next
    rollover. A bookie that refuses such an entry (read-only: its disk failed) must be
    replaced like one that never answers; a writer that ignored the refusal waited for
    ever at the rollover, with every later append (found by the simulator: seed 6 of
    ``unbounded-streams``)."""
    cluster = make_cluster(4)
    client = cluster.client("w", request_timeout=10.0)
    ul = client.create_unbounded(3, 3, 2, fragment_max_entries=2)
    slow = ul.metadata.last_fragment[1][2]
    cluster.network.delay("w", slow, 3.0)  # its adds land after the others acknowledged
    assert [ul.append(b"e%d" % i) for i in range(2)] == [0, 1]
    # Its disk fails (read-only for good): it refuses them (EREADONLY) when they land.
    broken = OSError(errno.EIO, "Input/output error")
    cluster.runtime.call(cluster.bookie(slow).flusher.met, broken)
    third = ul.append_async(b"e2")  # the rollover at 2 waits for 0 and 1 on all three
    assert third.result(timeout=30) == 2
    cluster.network.heal()
    md = ul.metadata
    assert slow not in md.ensemble_for(0)  # replaced from entry 0, the LAFR + 1
    for eid in range(3):
        held = replicas(cluster, md, eid)
        assert set(held.values()) == {b"e%d" % eid} and len(held) == 3, (eid, held, md.fragments)
