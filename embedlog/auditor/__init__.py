"""The auditor: BP-34 cluster metadata checker, its entry-availability encoding, re-replication,
the periodic daemon that runs them, and decommissioning a bookie (re-replication of
everything on it).

``AvailabilityOfEntries`` (the LIST_ENTRIES answer's encoding, which bookies write:
embedlog/wire/availability.py) loads eagerly; the checker and the replicator load on
first use, so a bookie does not pull in the client side.
"""

from embedlog._lazy import lazy_exports
from embedlog.wire.availability import AvailabilityOfEntries, SequenceGroup

__getattr__ = lazy_exports(
    __name__,
    {
        "MetadataChecker": "embedlog.auditor.checker",
        "Report": "embedlog.auditor.checker",
        "Violation": "embedlog.auditor.checker",
        "LedgerCheck": "embedlog.auditor.checker",
        "CATEGORIES": "embedlog.auditor.checker",
        "DecommissionRefusedError": "embedlog.auditor.decommission",
        "DecommissionResult": "embedlog.auditor.decommission",
        "Decommissioner": "embedlog.auditor.decommission",
        "decommission_cluster": "embedlog.auditor.decommission",
        "PeriodicAuditor": "embedlog.auditor.periodic",
        "Replicator": "embedlog.auditor.replication",
        "ReplicationResult": "embedlog.auditor.replication",
        "check_cluster": "embedlog.auditor.replication",
        "replicate_cluster": "embedlog.auditor.replication",
    },
)

__all__ = [
    "CATEGORIES",
    "AvailabilityOfEntries",
    "DecommissionRefusedError",
    "DecommissionResult",
    "Decommissioner",
    "LedgerCheck",
    "MetadataChecker",
    "PeriodicAuditor",
    "ReplicationResult",
    "Replicator",
    "Report",
    "SequenceGroup",
    "Violation",
    "check_cluster",
    "decommission_cluster",
    "replicate_cluster",
]
