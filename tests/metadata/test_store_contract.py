"""The MetadataStore contract, run against every implementation (memory, LevelDB, ZooKeeper)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from embedlog.errors import MetadataVersionError
from embedlog.metadata.recipe import delete_tree
from embedlog.metadata.store import ANY_VERSION, MetadataStore, NodeExistsError, NoNodeError

T = TypeVar("T")


def run_threads(n: int, fn: Callable[[int], T]) -> list[T | BaseException]:
    """Run ``fn(i)`` in ``n`` threads released together; results or exceptions, in order."""
    barrier = threading.Barrier(n)
    results: list[T | BaseException] = [RuntimeError("did not run")] * n

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


# -- create / get ----------------------------------------------------------------------------


def test_create_then_get(store: MetadataStore) -> None:
    assert store.create("/a/b", b"hello") == 0
    assert store.get("/a/b") == (b"hello", 0)
    assert store.exists("/a/b")


def test_create_existing_raises(store: MetadataStore) -> None:
    store.create("/n", b"1")
    with pytest.raises(NodeExistsError):
        store.create("/n", b"2")
    assert store.get("/n") == (b"1", 0)


def test_create_if_makes_the_node_and_its_parents_while_the_other_exists(
    store: MetadataStore,
) -> None:
    store.create("/ledger", b"md")
    assert store.create_if("/beside/7/cursor", b"3", "/ledger") == 0
    assert store.get("/beside/7/cursor") == (b"3", 0)
    with pytest.raises(NodeExistsError):
        store.create_if("/beside/7/cursor", b"4", "/ledger")
    assert store.get("/beside/7/cursor") == (b"3", 0)
    assert store.session().create_if("/beside/7/other", b"5", "/ledger") == 0


def test_create_if_makes_nothing_once_the_other_is_gone(store: MetadataStore) -> None:
    store.create("/ledger", b"md")
    store.create("/beside/7", b"")
    store.delete("/ledger")
    store.delete("/beside/7")
    with pytest.raises(NoNodeError, match="/ledger"):
        store.create_if("/beside/7/cursor", b"3", "/ledger")
    assert not store.exists("/beside/7/cursor")
    assert store.children("/beside/7") == []


def test_create_if_racing_a_delete_of_the_other_never_outlives_it(
    store: MetadataStore,
) -> None:
    # Creates beside a node, racing the node's delete and then the removal of what is
    # beside it (a stream's delete): once both are done, nothing made is left.
    for round_ in range(5):
        store.create("/ledger", b"md")

        def racer(i: int) -> None:
            if i == 0:
                store.delete("/ledger")
                delete_tree(store, "/beside")
                return
            for k in range(10):
                try:
                    store.create_if(f"/beside/{i}-{k}", b"x", "/ledger")
                except NoNodeError:
                    return

        for outcome in run_threads(4, racer):
            assert outcome is None, outcome
        # What landed before the delete of /ledger went with /beside; nothing after.
        assert store.children("/beside") == [], round_
        for i in range(1, 4):  # ... and none after it: the next round starts clean
            with pytest.raises(NoNodeError):
                store.create_if(f"/beside/late-{i}", b"x", "/ledger")


def test_get_missing_raises(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.get("/missing")
    assert not store.exists("/missing")


def test_binary_and_empty_data(store: MetadataStore) -> None:
    blob = bytes(range(256)) * 4
    store.create("/blob", blob)
    store.create("/empty", b"")
    assert store.get("/blob")[0] == blob
    assert store.get("/empty")[0] == b""


def test_trailing_slash_is_the_same_node(store: MetadataStore) -> None:
    store.create("/t/", b"x")
    assert store.get("/t") == (b"x", 0)


def test_relative_path_rejected(store: MetadataStore) -> None:
    with pytest.raises(ValueError):
        store.create("relative", b"")


# -- set (compare-and-swap) --------------------------------------------------------------------


def test_set_increments_version(store: MetadataStore) -> None:
    store.create("/v", b"0")
    assert store.set("/v", b"1", 0) == 1
    assert store.set("/v", b"2", 1) == 2
    assert store.get("/v") == (b"2", 2)


def test_set_with_stale_version_conflicts(store: MetadataStore) -> None:
    store.create("/v", b"0")
    store.set("/v", b"1", 0)
    with pytest.raises(MetadataVersionError):
        store.set("/v", b"stale", 0)
    assert store.get("/v") == (b"1", 1)


def test_set_any_version(store: MetadataStore) -> None:
    store.create("/v", b"0")
    store.set("/v", b"1", 0)
    assert store.set("/v", b"2", ANY_VERSION) == 2


def test_set_missing_raises(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.set("/nope", b"", ANY_VERSION)
    with pytest.raises(NoNodeError):
        store.set("/nope", b"", 0)


# -- delete ------------------------------------------------------------------------------------


def test_delete_with_version(store: MetadataStore) -> None:
    store.create("/d", b"")
    store.set("/d", b"x", 0)
    with pytest.raises(MetadataVersionError):
        store.delete("/d", 0)
    assert store.exists("/d")
    store.delete("/d", 1)
    assert not store.exists("/d")


def test_delete_any_version(store: MetadataStore) -> None:
    store.create("/d", b"")
    store.delete("/d")
    with pytest.raises(NoNodeError):
        store.delete("/d")


def test_delete_removes_subtree(store: MetadataStore) -> None:
    store.create("/tree", b"root")
    store.create("/tree/a", b"")
    store.create("/tree/a/deep/leaf", b"")
    store.create("/tree/b", b"")
    store.create("/treetop", b"")  # shares a prefix, not a parent
    store.delete("/tree")
    for p in ("/tree", "/tree/a", "/tree/a/deep/leaf", "/tree/b"):
        assert not store.exists(p)
    assert store.children("/tree") == []
    assert store.exists("/treetop")


def test_delete_subtree_version_conflict_keeps_everything(store: MetadataStore) -> None:
    store.create("/tree", b"")
    store.create("/tree/a", b"")
    store.set("/tree", b"changed", 0)
    with pytest.raises(MetadataVersionError):
        store.delete("/tree", 0)
    assert store.exists("/tree/a")
    assert store.get("/tree") == (b"changed", 1)


def test_recreate_after_delete_starts_at_version_zero(store: MetadataStore) -> None:
    store.create("/r", b"")
    store.set("/r", b"1", 0)
    store.delete("/r")
    assert store.create("/r", b"again") == 0
    assert store.get("/r") == (b"again", 0)


# -- children ----------------------------------------------------------------------------------


def test_children_sorted_and_direct_only(store: MetadataStore) -> None:
    for name in ("c", "a", "b"):
        store.create(f"/kids/{name}", b"")
    store.create("/kids/a/grandchild/x", b"")
    assert store.children("/kids") == ["a", "b", "c"]
    assert store.children("/kids/a") == ["grandchild"]


def test_children_missing_is_empty(store: MetadataStore) -> None:
    assert store.children("/nothing/here") == []


def test_children_names_sharing_prefixes(store: MetadataStore) -> None:
    # "a.b" sorts between "a" and "a/..." byte-wise: a store that skips subtrees by
    # seeking must not skip siblings.
    store.create("/p/a", b"")
    store.create("/p/a/b/c", b"")
    store.create("/p/a.b", b"")
    store.create("/p/a-z/q", b"")
    store.create("/p/ab", b"")
    store.create("/p/b", b"")
    store.create("/pp/x", b"")
    assert store.children("/p") == ["a", "a-z", "a.b", "ab", "b"]


def test_children_of_root(store: MetadataStore) -> None:
    store.create("/ledgers/00000000000000000001", b"")
    store.create("/cookies/b1", b"")
    assert store.children("/") == ["cookies", "ledgers"]


def test_many_ledger_ids_sorted(store: MetadataStore) -> None:
    ids = [5, 100, 3, 10**12, 42]
    for i in ids:
        store.create(f"/ledgers/{i:020d}", b"")
    assert [int(n) for n in store.children("/ledgers")] == sorted(ids)


# -- concurrency -------------------------------------------------------------------------------


def test_concurrent_cas_exactly_one_wins(store: MetadataStore) -> None:
    store.create("/cas", b"start")
    _, version = store.get("/cas")
    n = 8
    sessions = [store.session() for _ in range(n)]
    try:
        results = run_threads(n, lambda i: sessions[i].set("/cas", f"w{i}".encode(), version))
    finally:
        for s in sessions:
            s.close()
    winners = [i for i, r in enumerate(results) if r == version + 1]
    losers = [r for r in results if isinstance(r, MetadataVersionError)]
    assert len(winners) == 1, results
    assert len(losers) == n - 1, results
    assert store.get("/cas") == (f"w{winners[0]}".encode(), version + 1)


def test_concurrent_create_exactly_one_wins(store: MetadataStore) -> None:
    n = 8
    results = run_threads(n, lambda i: store.create("/race", str(i).encode()))
    assert sum(1 for r in results if r == 0) == 1, results
    assert sum(1 for r in results if isinstance(r, NodeExistsError)) == n - 1


def test_concurrent_increments_lose_nothing(store: MetadataStore) -> None:
    store.create("/counter", b"0")
    n, per_thread = 6, 15

    def bump(_: int) -> None:
        for _ in range(per_thread):
            while True:
                data, version = store.get("/counter")
                try:
                    store.set("/counter", str(int(data) + 1).encode(), version)
                    break
                except MetadataVersionError:
                    continue

    results = run_threads(n, bump)
    assert all(r is None for r in results), results
    assert int(store.get("/counter")[0]) == n * per_thread


# -- ephemeral nodes and sessions -------------------------------------------------------------


def test_ephemeral_vanishes_on_session_close(store: MetadataStore) -> None:
    session = store.session()
    session.create("/bookies/available/b1", b"{}", ephemeral=True)
    session.create("/persistent", b"stays")
    assert store.children("/bookies/available") == ["b1"]
    session.close()
    assert store.children("/bookies/available") == []
    assert store.get("/persistent") == (b"stays", 0)


def test_ephemeral_vanishes_on_session_expire(store: MetadataStore) -> None:
    session = store.session()
    session.create("/bookies/available/b1", b"{}", ephemeral=True)
    other = store.session()
    other.create("/bookies/available/b2", b"{}", ephemeral=True)
    session.expire()  # type: ignore[attr-defined]
    assert store.children("/bookies/available") == ["b2"]
    other.close()
    assert store.children("/bookies/available") == []


def test_ephemeral_can_be_recreated_after_session_ends(store: MetadataStore) -> None:
    first = store.session()
    first.create("/lock", b"1", ephemeral=True)
    second = store.session()
    with pytest.raises(NodeExistsError):
        second.create("/lock", b"2", ephemeral=True)
    first.expire()  # type: ignore[attr-defined]
    second.create("/lock", b"2", ephemeral=True)
    assert store.get("/lock")[0] == b"2"
    second.close()
    assert not store.exists("/lock")


def test_ephemeral_deleted_explicitly(store: MetadataStore) -> None:
    session = store.session()
    session.create("/e", b"", ephemeral=True)
    session.delete("/e")
    assert not store.exists("/e")
    session.close()
    assert not store.exists("/e")


def test_ended_session_does_not_delete_a_successors_node(store: MetadataStore) -> None:
    """A bookie re-registers in a new session; ending the old one must not unregister it."""
    old = store.session()
    old.create("/bookies/available/b1", b"old", ephemeral=True)
    new = store.session()
    new.delete("/bookies/available/b1")
    new.create("/bookies/available/b1", b"new", ephemeral=True)
    old.expire()  # type: ignore[attr-defined]
    assert store.get("/bookies/available/b1")[0] == b"new"
    new.close()
    assert not store.exists("/bookies/available/b1")


def test_session_sees_the_same_tree(store: MetadataStore) -> None:
    store.create("/shared", b"1")
    session = store.session()
    try:
        assert session.get("/shared") == (b"1", 0)
        session.set("/shared", b"2", 0)
        assert store.get("/shared") == (b"2", 1)
        nested = session.session()
        nested.create("/nested-eph", b"", ephemeral=True)
        nested.close()
        assert not store.exists("/nested-eph")
    finally:
        session.close()


def test_a_synced_read_sees_what_another_connection_wrote(store: MetadataStore) -> None:
    other = store.session()  # ZooKeeper: a connection of its own
    try:
        other.create("/synced", b"x")
        store.sync("/synced")
        assert store.get("/synced") == (b"x", 0)
        store.sync("/not-there")  # a path that does not exist syncs all the same
    finally:
        other.close()
