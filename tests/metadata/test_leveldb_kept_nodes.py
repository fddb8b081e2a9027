"""The embedded store keeps the nodes it read lately: a read of a kept node makes no
LevelDB get (which lets go of the GIL), and every change of a node drops it there."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from embedlog.metadata.leveldb_store import LevelDBMetadataStore
from embedlog.metadata.store import NoNodeError

NODE = "/ledgers/00000000000000000001"


class CountedGets:
    """LevelDB as the store holds it, counting its gets; ``during_get`` runs inside the
    next one, after LevelDB answered (a write from another thread overtaking the read)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.gets = 0
        self.during_get: Callable[[], object] | None = None

    def get(self, key: bytes, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        value = self.db.get(key, *args, **kwargs)
        step, self.during_get = self.during_get, None
        if step is not None:
            step()
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LevelDBMetadataStore]:
    with LevelDBMetadataStore(tmp_path / "md") as s:
        s._db = CountedGets(s._db)
        yield s


def gets(store: LevelDBMetadataStore) -> int:
    db: CountedGets = store._db
    return db.gets


def test_a_node_read_again_costs_no_lookup(store: LevelDBMetadataStore) -> None:
    store.create(NODE, b"v0")
    before = gets(store)
    assert [store.get(NODE) for _ in range(3)] == [(b"v0", 0)] * 3
    assert gets(store) == before + 1


def test_every_change_is_read_back(store: LevelDBMetadataStore) -> None:
    session = store.session()
    store.create("/ledgers", b"")
    store.create(NODE, b"v0")
    assert store.get(NODE) == (b"v0", 0)
    store.set(NODE, b"v1", 0)
    assert store.get(NODE) == (b"v1", 1)
    store.delete("/ledgers")  # a subtree
    with pytest.raises(NoNodeError):
        store.get(NODE)
    session.create(NODE, b"mine", ephemeral=True)
    assert store.get(NODE) == (b"mine", 0)
    session.close()  # its ephemerals go with it
    assert not store.exists(NODE)


def test_a_read_a_write_overtook_is_not_kept(store: LevelDBMetadataStore) -> None:
    store.create(NODE, b"v0")
    db: CountedGets = store._db
    db.during_get = lambda: store.set(NODE, b"v1", 0)
    assert store.get(NODE) == (b"v0", 0)  # read before the write: its answer stands
    assert store.get(NODE) == (b"v1", 1)


def test_a_closed_store_refuses_reads_of_kept_nodes(tmp_path: Path) -> None:
    store = LevelDBMetadataStore(tmp_path / "md")
    store.create(NODE, b"v0")
    assert store.get(NODE) == (b"v0", 0)
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.get(NODE)
