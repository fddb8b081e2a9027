"""Metadata: ledger records, bookie registration and cookies, over a compare-and-swap store."""

from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.store import MetadataStore, NodeExistsError, NoNodeError

__all__ = [
    "LedgerMetadata",
    "LedgerState",
    "MemoryMetadataStore",
    "MetadataClient",
    "MetadataStore",
    "NoNodeError",
    "NodeExistsError",
]
