"""An ensemble change whose compare-and-swap was applied but whose answer was lost,
end to end on a cluster.

What the writer's add pipeline does with answers that land while a replacement is in
flight (race 3 of issue 12: nothing completes until the replaced bookies' acks are
taken back), with late acks from replaced bookies and with resends is scripted in
tests/ledger/test_pipeline.py (pipeline_scripts/answer_during_replacement.txt and the
others), with no cluster and no sleeps.
"""

from __future__ import annotations

import time

from embedlog.errors import BKError
from embedlog.metadata.striping import write_set_bookies


def copies(cluster, md, entry_id: int, payload: bytes) -> int:
    """How many bookies that ``md`` lists for the entry hold it with this payload."""
    held = 0
    for b in write_set_bookies(entry_id, md.ensemble_for(entry_id), md.write_quorum):
        try:
            held += cluster.read_from_bookie(b, md.ledger_id, entry_id) == payload
        except BKError:
            pass
    return held


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
