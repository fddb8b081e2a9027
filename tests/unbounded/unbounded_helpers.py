"""Shared helpers for the unbounded-ledger tests."""

from __future__ import annotations

import time

from embedlog.errors import BKError
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
