"""Which MetadataClient calls from the event loop go through a worker thread.

A store whose calls block (ZooKeeper's round trips) runs every call in the loop's
executor; the embedded store's writes wait for an fsync and go there too, while its
reads (a LevelDB lookup) run on the loop: a follower re-reads the metadata after every
LAC it sees, and the thread hop cost more than the read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.leveldb_store import LevelDBMetadataStore
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.readonly import ReadOnlyStore
from embedlog.metadata.store import MetadataStore
from embedlog.wire.entry import DigestType


def sample() -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=-1,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        fragments={0: ["b1", "b2", "b3"]},
        digest_type=DigestType.CRC32C,
        password_hash="ab" * 16,
    )


def hops(mc: MetadataClient, fn: Callable[..., Any], *args: Any) -> tuple[Any, int]:
    """``mc.call(fn, *args)`` on a fresh loop: (its result, the executor calls it made)."""
    loop = asyncio.new_event_loop()
    real = loop.run_in_executor
    calls = 0

    def counted(*a: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*a)

    loop.run_in_executor = counted  # type: ignore[method-assign,assignment]
    try:
        result = loop.run_until_complete(mc.call(fn, *args))
    finally:
        loop.close()
    return result, calls


def reads_and_writes(mc: MetadataClient) -> tuple[int, int]:
    """Executor calls of one ledger read and of one ledger write through ``call``."""
    md = mc.create_ledger(sample())
    got, read_hops = hops(mc, mc.read_ledger, md.ledger_id)
    assert got == md
    _, write_hops = hops(mc, mc.write_ledger, got)
    assert mc.read_ledger(md.ledger_id).version == md.version + 1
    return read_hops, write_hops


def test_each_store_says_which_calls_block(store: MetadataStore, store_kind: str) -> None:
    expected = {"memory": (0, 0), "leveldb": (0, 1), "zookeeper": (1, 1)}[store_kind]
    assert reads_and_writes(MetadataClient(store)) == expected


def test_the_embedded_stores_sessions_and_read_only_views_read_on_the_loop(
    tmp_path: Path,
) -> None:
    with LevelDBMetadataStore(tmp_path / "md") as db:
        session = db.session()
        try:
            assert reads_and_writes(MetadataClient(session)) == (0, 1)
        finally:
            session.close()
        md = MetadataClient(db).create_ledger(sample())
        view = MetadataClient(ReadOnlyStore(db))
        assert hops(view, view.read_ledger, md.ledger_id) == (md, 0)


def test_only_the_clients_own_reads_skip_the_thread(tmp_path: Path) -> None:
    """A function ``call`` cannot tell is a read (a lambda, another client's method) goes
    to the thread on a store whose writes block."""
    with LevelDBMetadataStore(tmp_path / "md") as db:
        mc, other = MetadataClient(db), MetadataClient(db)
        md = mc.create_ledger(sample())
        assert hops(mc, lambda: mc.read_ledger(md.ledger_id)) == (md, 1)
        assert hops(mc, other.read_ledger, md.ledger_id) == (md, 1)
        assert hops(mc, mc.writable_bookies) == ([], 0)


class BlockingStore(MemoryMetadataStore):
    """Declares ``blocking_io`` only, as ZooKeeper's store and the simulator's do."""

    blocking_io = True


def test_a_store_that_says_nothing_of_its_reads_blocks_on_them_as_on_everything() -> None:
    store = BlockingStore()
    assert store.blocking_reads
    assert reads_and_writes(MetadataClient(store)) == (1, 1)
