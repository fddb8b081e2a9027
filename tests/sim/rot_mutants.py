"""Test-only mutants that skip the bookie's CRC check of an entry log record on one read
path each: the simulator's corruption at rest (simrot.py, the ``*-corrupt`` scenarios)
must then make a bookie serve a damaged entry, and an invariant must see the bookie's own
answer; and one that reads a damaged record as an entry the bookie does not hold, which
the rot under a serving bookie must show. A mutant is a context manager patching the
real code in this process (``run_seed``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from seed_search import patched

from embedlog.bookie import entrylog
from embedlog.bookie.entrylog import RECORD, EntryLogs
from embedlog.bookie.storage import LedgerStorage
from embedlog.errors import BookieIOError


def _read_without_crc(
    self: EntryLogs, ledger_id: int, entry_id: int, location: tuple[int, int, int]
) -> bytes:
    """``EntryLogs.read`` checking the record's header, not its CRC."""
    log_id, offset, length = location
    f = self._files.get(log_id)
    if f is None:
        raise self._error(ledger_id, entry_id, location, "the entry log file is missing")
    raw = f.pread(offset, RECORD.size + length)
    if len(raw) != RECORD.size + length:
        raise self._error(ledger_id, entry_id, location, f"short read ({len(raw)} bytes)")
    n, _crc, lid, eid = RECORD.unpack_from(raw)
    if (n, lid, eid) != (length, ledger_id, entry_id):
        raise self._error(ledger_id, entry_id, location, "the record is corrupt")
    return raw[RECORD.size :]


def _read_many_without_crc(
    self: EntryLogs, ledger_id: int, wanted: list[tuple[int, tuple[int, int, int]]]
) -> tuple[list[bytes], Any]:
    """``EntryLogs.read_many`` (READ_BATCH) taking each record whose header is right,
    without its CRC; single reads keep theirs."""
    datas: list[bytes] = []
    for entry_id, location in wanted:
        try:
            datas.append(_read_without_crc(self, ledger_id, entry_id, location))
        except entrylog.BookieIOError as exc:
            return datas, exc
    return datas, None


def single_reads_skip_crc() -> Any:
    """Single entry reads (READ: readers, recovery reads, BP-46 repair's check of what it
    holds) take a record without its CRC."""
    return patched(EntryLogs, "read", _read_without_crc)


def batch_reads_skip_crc() -> Any:
    """READ_BATCH runs take records without their CRC."""
    return patched(EntryLogs, "read_many", _read_many_without_crc)


@contextmanager
def damaged_entry_read_as_absent() -> Iterator[None]:
    """An indexed entry whose record is damaged reads as one the bookie does not hold
    (its readers get NoSuchEntry), not as an I/O error."""
    get = LedgerStorage.get

    def mutant(self: LedgerStorage, ledger_id: int, entry_id: int) -> bytes | None:
        try:
            return get(self, ledger_id, entry_id)
        except BookieIOError:
            return None

    with patched(LedgerStorage, "get", mutant):
        yield


MUTANTS: dict[str, Callable[[], Any]] = {
    "single-reads-skip-crc": single_reads_skip_crc,
    "batch-reads-skip-crc": batch_reads_skip_crc,
    "damaged-entry-read-as-absent": damaged_entry_read_as_absent,
}
