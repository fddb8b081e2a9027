"""Shared helpers for the unbounded-ledger tests."""

from __future__ import annotations

import time

from embedlog.errors import BKError
from embedlog.metadata.store import ANY_VERSION, MetadataStore
from embedlog.metadata.striping import write_set_bookies


def wait_until(predicate, pause: float = 0.01):
    """Poll until ``predicate()`` is truthy (no deadline: pytest's own timeout applies)."""
    while True:
        value = predicate()
        if value:
            return value
        time.sleep(pause)


def stored(cluster, bookie: str, ledger_id: int, entry_id: int) -> bytes | None:
    """The payload ``bookie`` stores for the entry, or None if it answers anything else."""
    try:
        return cluster.read_from_bookie(bookie, ledger_id, entry_id)
    except BKError:
        return None


def replicas(cluster, md, entry_id: int) -> dict[str, bytes | None]:
    """What each bookie of the entry's write set stores for it."""
    ensemble = md.ensemble_for(entry_id)
    return {
        b: stored(cluster, b, md.ledger_id, entry_id)
        for b in write_set_bookies(entry_id, ensemble, md.write_quorum)
    }


def raw_add(cluster, bookie: str, ledger_id: int, entry_id: int, term: int, payload: bytes):
    """One ADD request straight to one bookie (password b"", CRC32C), as a writer of
    ``term`` would send it; returns the bookie's response."""
    from embedlog.transport.base import next_txn
    from embedlog.wire.entry import Digester, DigestType, master_key
    from embedlog.wire.messages import OpCode, Request

    body = Digester(DigestType.CRC32C).pack(ledger_id, entry_id, -1, payload)
    req = Request(OpCode.ADD, next_txn(), ledger_id, entry_id, 0, term, 0, master_key(b""), body)
    return cluster.runtime.run(cluster.transport.request("raw", bookie, req, 5.0))


class DelegatingStore(MetadataStore):
    """A metadata store that hands every call to ``inner``: a test overrides the calls
    it intercepts (a hook after a read, an injected failure)."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.blocking_io = inner.blocking_io

    def children(self, path: str) -> list[str]:
        return self.inner.children(path)

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        return self.inner.create(path, data, ephemeral=ephemeral)

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        return self.inner.create_if(path, data, exists)

    def get(self, path: str) -> tuple[bytes, int]:
        return self.inner.get(path)

    def set(self, path: str, data: bytes, version: int) -> int:
        return self.inner.set(path, data, version)

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self.inner.delete(path, version)

    def sync(self, path: str) -> None:
        self.inner.sync(path)

    def held_by_another_session(self, path: str) -> bool:
        return self.inner.held_by_another_session(path)

    def session(self) -> MetadataStore:
        return self.inner.session()
