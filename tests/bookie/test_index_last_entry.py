"""LedgerIndex.last_entry: a ledger's highest indexed entry id, scanned once and kept
until a commit writes that ledger (a READ_LAC's answer asks on every long poll)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedlog.bookie.entrylog import LOCATION
from embedlog.bookie.index import LedgerIndex

WHERE = LOCATION.pack(0, 0, 1)


def located(lid: int, ids: list[int]) -> tuple[int, list[int], list[bytes]]:
    return lid, ids, [WHERE] * len(ids)


class CountedScans:
    """The index's store, counting its scans; ``during_scan`` runs inside the next one,
    after the store was read (a commit from the flush thread overtaking the scan)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.scans = 0
        self.during_scan: Any = None

    def scan(self, prefix: bytes, **kwargs: Any) -> Iterator[Any]:
        self.scans += 1
        found = list(self.inner.scan(prefix, **kwargs))
        if self.during_scan is not None:
            step, self.during_scan = self.during_scan, None
            step()
        yield from found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[LedgerIndex]:
    idx = LedgerIndex(tmp_path / "index", create=True)
    idx.db = CountedScans(idx.db)  # type: ignore[assignment]
    yield idx
    idx.close()


def scans(index: LedgerIndex) -> int:
    db: CountedScans = index.db  # type: ignore[assignment]
    return db.scans


def test_one_scan_until_a_commit_writes_the_ledger(index: LedgerIndex) -> None:
    index.commit([located(1, [0, 1, 2])], [])
    assert [index.last_entry(1) for _ in range(3)] == [2, 2, 2]
    assert index.last_entry(2) == -1
    assert scans(index) == 2  # one per ledger
    index.commit([located(1, [3, 5]), located(2, [0])], [])
    assert (index.last_entry(1), index.last_entry(2)) == (5, 0)
    assert scans(index) == 4  # both written: both scanned again
    index.commit([located(1, [4])], [])  # a lower id (a recovery's write-back)
    assert (index.last_entry(1), index.last_entry(2)) == (5, 0)
    assert scans(index) == 5  # ledger 2 was not written: still kept


def test_deletes_and_dropped_ledgers_are_scanned_again(index: LedgerIndex) -> None:
    index.commit([located(1, [0, 1, 2]), located(2, [0, 1])], [])
    assert (index.last_entry(1), index.last_entry(2)) == (2, 1)
    index.commit([], [], deletes=[(1, 2), (1, 1)])  # a cut above 0
    assert index.last_entry(1) == 0
    index.commit([], [(2, None)], deletes=[(2, 0), (2, 1)])  # the ledger dropped
    assert index.last_entry(2) == -1
    assert scans(index) == 4


def test_a_scan_a_commit_overtook_is_not_kept(index: LedgerIndex) -> None:
    index.commit([located(1, [0, 1])], [])
    db: CountedScans = index.db  # type: ignore[assignment]
    db.during_scan = lambda: index.commit([located(1, [2, 3])], [])
    assert index.last_entry(1) == 1  # what the scan read, as before the commit
    assert index.last_entry(1) == 3  # scanned again: the stale answer was not kept
    assert scans(index) == 2


def test_a_failed_commit_forgets_every_kept_answer(index: LedgerIndex) -> None:
    index.commit([located(1, [0, 1]), located(2, [0])], [])
    assert (index.last_entry(1), index.last_entry(2)) == (1, 0)
    with pytest.raises(ValueError):
        index.commit([located(1, [2]), (2, [1, 2], [WHERE])], [])
    before = scans(index)
    index.last_entry(1)
    index.last_entry(2)
    assert scans(index) == before + 2
