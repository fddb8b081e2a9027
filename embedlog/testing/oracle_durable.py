"""What a bookie's disk holds when it answers: ``StateDurableWhenAnswered`` and
``TruncatesOncePerTerm`` (issue #31's survivors), asked of the simulated disk itself.

* ``StateDurableWhenAnswered``: a bookie answers a request that changed a ledger's state
  (raised its term, fenced it, truncated it) only once that state is durable: a crash
  right after the answer must not forget it. Durable means what a boot after a power cut
  that kept no unsynced byte would find: the index (every write the simulated index
  accepted is synced) with the journal's fsync'd records from its checkpoint on
  replayed over it (``durable_state``), read from ``MemoryDisk``, never from the
  bookie's memory. Reads that fence or carry a term, truncating adds and TRIM ABOVE
  always wait for the state they rely on, so each of their admitted answers is judged.
  A plain add is judged only when it is the one that raised the term: with the journal
  off, an add of a term another request raised a moment before is answered from the
  write cache while that request still waits for its record (the bookie's design:
  BP-46 covers what the write cache loses). Which request raised it is told by the
  order requests reached the bookie (``arrived``): an add whose term is not durable is
  a violation unless a request of that term reached this incarnation of the bookie
  before it and has not been answered EOK (it may be the one that raised it, still
  waiting, or failed after raising it).
* ``TruncatesOncePerTerm``: a bookie cuts a ledger at most once per term. A truncation
  (a takeover's no-op, TRIM ABOVE) journals its cut with the state that says which
  term made it; a delayed duplicate of the same term must find that and cut nothing,
  or it deletes what the new term stored since. Each truncating answer looks for the
  cut records of that ledger and term in the bookie's journal; two distinct ones are a
  violation. A wiped disk starts afresh (``lost``).
* ``NoOpDurableWhenAnswered``: a takeover's truncating no-op is answered EOK only once
  the entry itself is durable, the journal on or off: its cut dropped an older term's
  entry at the same id from the bookie's memory, but that entry may be on disk, and a
  crash that lost the no-op would bring it back, never acknowledged and truncated.
  Durable means an fsync'd journal record of exactly that entry, or its flushed copy
  (the index's location, within the entry log's synced bytes, holding those bytes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import crc32c
from attrs import define, field

from embedlog.bookie import records
from embedlog.bookie.disk import Disk, child
from embedlog.bookie.entrylog import RECORD, log_path
from embedlog.bookie.index import LedgerIndex, LedgerInfo
from embedlog.bookie.journal_replay import FRAME, journal_files
from embedlog.bookie.records import split_add, well_formed
from embedlog.testing.simdisk import MemoryDisk
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    NO_TERM,
    AddFlags,
    FrameError,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
    unpack_results,
)

DURABLE_RULE = "StateDurableWhenAnswered"
ONCE_RULE = "TruncatesOncePerTerm"
NOOP_RULE = "NoOpDurableWhenAnswered"
_ADD_KIND = ord("A")

_STATE_KINDS = frozenset(b"STU")  # journal records that set a ledger's state
_CUT_KINDS = frozenset(b"TU")  # ... and cut it (records.py)


def _ledger_of(payload: bytes) -> int:
    return int.from_bytes(payload[1:9], "big", signed=True)


class JournalScan:
    """The state records (S, T, U: records.py) of one bookie's journal, read from each
    file's fsync'd bytes, each byte once: a journal file only grows until it is deleted,
    and its fsync'd bytes survive every crash (a wiped disk takes a new scan). A record
    that is not intact ends what is read of its file for now (the journal writes nothing
    more after a failed write)."""

    def __init__(self, disk: MemoryDisk, journal_dir: Path) -> None:
        self._disk = disk
        self._dir = journal_dir
        self._read: dict[Path, int] = {}  # file -> its bytes read (whole records)
        self._records: dict[int, list[tuple[int, bytes]]] = {}  # ledger -> (LSN, record)
        self._states: dict[int, LedgerInfo] = {}  # LSN -> the state its record sets
        self._adds: set[tuple[int, int, bytes]] = set()  # (ledger, entry id, entry) added

    def state(self, lsn: int, record: bytes) -> LedgerInfo:
        """The state ``record`` (at ``lsn``) sets, parsed once."""
        info = self._states.get(lsn)
        if info is None:
            info = self._states[lsn] = _state_in(record)
        return info

    def records(self, lid: int) -> list[tuple[int, bytes]]:
        """(LSN, record) of every fsync'd record that set ``lid``'s state, in LSN order,
        including those of files deleted since."""
        self._read_all()
        return sorted(self._records.get(lid, ()))

    def holds_add(self, lid: int, eid: int, entry: bytes) -> bool:
        """Whether an fsync'd record of the journal adds exactly ``entry`` as ``lid:eid``
        (files deleted since included)."""
        self._read_all()
        return (lid, eid, entry) in self._adds

    def _read_all(self) -> None:
        disk = self._disk
        if disk.exists(self._dir):
            for start, path in journal_files(self._dir, cast(Disk, disk)):
                self._more(start, path)

    def _more(self, start: int, path: Path) -> None:
        durable = self._disk.durable_bytes(path)
        pos = self._read.get(path, 0)
        if durable <= pos:
            return
        data = self._disk.read(path)
        while pos + FRAME.size <= durable:
            length, crc = FRAME.unpack_from(data, pos)
            end = pos + FRAME.size + length
            if not length or end > durable:
                break
            payload = data[pos + FRAME.size : end]
            if crc32c.crc32c(payload) != crc or not well_formed(payload[0], length):
                break
            kind = payload[0]
            if kind in _STATE_KINDS:
                self._records.setdefault(_ledger_of(payload), []).append((start + pos, payload))
            elif kind == _ADD_KIND:
                self._adds.add(split_add(payload))
            pos = end
        self._read[path] = pos


class _StateOf:
    """Takes the state a journal record sets (``records.replay`` applies it here)."""

    def __init__(self) -> None:
        self.info: LedgerInfo | None = None

    def dropped(self, _lid: int) -> bool:
        return False

    def set_info(self, _lid: int, info: LedgerInfo) -> None:
        self.info = info

    def cut_replayed(self, *_args: object) -> None:
        pass


def _state_in(payload: bytes) -> LedgerInfo:
    state = _StateOf()
    records.replay(cast(records.LedgerStorage, state), payload)
    assert state.info is not None
    return state.info


# What a dropped ledger's tombstone amounts to (tombstones.py): every later request is
# refused as for a deleted ledger, whatever term or fence it carries, for the bookie's
# life; nothing of its state is left to lose.
DROPPED = LedgerInfo(fenced=True, term=2**63 - 1)


@contextmanager
def _index_of(disk: MemoryDisk, data_dir: Path) -> Iterator[LedgerIndex | None]:
    """The index of the bookie whose data directory is ``data_dir``, open while the block
    runs; None if it has none (never booted, or its disk was wiped)."""
    index_dir = child(data_dir, "index")
    if not disk.has_index(index_dir):
        yield None
        return
    index = LedgerIndex(index_dir, disk=disk)
    try:
        yield index
    finally:
        index.close()


def durable_state(
    disk: MemoryDisk, data_dir: Path, lid: int, scan: JournalScan | None = None
) -> LedgerInfo | None:
    """``lid``'s state as a boot after the worst power cut would find it on ``disk`` (a
    bookie's data directory ``data_dir``, its journal read by ``scan``): the index's,
    then every fsync'd state record from the index's checkpoint on, in journal order.
    None: no state at all; ``DROPPED``: the bookie dropped the ledger (its tombstone)."""
    with _index_of(disk, data_dir) as index:
        if index is None:
            return None
        if index.tombstone(lid) is not None:
            return DROPPED
        info = index.ledger(lid)
        checkpoint = index.checkpoint()
    if scan is None:
        scan = JournalScan(disk, data_dir / "journal")
    last = [(lsn, record) for lsn, record in scan.records(lid) if lsn >= checkpoint][-1:]
    return scan.state(*last[0]) if last else info


def _flushed(disk: MemoryDisk, data_dir: Path, lid: int, eid: int, entry: bytes) -> bool:
    """Whether the index points ``lid:eid`` at a record of exactly ``entry`` within its
    entry log's synced bytes (the index's writes are synced: what it holds is durable)."""
    with _index_of(disk, data_dir) as index:
        where = None if index is None else index.location(lid, eid)
    if where is None:
        return False
    log_id, offset, length = where
    path = log_path(child(data_dir, "ledgers"), log_id)
    if not disk.exists(path) or offset + RECORD.size + length > disk.durable_bytes(path):
        return False
    stored = disk.read(path)[offset + RECORD.size : offset + RECORD.size + length]
    return stored == entry


@define
class _Arrival:
    req: Request
    bookie: object  # the incarnation it reached
    settled: bool = False  # answered EOK, or refused: not a request still raising the term


@define
class _Place:
    """What the rules remember of one (bookie, ledger)."""

    arrivals: list[_Arrival] = field(factory=list)  # requests above durable_term, in order
    durable_term: int = NO_TERM  # the highest term found durable (it never goes down)
    durable_fence: bool = False


def _any_ok(req: Request, resp: Response) -> bool:
    """Whether an add (any entry of an ADD_BATCH) was answered EOK."""
    if req.op == OpCode.ADD or resp.status == StatusCode.EOK:
        return resp.status == StatusCode.EOK
    try:
        return any(status == StatusCode.EOK for status, _term in unpack_results(resp.body))
    except FrameError:
        return False


class DurableStateRule:
    def __init__(
        self,
        place_of: Callable[[str], tuple[MemoryDisk, Path, object] | None],
        violate: Callable[[str, str], None],
        counts: Counter[str],
    ) -> None:
        """``place_of(bookie)``: its disk, its data directory and the incarnation now
        serving (None before its first boot)."""
        self._place_of = place_of
        self._violate = violate
        self._counts = counts
        self._places: dict[tuple[str, int], _Place] = {}
        self._scans: dict[str, JournalScan] = {}  # each bookie's journal, as read so far
        # (bookie, ledger, term) -> the cut records of that term seen at the last answer
        # to a truncating request, and those of cuts answered as failed (see _cuts)
        self._cuts_seen: dict[tuple[str, int, int], frozenset[int]] = {}
        self._cuts_failed: dict[tuple[str, int, int], frozenset[int]] = {}

    def lost(self, bookie: str) -> None:
        """``bookie`` booted after losing data (a wipe starts its journal anew)."""
        for key in [k for k in self._places if k[0] == bookie]:
            del self._places[key]
        for cuts in (self._cuts_seen, self._cuts_failed):
            for ckey in [k for k in cuts if k[0] == bookie]:
                del cuts[ckey]
        self._scans.pop(bookie, None)

    def _scan(self, bookie: str, disk: MemoryDisk, data_dir: Path) -> JournalScan:
        scan = self._scans.get(bookie)
        if scan is None:
            scan = self._scans[bookie] = JournalScan(disk, data_dir / "journal")
        return scan

    def _place(self, bookie: str, lid: int) -> _Place:
        place = self._places.get((bookie, lid))
        if place is None:
            place = self._places[(bookie, lid)] = _Place()
        return place

    def arrived(self, bookie: str, req: Request) -> None:
        """``req`` reached ``bookie``, which admits it now (a plain add) or in a task it
        starts now."""
        term = req.term
        if term == NO_TERM:
            return
        place = self._places.get((bookie, req.ledger_id))
        if place is not None and term <= place.durable_term:
            return  # nothing to raise
        where = self._place_of(bookie)
        if where is not None:
            self._place(bookie, req.ledger_id).arrivals.append(_Arrival(req, where[2]))

    def answered(self, bookie: str, req: Request, resp: Response) -> None:
        op, term = req.op, req.term
        fence = op == OpCode.READ and bool(req.flags & ReadFlags.FENCE)
        if term == NO_TERM and not fence:
            return
        cuts = (op == OpCode.ADD and bool(req.flags & AddFlags.TRUNCATE)) or (
            op == OpCode.TRIM and bool(req.flags & TrimFlags.ABOVE)
        )
        place = self._places.get((bookie, req.ledger_id))
        if place is None:
            place = self._place(bookie, req.ledger_id)
        elif term <= place.durable_term and not cuts and not (fence and not place.durable_fence):
            return  # durable already (it never goes down)
        arrival = next((a for a in place.arrivals if a.req is req), None)
        if arrival is not None and resp.status != StatusCode.EIO:
            arrival.settled = True  # EIO: it may have raised the term, then failed
        if op == OpCode.READ:
            if resp.status in (StatusCode.EOK, StatusCode.ENOENTRY):
                self._judge(bookie, place, req, None)
        elif cuts:
            if resp.status == StatusCode.EOK:
                self._judge(bookie, place, req, None)
                self._cuts(bookie, req, made=True)
                if op == OpCode.ADD:
                    self._noop(bookie, req)
            elif resp.status == StatusCode.EIO:
                self._cuts(bookie, req, made=False)
        elif op in (OpCode.ADD, OpCode.ADD_BATCH) and _any_ok(req, resp):
            self._judge(bookie, place, req, arrival or _Arrival(req, None))

    def _judge(self, bookie: str, place: _Place, req: Request, add: _Arrival | None) -> None:
        """``add``: a plain add's arrival (None: any other request, judged strictly)."""
        where = self._place_of(bookie)
        if where is None:
            return
        disk, data_dir, incarnation = where
        lid, term = req.ledger_id, req.term
        fence = req.op == OpCode.READ and bool(req.flags & ReadFlags.FENCE)
        if place.durable_term < term or (fence and not place.durable_fence):
            self._counts["check.state_durable"] += 1
            info = durable_state(disk, data_dir, lid, self._scan(bookie, disk, data_dir))
            if info is not None:
                if info.term > place.durable_term:
                    place.durable_term = info.term
                    place.arrivals = [a for a in place.arrivals if a.req.term > info.term]
                place.durable_fence = place.durable_fence or info.fenced
        short = []
        if place.durable_term < term:
            short.append(f"term {term} (durable: {place.durable_term})")
        if fence and not place.durable_fence:
            short.append("its fence")
        if not short:
            return
        if add is not None:
            for a in place.arrivals:
                if a is add:
                    break
                if a.bookie is incarnation and a.req.term == term and not a.settled:
                    return  # it may have raised the term, and waits for its record
        what = req.op.name + (" TRUNCATE" if req.flags & AddFlags.TRUNCATE else "")
        self._violate(
            DURABLE_RULE,
            f"{bookie} answered {what} of {lid}:{req.entry_id} before "
            f"{' and '.join(short)} of the ledger was durable",
        )

    def _noop(self, bookie: str, req: Request) -> None:
        """``NoOpDurableWhenAnswered`` at an EOK answer to a truncating add."""
        where = self._place_of(bookie)
        if where is None:
            return
        disk, data_dir, _incarnation = where
        lid, eid = req.ledger_id, req.entry_id
        self._counts["check.noop_durable"] += 1
        if self._scan(bookie, disk, data_dir).holds_add(lid, eid, req.body):
            return
        if _flushed(disk, data_dir, lid, eid, req.body):
            self._counts["check.noop_durable.flushed"] += 1
            return
        self._violate(
            NOOP_RULE,
            f"{bookie} answered the truncating no-op {lid}:{eid} (term {req.term}) before it "
            "was durable: no fsync'd journal record of it, no flushed copy",
        )

    def _cuts(self, bookie: str, req: Request, *, made: bool) -> None:
        """``TruncatesOncePerTerm`` at an answer to a truncating request: EOK (``made``),
        or EIO.

        A cut that failed after its record reached the journal (the flush that makes it
        durable met a disk error: EIO) is rolled back and made by the retry, which
        journals it again (adds.py: ``truncate``): the records new at an EIO answer are
        that cut's and do not count. Two records of one term that do count are a cut made
        twice."""
        where = self._place_of(bookie)
        if where is None:
            return
        disk, data_dir, _incarnation = where
        lid, term = req.ledger_id, req.term
        scan = self._scan(bookie, disk, data_dir)
        present = frozenset(
            lsn
            for lsn, record in scan.records(lid)
            if record[0] in _CUT_KINDS and scan.state(lsn, record).truncated_term == term
        )
        key = (bookie, lid, term)
        new = present - self._cuts_seen.get(key, frozenset())
        self._cuts_seen[key] = present
        failed = self._cuts_failed.get(key, frozenset())
        if not made:
            self._cuts_failed[key] = failed | new
            return
        self._counts["check.truncates_once"] += 1
        counted = sorted(present - failed)
        if len(counted) < len(present):
            self._counts["check.truncates_once.failed_cut_left_out"] += 1
        if len(counted) > 1:
            self._violate(
                ONCE_RULE,
                f"{bookie} cut {lid} {len(counted)} times in term {term} (journal records at "
                f"LSNs {counted}), answering {req.op.name} of {lid}:{req.entry_id}",
            )
