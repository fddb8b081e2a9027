"""A session's ephemeral nodes go with it, also one whose create had an unknown outcome."""

from __future__ import annotations

import pytest

from embedlog.errors import MetadataError
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.store import NoNodeError, SessionView


class LostAfterApplied(MemoryMetadataStore):
    """A connection that drops after the server applied a create: the caller sees an
    error, the node exists (as ZooKeeper's ConnectionLoss can leave it)."""

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        super().create(path, data)
        raise MetadataError(f"ConnectionLoss on create {path} (after it was applied)")


def test_an_ephemeral_node_whose_create_seemed_to_fail_goes_with_its_session():
    """Untracked, the node outlived its bookie's crash, and the operator's cookie fix kept
    refusing because the bookie looked registered (found by the simulator: seed 333 of
    ``unbounded-nojournal-races``)."""
    store = LostAfterApplied()
    session = SessionView(store)
    with pytest.raises(MetadataError):
        session.create("/bookies/available/b1", b"{}", ephemeral=True)
    assert store.get("/bookies/available/b1")  # it was made
    session.expire()
    with pytest.raises(NoNodeError):
        store.get("/bookies/available/b1")


def test_a_session_never_removes_a_node_another_session_made_since():
    store = MemoryMetadataStore()
    old, new = SessionView(store), SessionView(store)
    old.create("/bookies/available/b1", b"old", ephemeral=True)
    new.delete("/bookies/available/b1")
    new.create("/bookies/available/b1", b"new", ephemeral=True)
    old.expire()
    assert store.get("/bookies/available/b1")[0] == b"new"
    new.close()
    with pytest.raises(NoNodeError):
        store.get("/bookies/available/b1")


def test_a_store_and_its_sessions_are_freed_together() -> None:
    """Sessions record who owns each ephemeral node on their store; nothing else may keep
    the store (and, through session callbacks, a whole bookie) alive once it is dropped:
    a simulator worker runs thousands of histories, each with a store of its own."""
    import gc
    import weakref

    from embedlog.metadata.memory import MemoryMetadataStore

    store = MemoryMetadataStore()
    session = store.session()
    session.create("/bookies/available/b1", b"", ephemeral=True)
    session.on_session_expired(lambda: None)
    gone = weakref.ref(store)
    del store, session
    gc.collect()
    assert gone() is None
