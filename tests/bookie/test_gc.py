"""Garbage collection (embedlog/bookie/gc.py): a bookie that missed a ledger's deletion
drops its copy once the metadata is gone, and never a ledger whose metadata exists."""

from __future__ import annotations

import time
from typing import Any

import pytest

from embedlog import LocalCluster
from embedlog.bookie.gc import doomed, unlisted
from embedlog.errors import MetadataError
from embedlog.metadata.client import LEDGERS, MetadataClient
from embedlog.metadata.leveldb_store import LevelDBMetadataStore
from embedlog.metadata.memory import MemoryMetadataStore


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


@pytest.mark.parametrize(
    ("gone_now", "gone_before", "dropped"),
    [
        ([], [], []),
        ([4], [], []),  # confirmed once: not yet
        ([4], [4], [4]),  # twice in a row
        ([4, 6], [6, 9], [6]),  # 9 was found again (or failed to confirm): kept
        ([], [4], []),
    ],
)
def test_doomed(gone_now: list[int], gone_before: list[int], dropped: list[int]) -> None:
    assert doomed(gone_now, frozenset(gone_before)) == dropped


def test_a_ledger_is_gone_only_by_a_read_after_a_sync() -> None:
    calls: list[tuple[str, str]] = []

    class Recording(MemoryMetadataStore):
        def sync(self, path: str) -> None:
            calls.append(("sync", path))

        def get(self, path: str) -> tuple[bytes, int]:
            calls.append(("get", path))
            return super().get(path)

    meta = MetadataClient(Recording())
    assert meta.ledger_is_gone(7)
    assert [c for c, _ in calls] == ["sync", "get"] and calls[0][1] == calls[1][1]


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


def _collect_twice(cluster: LocalCluster, bid: str) -> list[int]:
    """Two rounds: a ledger is dropped once it is confirmed gone in two in a row."""
    assert _collect(cluster, bid) == []
    return _collect(cluster, bid)


def test_a_bookie_down_during_a_delete_drops_the_ledger_at_its_next_round(make_cluster) -> None:
    cluster = make_cluster(3, gc_interval=0)  # rounds run by hand
    gone, kept = _deleted_while_down(cluster)
    assert _collect(cluster, "bookie-3") == []  # confirmed gone once: kept for now
    assert gone in cluster.bookie("bookie-3").storage.ledger_ids()
    assert _collect(cluster, "bookie-3") == [gone]
    assert gone not in cluster.bookie("bookie-3").storage.ledger_ids()
    status = cluster.bookie("bookie-3").status()
    assert status["garbage_collection"] == {"rounds": 2, "dropped": 1}
    published = cluster.metadata.bookie_status("bookie-3")
    assert published is not None and published["garbage_collection"] == {"rounds": 2, "dropped": 1}
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
        assert _collect_twice(cluster, bid) == []
        assert {open_one, closed} <= set(cluster.bookie(bid).storage.ledger_ids())
        assert cluster.read_from_bookie(bid, closed, 2) == b"entry 2"


def test_a_confirmation_that_fails_keeps_the_ledger(make_cluster, monkeypatch) -> None:
    cluster = make_cluster(3, gc_interval=0)
    gone, _kept = _deleted_while_down(cluster)

    def unreachable(self: Any, lid: int) -> bool:
        raise MetadataError("ZooKeeper ConnectionLoss")

    assert _collect(cluster, "bookie-3") == []  # confirmed once
    monkeypatch.setattr(MetadataClient, "ledger_is_gone", unreachable)
    assert _collect(cluster, "bookie-3") == []  # not confirmed: the count starts over
    assert gone in cluster.bookie("bookie-3").storage.ledger_ids()
    monkeypatch.undo()
    assert _collect(cluster, "bookie-3") == []
    assert _collect(cluster, "bookie-3") == [gone]


def test_a_list_that_fails_drops_nothing(make_cluster, monkeypatch) -> None:
    cluster = make_cluster(3, gc_interval=0)
    gone, _kept = _deleted_while_down(cluster)

    def unreachable(self: Any) -> Any:
        raise MetadataError("ZooKeeper ConnectionLoss")

    assert _collect(cluster, "bookie-3") == []  # confirmed once
    monkeypatch.setattr(MetadataClient, "list_ledgers", unreachable)
    with pytest.raises(MetadataError):
        _collect(cluster, "bookie-3")
    assert gone in cluster.bookie("bookie-3").storage.ledger_ids()
    monkeypatch.undo()
    assert _collect(cluster, "bookie-3") == []  # the failed round started the count over
    assert _collect(cluster, "bookie-3") == [gone]


def test_rounds_run_every_gc_interval_and_outlive_errors(make_cluster, monkeypatch) -> None:
    cluster = make_cluster(3, gc_interval=0.05)
    real = MetadataClient.list_ledgers
    failures = {"left": 2}

    def flaky(self: MetadataClient) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise MetadataError("ZooKeeper ConnectionLoss")
        return real(self)

    gone, kept = _deleted_while_down(cluster)
    monkeypatch.setattr(MetadataClient, "list_ledgers", flaky)
    bookie = cluster.bookie("bookie-3")
    while bookie.gc.collected == 0:  # no deadline: pytest's own timeout applies
        time.sleep(0.02)
    assert bookie.gc.collected == 1 and failures["left"] == 0
    assert gone not in bookie.storage.ledger_ids()
    assert cluster.read_from_bookie("bookie-3", kept, 0) == b"entry 0"
    # A stop and a crash end the rounds.
    task = bookie._gc_task
    assert task is not None and not task.done()
    cluster.stop_bookie("bookie-3")
    assert task.cancelled()
    cluster.start_bookie("bookie-3")
    task = cluster.bookie("bookie-3")._gc_task
    assert task is not None
    cluster.crash_bookie("bookie-3")
    while not task.done():  # cancelled on the bookies' loop, in its next turn
        time.sleep(0.01)
    assert task.cancelled()


def test_phase_one_syncs_before_it_lists(make_cluster, monkeypatch) -> None:
    """BP-46 phase one must see every ledger created before the crash: it syncs the
    metadata before it lists the ledgers to protect."""
    cluster = make_cluster(3, journal_write_data=False, gc_interval=0)
    lid = _write(cluster, 3, close=False)
    calls: list[str] = []
    real_children = LevelDBMetadataStore.children

    def sync(self: LevelDBMetadataStore, path: str) -> None:
        calls.append(f"sync {path}")

    def children(self: LevelDBMetadataStore, path: str) -> list[str]:
        calls.append(f"children {path}")
        return real_children(self, path)

    monkeypatch.setattr(LevelDBMetadataStore, "sync", sync)
    monkeypatch.setattr(LevelDBMetadataStore, "children", children)
    cluster.crash_bookie("bookie-1")
    calls.clear()
    cluster.start_bookie("bookie-1")  # unclean without the journal: phase one
    assert cluster.bookie("bookie-1").ledger_info(lid).limbo
    listing = calls.index(f"children {LEDGERS}")
    assert f"sync {LEDGERS}" in calls[:listing]


def test_on_zookeeper(make_cluster, zk_uri: str) -> None:
    """The same with a real ZooKeeper, whose reads are synced before a ledger is dropped."""
    cluster = make_cluster(3, gc_interval=0, metadata_uri=zk_uri)
    gone, kept = _deleted_while_down(cluster)
    assert _collect_twice(cluster, "bookie-3") == [gone]
    assert cluster.read_from_bookie("bookie-3", kept, 4) == b"entry 4"
