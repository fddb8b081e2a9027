"""The auditor: BP-34 cluster metadata checker, its entry-availability encoding, re-replication.

``AvailabilityOfEntries`` loads eagerly (bookies use it to answer LIST_ENTRIES);
the checker and the replicator load on first use, so a bookie does not pull in
the client side.
"""

from typing import Any

from embedlog.auditor.availability import AvailabilityOfEntries, SequenceGroup

_LAZY = {
    "MetadataChecker": "embedlog.auditor.checker",
    "Report": "embedlog.auditor.checker",
    "Violation": "embedlog.auditor.checker",
    "LedgerCheck": "embedlog.auditor.checker",
    "CATEGORIES": "embedlog.auditor.checker",
    "Replicator": "embedlog.auditor.replication",
    "ReplicationResult": "embedlog.auditor.replication",
    "check_cluster": "embedlog.auditor.replication",
    "replicate_cluster": "embedlog.auditor.replication",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'embedlog.auditor' has no attribute {name!r}")


__all__ = [
    "CATEGORIES",
    "AvailabilityOfEntries",
    "LedgerCheck",
    "MetadataChecker",
    "ReplicationResult",
    "Replicator",
    "Report",
    "SequenceGroup",
    "Violation",
    "check_cluster",
    "replicate_cluster",
]
