"""A cursor commit or a sink record's write that races a stream's delete leaves nothing
behind once the delete returned, even when the writer fails after its write landed (a
connection lost, a crash) and never gets to look again and clean up: its node is made
only while the ledger's node is there (``create_if``), and the delete drops the ledger
node before the stream's other paths.

Driven step by step (the recipes are sans-I/O): the delete runs whole between two of the
racing recipe's store operations, and every operation after the racing write fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from embedlog.errors import LedgerDeletedError, MetadataError
from embedlog.metadata import sinks, streams
from embedlog.metadata.client import ledger_path
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.recipe import Op, Steps
from embedlog.metadata.store import ANY_VERSION, MetadataStore

LID = 7


def _delete_stream(store: MetadataStore) -> None:
    """What ``Client.delete_ledger`` does to the metadata, in its order."""
    store.delete(ledger_path(LID))
    streams.forget(store, LID)


def _race(store: MetadataStore, steps: Steps[object], racing: Callable[[Op], bool]) -> None:
    """Run ``steps`` against ``store``; right before the operation ``racing`` picks, the
    delete runs whole; every operation after that one fails as a lost connection."""
    deleted = failing = False
    op = next(steps)
    while True:
        if failing:
            op = steps.throw(MetadataError("ZooKeeper ConnectionLoss (the test's)"))
            continue
        if not deleted and racing(op):
            _delete_stream(store)
            deleted = True
        try:
            result = op.apply(store)
        except Exception as exc:
            op = steps.throw(exc)
            continue
        failing = deleted
        op = steps.send(result)


def _store() -> MetadataStore:
    store = MemoryMetadataStore()
    store.create(ledger_path(LID), b"the stream's metadata")
    return store


def _left(store: MetadataStore) -> list[str]:
    return [
        f"{base}/{LID:020d}/{name}"
        for base in (streams.CURSORS, sinks.SINKS)
        for name in store.children(f"{base}/{LID:020d}")
    ] + [p for p in (f"{streams.CURSORS}/{LID:020d}",) if store.exists(p)]


def test_a_new_cursor_racing_the_delete_is_not_made_after_it() -> None:
    store = _store()
    steps = streams.commit.steps(LID, "late", 3, False)
    with pytest.raises(LedgerDeletedError):
        _race(store, steps, lambda op: op.method.startswith("create") and "/late" in op.args[0])
    assert _left(store) == []


def test_a_trim_point_made_for_a_first_commit_racing_the_delete_is_not_left() -> None:
    store = _store()
    steps = streams.commit.steps(LID, "late", 3, False)
    cursors_node = f"{streams.CURSORS}/{LID:020d}"
    with pytest.raises(LedgerDeletedError):
        _race(
            store, steps, lambda op: op.method.startswith("create") and op.args[0] == cursors_node
        )
    assert _left(store) == []


def test_a_sink_record_racing_the_delete_is_not_made_after_it() -> None:
    store = _store()
    steps = sinks.write.steps(LID, "sink-1", b"{}", None)
    with pytest.raises(LedgerDeletedError):
        _race(store, steps, lambda op: op.method.startswith("create"))
    assert _left(store) == []


def test_a_write_that_lands_before_the_delete_goes_with_the_stream() -> None:
    # The delete comes after the cursor's node was made, before the commit's next
    # operation (which then fails): the delete takes the cursor with the stream.
    store = _store()
    steps = streams.commit.steps(LID, "early", 3, False)
    made = []

    def after_the_create(op: Op) -> bool:
        if made:
            return True
        if op.method.startswith("create") and "/early" in op.args[0]:
            made.append(op)
        return False

    with pytest.raises(MetadataError):
        _race(store, steps, after_the_create)
    assert _left(store) == []


# -- the cleanup a delete of a ledger whose node is gone runs (streams.forget_deleted) ------


class _CountingStore(MemoryMetadataStore):
    """Counts the writes made through it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self.writes += 1
        super().delete(path, version)


def _with_leftovers(store: MetadataStore) -> None:
    streams.commit(store, LID, "c1", 3, False)
    sinks.write(store, LID, "sink-1", b"{}", None)


def test_what_a_failed_delete_left_goes_once_the_node_is_gone() -> None:
    store = _store()
    _with_leftovers(store)
    store.delete(ledger_path(LID))  # the delete that then failed
    assert _left(store)
    assert streams.forget_deleted(store, LID) is True
    assert _left(store) == []


def test_a_live_streams_cursors_and_records_are_never_dropped() -> None:
    # A delete read "no such ledger" for an id another client had taken but whose node it
    # had not made yet; the stream was made and written to before the cleanup ran.
    store = _store()
    _with_leftovers(store)
    before = _left(store)
    assert streams.forget_deleted(store, LID) is False
    assert _left(store) == before
    assert store.exists(ledger_path(LID))


def test_an_id_that_never_held_a_stream_costs_no_write() -> None:
    store = _CountingStore()
    assert streams.forget_deleted(store, LID) is False
    assert store.writes == 0
