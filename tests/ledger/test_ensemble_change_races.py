"""Race 3 of issue 12: acks that arrive while an ensemble change is in flight.

The writer picks the new fragment's first entry, then waits for the metadata
compare-and-swap. An ack that arrives meanwhile from the bookie being replaced
must not complete an entry: once the swap lands, the metadata no longer lists
that bookie for the entry, and the entry would be acknowledged with fewer than
AQ copies on the bookies that the metadata names for it.

The history, with a slow metadata store (``delay_metadata``, 2 s per operation) and
4 s request timeouts:

* b1 and b3 answer 3.8 s late; b3 loses e0 (``drop_next``); b2 answers e0 at once;
* at 3 s e1.. are sent, and b2's link is blocked: it will time out on them;
* at 4 s e0's timeout on b3 starts the change: the bookie list takes 2 s, the
  compare-and-swap 2 s more;
* at 6.8 s, during the compare-and-swap, b1's and b3's acks for e1.. arrive.

Without the rule, e1.. complete with b1 and b3 during the swap, are never resent
to b3's replacement, and b2's own replacement starts after them: each ends on one
bookie of its write set in the metadata.
"""

from __future__ import annotations

import time

import pytest

from embedlog.errors import BKError
from embedlog.ledger.quorum import write_set_bookies

SLOW_METADATA = 2.0
TIMEOUT = 4.0
LATE = 3.8


def copies(cluster, md, entry_id: int, payload: bytes) -> int:
    """How many bookies that ``md`` lists for the entry hold it with this payload."""
    held = 0
    for b in write_set_bookies(entry_id, md.ensemble_for(entry_id), md.write_quorum):
        try:
            held += cluster.read_from_bookie(b, md.ledger_id, entry_id) == payload
        except BKError:
            pass
    return held


@pytest.mark.parametrize("kind", ["bounded", "unbounded"])
def test_acks_during_an_ensemble_change_never_count_the_replaced_bookie(make_cluster, kind):
    cluster = make_cluster(5)
    client = cluster.client("c1", request_timeout=TIMEOUT)
    if kind == "bounded":
        handle = client.create_ledger(3, 3, 2)
        add = handle.add_async
    else:
        handle = client.create_unbounded(3, 3, 2)
        add = handle.append_async
    lid = handle.ledger_id
    b1, b2, b3 = cluster.metadata.read_ledger(lid).last_fragment[1]
    net = cluster.network
    net.delay("c1", b1, LATE)
    net.delay("c1", b3, LATE)
    net.drop_next("c1", b3, "add")
    net.delay_metadata(SLOW_METADATA)

    futures = [add(b"e0")]
    time.sleep(3.0)  # b2 has answered e0
    net.block("c1", b2)
    futures += [add(b"e%d" % i) for i in range(1, 20)]
    ids = [f.result() for f in futures]
    assert ids == list(range(20))

    # b2's replacement comes after b3's (the old b3 may come back as it)
    while b2 in cluster.metadata.read_ledger(lid).last_fragment[1]:
        time.sleep(0.05)
    net.heal()
    md = cluster.metadata.read_ledger(lid)
    held = {i: copies(cluster, md, i, b"e%d" % i) for i in ids}
    assert all(n >= md.ack_quorum for n in held.values()), (md.fragments, held)
    handle.close()


def test_an_ensemble_change_whose_answer_was_lost_completes_nothing(make_cluster, monkeypatch):
    """The compare-and-swap that lists a replacement is applied, but its answer is lost (a
    ZooKeeper ConnectionLoss). Entries held back during the change must not complete on
    the old ensemble afterwards: e0 here has the acks of b3, replaced in the metadata
    now, and of b1, and the bookies the metadata lists for it hold one copy (found by the
    simulator: seed 7853 of ``bounded``, 3473 of ``bounded-nojournal``). The writer fails
    instead, and its callers learn an unknown outcome."""
    from embedlog.errors import MetadataError
    from embedlog.metadata.client import MetadataClient

    cluster = make_cluster(4)
    client = cluster.client("c1", request_timeout=5.0)
    handle = client.create_ledger(3, 3, 2)
    lid = handle.ledger_id
    b1, b2, b3 = cluster.metadata.read_ledger(lid).last_fragment[1]
    write = MetadataClient.write_ledger

    def applied_then_lost(self, md):
        monkeypatch.setattr(MetadataClient, "write_ledger", write)
        write(self, md)
        raise MetadataError("ZooKeeper ConnectionLoss on set (after it was applied)")

    monkeypatch.setattr(MetadataClient, "write_ledger", applied_then_lost)
    net = cluster.network
    net.delay("c1", b1, 0.5)  # b1's ack of e0 comes during the change
    net.drop_next("c1", b2, "add")  # b2 never gets e0
    net.delay_metadata(1.0)
    e0 = handle.add_async(b"e0")
    time.sleep(0.2)  # b3 acknowledged e0
    cluster.crash_bookie(b3)
    e1 = handle.add_async(b"e1")  # fails on b3 at once: the change starts
    outcomes = []
    for f in (e0, e1):
        try:
            outcomes.append(f.result(timeout=30))
        except BKError as exc:
            outcomes.append(type(exc).__name__)
    net.heal()
    md = cluster.metadata.read_ledger(lid)
    assert b3 not in md.ensemble_for(0)  # the swap was applied
    if outcomes[0] == 0:  # acknowledged: then it must be on AQ bookies the metadata lists
        assert copies(cluster, md, 0, b"e0") >= md.ack_quorum, (md.fragments, outcomes)
    assert outcomes == ["MetadataError", "MetadataError"]
