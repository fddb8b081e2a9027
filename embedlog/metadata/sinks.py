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
from embedlog.metadata.recipe import Ops, Steps, delete_tree, recipe
from embedlog.metadata.store import NoNodeError

SINKS = "/streams/sinks"


def base(ledger_id: int) -> str:
    """The node holding a stream's sink records."""
    return f"{SINKS}/{ledger_id:020d}"


@recipe
def read_all(store: Ops, ledger_id: int) -> Steps[dict[str, tuple[bytes, int]]]:
    """Every sink record of ``ledger_id``: sink -> (data, version)."""
    out: dict[str, tuple[bytes, int]] = {}
    for sink in (yield from store.children(base(ledger_id))):
        try:
            out[sink] = yield from store.get(f"{base(ledger_id)}/{sink}")
        except NoNodeError:
            pass  # deleted meanwhile
    return out


@recipe
def write(store: Ops, ledger_id: int, sink: str, data: bytes, version: int | None) -> Steps[int]:
    """Store ``data`` as the record: created when ``version`` is None (NodeExistsError if
    it exists), else replaced if still at ``version`` (MetadataVersionError if not)."""
    path = f"{base(ledger_id)}/{sink}"
    if not (yield from store.exists(ledger_path(ledger_id))):
        raise _deleted(ledger_id)
    try:
        if version is None:  # only while the ledger is there: a delete then removes it
            new = yield from store.create_if(path, data, ledger_path(ledger_id))
        else:
            new = yield from store.set(path, data, version)
    except NoNodeError:  # the record went with its stream meanwhile
        raise _deleted(ledger_id) from None
    # The delete drops the ledger node before the records: a write it did not remove
    # finds the ledger gone here, removes what it made and says so.
    if not (yield from store.exists(ledger_path(ledger_id))):
        yield from delete_all.steps(ledger_id)
        raise _deleted(ledger_id)
    return new


def _deleted(ledger_id: int) -> LedgerDeletedError:
    return LedgerDeletedError(
        f"stream (ledger) {ledger_id} was deleted: a sink record of it cannot be written; "
        "create the stream again (a new ledger) and write into that"
    )


@recipe
def delete_all(store: Ops, ledger_id: int) -> Steps[None]:
    yield from delete_tree.steps(base(ledger_id))
