"""Which bookies store an entry: a ledger's entries striped round robin over its ensemble.

Entry e of a fragment with ensemble E (size n) and write quorum WQ is stored by WQ
consecutive members from slot e mod n: its write set. The rule belongs with the
metadata that names the ensembles, so the client (ledger/quorum.py's fencing, the add
pipeline, reads, recovery), the bookie (BP-46 phase one, integrity.py) and the auditor
apply the same one.
"""

from __future__ import annotations

from collections.abc import Sequence


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indexes that store ``entry_id``: WQ of them, round robin from entry mod E."""
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum)]


def write_set_bookies(entry_id: int, ensemble: Sequence[str], write_quorum: int) -> list[str]:
    """The bookies of ``ensemble`` that store ``entry_id``, in write-set order."""
    return [ensemble[i] for i in write_set(entry_id, len(ensemble), write_quorum)]
