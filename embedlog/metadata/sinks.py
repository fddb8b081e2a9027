"""Sink records: what an exactly-once writer (the Spark connector's stream sink) appended.

Layout::

    /streams/sinks/<20-digit id>/<sink>   one record per writer of that stream (JSON bytes)

A record is the writer's own business (this module only stores it); it lives beside the
stream's cursors, outside the ledger's node, for the same reason: the stream's writer
changes that node by compare-and-swap, and these records change once or twice a batch.
Every change is a compare-and-swap on the record's version, so a writer that was
displaced (fenced by a takeover) cannot overwrite what its successor wrote. Records go
with the stream: ``Client.delete_ledger`` drops them with its cursors, and a write that
races the delete raises LedgerDeletedError and leaves nothing behind.
"""

from __future__ import annotations

from embedlog.errors import LedgerDeletedError
from embedlog.metadata.client import ledger_path
from embedlog.metadata.store import MetadataStore, NoNodeError, delete_tree

SINKS = "/streams/sinks"


def _base(ledger_id: int) -> str:
    return f"{SINKS}/{ledger_id:020d}"


def read(store: MetadataStore, ledger_id: int, sink: str) -> tuple[bytes, int] | None:
    """(data, version) of sink ``sink``'s record of ``ledger_id``, or None."""
    try:
        return store.get(f"{_base(ledger_id)}/{sink}")
    except NoNodeError:
        return None


def read_all(store: MetadataStore, ledger_id: int) -> dict[str, tuple[bytes, int]]:
    """Every sink record of ``ledger_id``: sink -> (data, version)."""
    out: dict[str, tuple[bytes, int]] = {}
    for sink in store.children(_base(ledger_id)):
        found = read(store, ledger_id, sink)
        if found is not None:  # else deleted meanwhile
            out[sink] = found
    return out


def write(store: MetadataStore, ledger_id: int, sink: str, data: bytes, version: int | None) -> int:
    """Store ``data`` as the record: created when ``version`` is None (NodeExistsError if
    it exists), else replaced if still at ``version`` (MetadataVersionError if not)."""
    path = f"{_base(ledger_id)}/{sink}"
    if not store.exists(ledger_path(ledger_id)):
        raise _deleted(ledger_id)
    try:
        new = store.create(path, data) if version is None else store.set(path, data, version)
    except NoNodeError:  # the record went with its stream meanwhile
        raise _deleted(ledger_id) from None
    # The delete drops the ledger node before the records: a write it did not remove
    # finds the ledger gone here, removes what it made and says so.
    if not store.exists(ledger_path(ledger_id)):
        delete_all(store, ledger_id)
        raise _deleted(ledger_id)
    return new


def _deleted(ledger_id: int) -> LedgerDeletedError:
    return LedgerDeletedError(
        f"stream (ledger) {ledger_id} was deleted: a sink record of it cannot be written; "
        "create the stream again (a new ledger) and write into that"
    )


def delete_all(store: MetadataStore, ledger_id: int) -> None:
    delete_tree(store, _base(ledger_id))
