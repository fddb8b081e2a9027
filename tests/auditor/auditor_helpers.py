"""Shared steps of the auditor's cluster tests."""

from __future__ import annotations

from embedlog import LocalCluster


def write_closed(cluster: LocalCluster, n: int, e: int = 3, wq: int = 2, aq: int = 2) -> int:
    """A closed ledger of ``n`` entries ``b"entry <i>"``; returns its id."""
    wh = cluster.client("writer").create_ledger(e, wq, aq)
    for i in range(n):
        wh.add(b"entry %d" % i)
    wh.close()
    return wh.ledger_id


def replace_disks(cluster: LocalCluster, bookie_id: str) -> None:
    """The bookie's disks are replaced by empty ones and it is formatted anew under its id.

    Deleting its cookie from the metadata is what an operator's re-format does; the bookie
    then boots as a new one with no data (no BP-46 self-repair), which is exactly what the
    auditor has to find.
    """
    cluster.stop_bookie(bookie_id)
    cluster.wipe_bookie(bookie_id, "all")
    cluster.metadata.delete_cookie(bookie_id)
    cluster.start_bookie(bookie_id)


def set_rack(cluster: LocalCluster, bookie_id: str, rack: str) -> None:
    """Re-register a running bookie with another rack (as its configuration would)."""
    bookie = cluster.bookie(bookie_id)
    info = dict(cluster.metadata.bookie_info(bookie_id) or {})
    info["rack"] = rack
    cluster.metadata.register_bookie(bookie.session, bookie_id, info, readonly=False)
