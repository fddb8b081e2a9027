"""Shared steps of the auditor's cluster tests."""

from __future__ import annotations

from embedlog import LocalCluster
from embedlog.ledger.handles import WriteHandle


def write_closed(cluster: LocalCluster, n: int, e: int = 3, wq: int = 2, aq: int = 2) -> int:
    """A closed ledger of ``n`` entries ``b"entry <i>"``; returns its id."""
    wh = cluster.client("writer").create_ledger(e, wq, aq)
    for i in range(n):
        wh.add(b"entry %d" % i)
    wh.close()
    return wh.ledger_id


def write_open_with_a_sealed_fragment(
    cluster: LocalCluster, before: int, after: int, e: int = 3, wq: int = 2, aq: int = 2
) -> tuple[WriteHandle, str]:
    """An open ledger of ``before + after`` entries ``b"entry <i>"`` in two fragments: the
    first bookie of the first ensemble crashes after ``before`` entries, and the writer
    replaces it. Returns the still open handle and the crashed bookie (left down), which
    is only in the sealed first fragment."""
    wh = cluster.client("writer").create_ledger(e, wq, aq)
    for i in range(before):
        wh.add(b"entry %d" % i)
    victim = cluster.metadata.read_ledger(wh.ledger_id).ensembles[0][0]
    cluster.crash_bookie(victim)
    for i in range(before, before + after):
        wh.add(b"entry %d" % i)
    md = cluster.metadata.read_ledger(wh.ledger_id)
    assert not md.is_closed and len(md.fragments) == 2, md
    assert victim not in md.last_fragment[1]
    return wh, victim


def replace_disks(cluster: LocalCluster, bookie_id: str) -> None:
    """The bookie's disks are replaced by empty ones and it is formatted anew under its id.

    Deleting its cookie from the metadata is what an operator's re-format does; the bookie
    then boots as a new one with no data (no BP-46 self-repair), which is exactly what the
    auditor has to find.
    """
    if bookie_id in cluster.running_bookies():
        cluster.stop_bookie(bookie_id)  # else it crashed already
    cluster.wipe_bookie(bookie_id, "all")
    cluster.metadata.delete_cookie(bookie_id)
    cluster.start_bookie(bookie_id)


def set_rack(cluster: LocalCluster, bookie_id: str, rack: str) -> None:
    """Re-register a running bookie with another rack (as its configuration would)."""
    bookie = cluster.bookie(bookie_id)
    info = dict(cluster.metadata.bookie_info(bookie_id) or {})
    info["rack"] = rack
    cluster.metadata.register_bookie(bookie.session, bookie_id, info, readonly=False)
