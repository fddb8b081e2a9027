"""Garbage collection (embedlog/bookie/gc.py): a bookie that missed a ledger's deletion
drops its copy once the metadata is gone, and never a ledger whose metadata exists."""

from __future__ import annotations

import time
from typing import Any

import pytest

from embedlog import LocalCluster
from embedlog.bookie.gc import unlisted
from embedlog.errors import MetadataError
from embedlog.metadata.client import MetadataClient


@pytest.mark.parametrize(
    ("held", "listed", "candidates"),
    [
        ([], [], []),
        ([1, 2, 3], [1, 2, 3], []),
        ([3, 1, 2], [2], [1, 3]),  # sorted
        ([5], [], [5]),
        ([], [4, 5], []),  # listed, not held: nothing of ours
        ([7, 9], [1, 9, 12], [7]),
    ],
)
def test_unlisted(held: list[int], listed: list[int], candidates: list[int]) -> None:
    assert unlisted(held, listed) == candidates


def _write(cluster: LocalCluster, n: int, *, close: bool = True) -> int:
    wh = cluster.client("writer").create_ledger(3, 3, 2)
    for i in range(n):
        wh.add(b"entry %d" % i)
    if close:
        wh.close()
    return int(wh.ledger_id)


def _deleted_while_down(cluster: LocalCluster, victim: str = "bookie-3") -> tuple[int, int]:
    """Ledger ``gone`` is deleted while ``victim`` is down; ``kept`` lives on."""
    gone, kept = _write(cluster, 5), _write(cluster, 5)
    cluster.stop_bookie(victim)
    cluster.client("admin").delete_ledger(gone)
    cluster.start_bookie(victim)
    assert gone in cluster.bookie(victim).storage.ledger_ids()  # it missed the delete
    for other in cluster.running_bookies():
        if other != victim:
            assert gone not in cluster.bookie(other).storage.ledger_ids()
    return gone, kept


def _collect(cluster: LocalCluster, bid: str) -> list[int]:
    return list(cluster.runtime.run(cluster.bookie(bid).gc.collect()))


def test_a_bookie_down_during_a_delete_drops_the_ledger_at_its_next_round(make_cluster) -> None:
    cluster = make_cluster(3, gc_interval=0)  # rounds run by hand
    gone, kept = _deleted_while_down(cluster)
    assert _collect(cluster, "bookie-3") == [gone]
    assert gone not in cluster.bookie("bookie-3").storage.ledger_ids()
    assert cluster.bookie("bookie-3").gc.collected == 1
    # Durably: a crash and its journal replay do not bring it back.
    cluster.crash_bookie("bookie-3")
    cluster.start_bookie("bookie-3")
    assert gone not in cluster.bookie("bookie-3").storage.ledger_ids()
    # The live ledger is whole on every bookie.
    for bid in cluster.running_bookies():
        assert cluster.read_from_bookie(bid, kept, 4) == b"entry 4"
    assert _collect(cluster, "bookie-3") == []


def test_a_ledger_the_list_misses_is_kept_while_its_metadata_exists(
    make_cluster, monkeypatch
) -> None:
    """The list only nominates: a lagging ZooKeeper server may list a ledger created a
    moment ago too late. The ledger is dropped only when the metadata says, after a sync,
    that it is gone."""
    cluster = make_cluster(3, gc_interval=0)
    open_one, closed = _write(cluster, 3, close=False), _write(cluster, 3)
    monkeypatch.setattr(MetadataClient, "list_ledgers", lambda self: iter(()))
    for bid in cluster.running_bookies():
        assert _collect(cluster, bid) == []
        assert {open_one, closed} <= set(cluster.bookie(bid).storage.ledger_ids())
        assert cluster.read_from_bookie(bid, closed, 2) == b"entry 2"


def test_a_confirmation_that_fails_keeps_the_ledger(make_cluster, monkeypatch) -> None:
    cluster = make_cluster(3, gc_interval=0)
    gone, _kept = _deleted_while_down(cluster)

    def unreachable(self: Any, lid: int) -> bool:
        raise MetadataError("ZooKeeper ConnectionLoss")

    monkeypatch.setattr(MetadataClient, "ledger_is_gone", unreachable)
    assert _collect(cluster, "bookie-3") == []
    assert gone in cluster.bookie("bookie-3").storage.ledger_ids()
    monkeypatch.undo()
    assert _collect(cluster, "bookie-3") == [gone]


def test_a_list_that_fails_drops_nothing(make_cluster, monkeypatch) -> None:
    cluster = make_cluster(3, gc_interval=0)
    gone, _kept = _deleted_while_down(cluster)

    def unreachable(self: Any) -> Any:
        raise MetadataError("ZooKeeper ConnectionLoss")

    monkeypatch.setattr(MetadataClient, "list_ledgers", unreachable)
    with pytest.raises(MetadataError):
        _collect(cluster, "bookie-3")
    assert gone in cluster.bookie("bookie-3").storage.ledger_ids()


def test_rounds_run_every_gc_interval(make_cluster) -> None:
    cluster = make_cluster(3, gc_interval=0.05)
    gone, kept = _deleted_while_down(cluster)
    bookie = cluster.bookie("bookie-3")
    while bookie.gc.collected == 0:  # no deadline: pytest's own timeout applies
        time.sleep(0.02)
    assert bookie.gc.collected == 1
    assert gone not in bookie.storage.ledger_ids()
    assert cluster.read_from_bookie("bookie-3", kept, 0) == b"entry 0"


def test_on_zookeeper(make_cluster, zk_uri: str) -> None:
    """The same with a real ZooKeeper, whose reads are synced before a ledger is dropped."""
    cluster = make_cluster(3, gc_interval=0, metadata_uri=zk_uri)
    gone, kept = _deleted_while_down(cluster)
    assert _collect(cluster, "bookie-3") == [gone]
    assert cluster.read_from_bookie("bookie-3", kept, 4) == b"entry 4"
