"""What an unbounded ledger keeps in its metadata, beside what every ledger keeps.

The ledger node holds ``term``, ``unbounded: true`` and, under the ``unbounded_settings`` key
(kept through older clients by LedgerMetadata's ``extra``), the settings every writer
of every term must follow::

    {"fragment_max_entries": 1000}

How fragments are stored when there are many: the fragment list lives in the ledger's
one metadata node, one ``[first entry id, [bookie ids]]`` pair per fragment (about
60 bytes for E=3). ``trim(before)`` removes the pairs of whole fragments below
``before`` by compare-and-swap, so a stream that is trimmed as it grows keeps a node
of (live entries / fragment_max_entries) pairs, whatever its total length. The first
fragment's first entry id is the stream's low-water mark: entries below it are gone.
An untrimmed stream grows by one pair per fragment (a ZooKeeper node's 1 MB limit is
about 15,000 fragments: 15 million entries at fragment_max_entries=1000).
"""

from __future__ import annotations

from typing import Any

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded.retention import Mark, Retention

KEY = "unbounded_settings"


def settings(md: LedgerMetadata) -> dict[str, Any]:
    value = md.extra.get(KEY)
    return dict(value) if isinstance(value, dict) else {}


def fragment_max_entries(md: LedgerMetadata) -> int | None:
    value = settings(md).get("fragment_max_entries")
    return int(value) if value else None


def with_settings(md: LedgerMetadata, *, fragment_max_entries: int | None) -> LedgerMetadata:
    extra = dict(md.extra)
    extra[KEY] = {"fragment_max_entries": fragment_max_entries}
    return md.evolve(extra=extra)


def first_entry(md: LedgerMetadata) -> int:
    """The lowest entry id still stored (entries below were trimmed)."""
    return md.fragments[0][0]


def name(md: LedgerMetadata) -> str | None:
    """The stream's name (client.create_unbounded(name=...)), if it has one."""
    value = settings(md).get("name")
    return value if isinstance(value, str) else None


def with_stream_settings(md: LedgerMetadata, **values: Any) -> LedgerMetadata:
    """``md`` with these settings added to (or replacing) the ones it has."""
    extra = dict(md.extra)
    extra[KEY] = {**settings(md), **values}
    return md.evolve(extra=extra)


def retention(md: LedgerMetadata) -> Retention | None:
    value = settings(md).get("retention")
    return Retention.from_json(value) if isinstance(value, dict) else None


# Seconds a stream remembers an append's msg_id (create_unbounded(dedup_window=...)); a
# stream whose metadata says none (made before deduplication existed) has this one.
DEFAULT_DEDUP_WINDOW = 120.0


def dedup_window(md: LedgerMetadata) -> float:
    value = settings(md).get("dedup_window", DEFAULT_DEDUP_WINDOW)
    return float(value)


def retention_overrides_cursors(md: LedgerMetadata) -> bool:
    return bool(settings(md).get("retention_overrides_cursors"))


def marks(md: LedgerMetadata) -> list[Mark]:
    """Retention's record of sealed stretches (retention.py): [end, bytes, sealed_at,
    entries] (marks stored before entries were counted lack the last)."""
    out: list[Mark] = []
    for m in settings(md).get("marks", []):
        if len(m) > 3:
            out.append((int(m[0]), int(m[1]), float(m[2]), int(m[3])))
        else:
            out.append((int(m[0]), int(m[1]), float(m[2])))
    return out
