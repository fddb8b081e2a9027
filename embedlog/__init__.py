"""embedlog: an embeddable replicated log (Apache BookKeeper's replication protocol).

Start with ``LocalCluster`` (bookies in this process) and ``cluster.client()``;
see README.md and docs/.
"""

from typing import TYPE_CHECKING

from embedlog._lazy import lazy_dir, lazy_exports
from embedlog.connect import connect
from embedlog.errors import (
    BKError,
    BKTimeoutError,
    CookieError,
    DigestMismatchError,
    InvalidTermError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
    MetadataVersionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    TlsHandshakeError,
    UnauthorizedAccessError,
    UnknownError,
)
from embedlog.ledger.entries import Entry
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.entry import DigestType

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.cluster import LocalCluster
    from embedlog.ledger.handles import ReadHandle, WriteHandle
    from embedlog.unbounded.ledger import UnboundedLedger
    from embedlog.unbounded.retention import Retention

# The heavier pieces load on first use, so `import embedlog.wire` (or a bookie
# process) does not pull in the whole client and cluster.
_LAZY = {
    "Client": "embedlog.client",
    "LocalCluster": "embedlog.cluster",
    "ReadHandle": "embedlog.ledger.handles",
    "WriteHandle": "embedlog.ledger.handles",
    "UnboundedLedger": "embedlog.unbounded.ledger",
    "Retention": "embedlog.unbounded.retention",
}
__getattr__ = lazy_exports(__name__, _LAZY)
__dir__ = lazy_dir(__name__, _LAZY)

__version__ = "0.1.0"

__all__ = [
    "BKError",
    "BKTimeoutError",
    "Client",
    "CookieError",
    "DigestMismatchError",
    "DigestType",
    "Entry",
    "InvalidTermError",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerMetadata",
    "LedgerRecoveryError",
    "LedgerState",
    "LocalCluster",
    "MetadataVersionError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "ReadHandle",
    "Retention",
    "TlsHandshakeError",
    "UnauthorizedAccessError",
    "UnboundedLedger",
    "UnknownError",
    "WriteHandle",
    "connect",
]
