"""entries(): lazy, batched reads of a range (bounded and unbounded ledgers)."""

from __future__ import annotations

import pytest

from embedlog.errors import NoSuchEntryError, ReadPastLastConfirmedError
from embedlog.ledger import batches


def test_entries_of_a_closed_ledger_in_batches(cluster, monkeypatch):
    monkeypatch.setattr(batches, "BATCH", 7)  # many batches, a partial last one
    c = cluster.client("c")
    wh = c.create_ledger(3, 3, 2)
    futures = [wh.add_async(b"%d" % i) for i in range(50)]
    [f.result() for f in futures]
    wh.close()
    rh = c.open_ledger(wh.ledger_id)
    assert [(e.entry_id, e.data) for e in rh.entries()] == [(i, b"%d" % i) for i in range(50)]
    assert [e.entry_id for e in rh.entries(10, 20)] == list(range(10, 21))
    assert list(rh.entries(5, 4)) == []
    with pytest.raises(ReadPastLastConfirmedError):
        rh.entries(0, 50)


def test_unbounded_entries_leave_out_noops_and_refuse_trimmed_ids(make_cluster, monkeypatch):
    monkeypatch.setattr(batches, "BATCH", 5)
    cluster = make_cluster(4)
    w1 = cluster.client("w1").create_unbounded(3, 3, 2, fragment_max_entries=10)
    for i in range(12):
        w1.append(b"a%d" % i)
    w2 = cluster.client("w2").open_unbounded(w1.ledger_id)  # no-op at 12
    for i in range(20):
        w2.append(b"b%d" % i)
    got = [e.entry_id for e in w2.entries()]
    assert got == list(range(12)) + list(range(13, 33))
    follower = cluster.client("f").open_unbounded(w1.ledger_id, takeover=False)
    assert [e.data for e in follower.entries(30)] == [b"b17", b"b18", b"b19"]
    w2.trim(20)
    with pytest.raises(NoSuchEntryError):
        list(follower.entries(0))
