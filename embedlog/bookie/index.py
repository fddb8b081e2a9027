"""The bookie's index: entry locations, per-ledger state, boot markers.

Keys:
    b"E" ledger i64 entry i64  -> log id u32 | offset u64 | length u32
    b"L" ledger i64            -> LedgerInfo (JSON)
    b"D" ledger i64            -> master key (20 bytes, or empty): the ledger was dropped
                                  (deleted or garbage collected); kept for the bookie's
                                  life, written in the batch that deletes its ``L`` key
                                  (embedlog/bookie/tombstones.py)
    b"Munclean"                -> present while the bookie runs (unclean-shutdown bit)
    b"Mcheckpoint"             -> journal LSN u64 covered by ledger storage
    b"Mnojournal"              -> present when the last run acked adds without the journal
    b"Mprotect"                -> BP-46 phase one must run (set before it starts, or by
                                  ``embedlog bookie fixcookie``; cleared when it is done)
    b"Mrepair"                 -> BP-46 phase two (repair from peers) has not finished
    b"G" log u32               -> end u64: how far into entry log ``log`` index entries may
                                  point (set by every flush that writes to it, dropped
                                  before the log is deleted), so a boot finds an entry log
                                  that is missing or cut short without reading the index
    b"Mlogends"                -> the ``G`` keys are kept (an index from before them gets
                                  them from one scan of its entries)

The keys live in a ``KeyValueStore`` (embedlog/bookie/kv.py) the bookie's ``Disk``
opens: LevelDB on real disks (embedlog/bookie/leveldb.py), a sorted map in memory
in the simulator. Only synced writes are ever made: LevelDB would otherwise keep
writes that our crash model says are lost, and the BP-46 tests would stop meaning
anything.

LevelDB runs with paranoid checks, and reads verify block checksums: damage it
can see refuses the boot (a clear error naming the directory and what to do) or
fails the read with BookieIOError (EIO), never an answer that an entry is absent.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator
from itertools import repeat
from pathlib import Path
from typing import Any

from attrs import define

from embedlog.bookie.disk import REAL_DISK, Disk
from embedlog.bookie.entrylog import LOCATION, RECORD, entry_readable
from embedlog.bookie.gilsteps import consume_in_steps
from embedlog.bookie.leveldb import damaged_index
from embedlog.readcache import ReadCache

__all__ = ["LedgerIndex", "LedgerInfo", "damaged_index"]

ENTRY = struct.Struct(">qq")
_ENTRY_KEY = struct.Struct(">cqq")
LEDGER = struct.Struct(">q")
UNCLEAN = b"Munclean"
CHECKPOINT = b"Mcheckpoint"
NOJOURNAL = b"Mnojournal"
PROTECT = b"Mprotect"
REPAIR = b"Mrepair"
LOGENDS = b"Mlogends"
_LOG_KEY = struct.Struct(">cI")
_LOG_END = struct.Struct(">Q")


_HEX_KEY = re.compile(r"[0-9a-f]*")
_JSON_BOOL = {False: "false", True: "true"}
_JSON_INT = rb"(-?(?:0|[1-9][0-9]*))"  # JSON's integers: no leading zeros
_STATE_JSON = re.compile(
    rb'\{"k":"([0-9a-f]*)","f":(true|false),"l":(true|false),'
    + b",".join(b'"%s":%s' % (name, _JSON_INT) for name in (b"t", b"x", b"c", b"r", b"u"))
    + rb"\}"
)


@define
class LedgerInfo:
    """Per-ledger state a bookie keeps (mutable; changes are journaled, then flushed)."""

    master_key: str = ""  # hex
    fenced: bool = False
    limbo: bool = False
    term: int = -1
    explicit_lac: int = -1
    lac: int = -1  # highest LAC seen in the entries stored
    lafr: int = -1
    truncated_term: int = -1  # unbounded ledgers: the term whose truncate no-op was applied

    def to_json(self) -> bytes:
        """The JSON object ``{"k", "f", "l", "t", "x", "c", "r", "u"}`` in that order,
        without spaces: the bytes ``json.dumps`` writes, built directly when the key is
        hex (always, but for a hand-made state). The index and the journal's state
        records hold one per change: json.dumps took 3.4 us, this 0.4 (1% of a stream
        seed's CPU in the simulator)."""
        if _HEX_KEY.fullmatch(self.master_key) is None:
            return json.dumps(self._as_dict(), separators=(",", ":")).encode()
        return (
            f'{{"k":"{self.master_key}","f":{_JSON_BOOL[self.fenced]},'
            f'"l":{_JSON_BOOL[self.limbo]},"t":{self.term:d},"x":{self.explicit_lac:d},'
            f'"c":{self.lac:d},"r":{self.lafr:d},"u":{self.truncated_term:d}}}'
        ).encode()

    def _as_dict(self) -> dict[str, Any]:
        return {
            "k": self.master_key,
            "f": self.fenced,
            "l": self.limbo,
            "t": self.term,
            "x": self.explicit_lac,
            "c": self.lac,
            "r": self.lafr,
            "u": self.truncated_term,
        }

    @classmethod
    def from_json(cls, data: bytes) -> LedgerInfo:
        """``to_json``'s bytes read back. Those bytes exactly (the usual case) are matched
        without the JSON parser, twice as fast; anything else (a state written before the
        ``r`` and ``u`` fields) goes through it."""
        m = _STATE_JSON.fullmatch(data)
        if m is not None:
            k, f, li, t, x, c, r, u = m.groups()
            return cls(
                k.decode(), f == b"true", li == b"true", int(t), int(x), int(c), int(r), int(u)
            )
        d: dict[str, Any] = json.loads(data)
        return cls(d["k"], d["f"], d["l"], d["t"], d["x"], d["c"], d.get("r", -1), d.get("u", -1))

    @property
    def known_lac(self) -> int:
        return max(self.lac, self.explicit_lac)


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _ENTRY_KEY.pack(b"E", ledger_id, entry_id)


def ledger_key(ledger_id: int) -> bytes:
    return b"L" + LEDGER.pack(ledger_id)


def tombstone_key(ledger_id: int) -> bytes:
    return b"D" + LEDGER.pack(ledger_id)


class LedgerIndex:
    def __init__(self, path: Path, *, create: bool = False, disk: Disk = REAL_DISK) -> None:
        """Open the index at ``path`` on ``disk``; ``create`` makes a new one when there is
        none (a new or wiped disk). Without it the store must be there: an index
        directory that lost it is damaged, not new (BookieIOError)."""
        self.path = path
        self.db = disk.open_index(path, create=create)
        # Ledger -> its highest indexed entry id, as ``last_entry`` found it: every
        # READ_LAC answer asks, a long poll's on a follower's path. A commit (the one
        # writer of entry keys, from a flush's worker thread) forgets the ledgers it wrote.
        self._last: ReadCache[int, int] = ReadCache()

    def _get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def close(self) -> None:
        self.db.close()

    # -- markers -----------------------------------------------------------------------------

    def marker(self, name: bytes) -> bool:
        return self._get(name) is not None

    def set_marker(self, name: bytes, value: bool) -> None:
        if value:
            self.db.put(name, b"1")
        else:
            self.db.delete(name)

    def unclean_bit(self) -> bool:
        return self.marker(UNCLEAN)

    def set_unclean_bit(self, value: bool) -> None:
        self.set_marker(UNCLEAN, value)

    def checkpoint(self) -> int:
        raw = self._get(CHECKPOINT)
        return struct.unpack(">Q", raw)[0] if raw else 0

    # -- ledgers -----------------------------------------------------------------------------

    def ledger(self, ledger_id: int) -> LedgerInfo | None:
        raw = self._get(ledger_key(ledger_id))
        return LedgerInfo.from_json(raw) if raw is not None else None

    def ledger_ids(self) -> Iterator[int]:
        """The ledgers the index holds a state of."""
        for key in self._scan(b"L", include_value=False):
            yield LEDGER.unpack(key[1:])[0]

    def tombstone(self, ledger_id: int) -> bytes | None:
        """The master key kept with the ledger's tombstone; None if it has none."""
        return self._get(tombstone_key(ledger_id))

    def location(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        raw = self._get(entry_key(ledger_id, entry_id))
        return LOCATION.unpack(raw) if raw is not None else None

    def entry_ids(self, ledger_id: int) -> Iterator[int]:
        for key in self._scan(b"E" + LEDGER.pack(ledger_id), include_value=False):
            yield ENTRY.unpack(key[1:])[1]

    def readable_entry_ids(self, ledger_id: int, damaged: dict[int, int]) -> Iterator[int]:
        """``entry_ids`` less the entries whose bytes a damaged entry log lost (``damaged``:
        log id -> bytes left in it)."""
        for key, value in self._scan(b"E" + LEDGER.pack(ledger_id)):
            if entry_readable(LOCATION.unpack(value), damaged):
                yield ENTRY.unpack(key[1:])[1]

    def unreadable_entries(
        self, damaged: dict[int, int]
    ) -> tuple[dict[int, dict[int, list[int]]], set[int]]:
        """The entries whose bytes the ``damaged`` entry logs lost (log id -> ledger ->
        entry ids), and which of those logs some entry still points into. One scan."""
        lost: dict[int, dict[int, list[int]]] = {}
        pointed: set[int] = set()
        for key, value in self._scan(b"E"):
            where = LOCATION.unpack(value)
            if where[0] in damaged:
                pointed.add(where[0])
                if not entry_readable(where, damaged):
                    _, lid, eid = _ENTRY_KEY.unpack(key)
                    lost.setdefault(where[0], {}).setdefault(lid, []).append(eid)
        return lost, pointed

    def _scan(self, prefix: bytes, *, include_value: bool = True) -> Iterator[Any]:
        return self.db.scan(prefix, include_value=include_value)

    def compact_ledger(self, ledger_id: int) -> None:
        """Compact a ledger's entry keys (after a cut): frees the space deletions left behind."""
        self.db.compact_range(
            start=b"E" + LEDGER.pack(ledger_id), stop=b"E" + LEDGER.pack(ledger_id + 1)
        )

    def live_logs(self) -> set[int]:
        """The entry log files that some index entry points into."""
        return {LOCATION.unpack(v)[0] for _, v in self._scan(b"E")}

    def log_ends(self) -> dict[int, int]:
        """Entry log id -> how far into it index entries may point (the ``G`` keys)."""
        if not self.marker(LOGENDS):
            # An index from before the G keys: derive them once from its entries.
            ends: dict[int, int] = {}
            for _, value in self._scan(b"E"):
                log_id, offset, length = LOCATION.unpack(value)
                ends[log_id] = max(ends.get(log_id, 0), offset + RECORD.size + length)
            with self.db.batch() as batch:
                for log_id, end in ends.items():
                    batch.put(_LOG_KEY.pack(b"G", log_id), _LOG_END.pack(end))
                batch.put(LOGENDS, b"1")
            return ends
        return {
            _LOG_KEY.unpack(key)[1]: _LOG_END.unpack(value)[0] for key, value in self._scan(b"G")
        }

    def set_log_ends(self, ends: dict[int, int], forget: Iterable[int] = ()) -> None:
        """Durably set how far into each log of ``ends`` entries may point; drop the logs of
        ``forget`` (no entry points into them any more)."""
        with self.db.batch() as batch:
            for log_id in forget:
                batch.delete(_LOG_KEY.pack(b"G", log_id))
            for log_id, end in ends.items():
                batch.put(_LOG_KEY.pack(b"G", log_id), _LOG_END.pack(end))

    def forget_logs_except(self, live: set[int]) -> None:
        """Drop the ``G`` key of every log outside ``live``: done before such a log's file
        is deleted, so the index never points at a file that is rightly gone."""
        stale = [i for i in self.log_ends() if i not in live]
        if stale:
            self.set_log_ends({}, stale)

    def last_entry(self, ledger_id: int) -> int:
        last = self._last.get(ledger_id)
        if last is not None:
            return last
        ticket = self._last.ticket()
        last = -1
        for key in self.db.scan(b"E" + LEDGER.pack(ledger_id), reverse=True, include_value=False):
            last = ENTRY.unpack(key[1:])[1]
            break
        self._last.keep(ledger_id, last, ticket)
        return last

    def commit(
        self,
        locations: Iterable[tuple[int, list[int], list[bytes]]],
        infos: Iterable[tuple[int, LedgerInfo | None]],
        deletes: Iterable[tuple[int, int]] = (),
        checkpoint: int | None = None,
        log_ends: dict[int, int] | None = None,
        tombstones: dict[int, bytes] | None = None,
    ) -> None:
        """One synced batch: entry locations (per ledger: entry ids and their packed
        locations), ledger states (None deletes), entry deletions, how far into the
        entry logs they were written the locations now reach (``log_ends``), and the
        tombstones of dropped ledgers (ledger -> its master key)."""
        changed: set[int] = set()  # ledgers whose entry keys (or state) this writes
        try:
            with self.db.batch() as batch:
                for log_id, end in (log_ends or {}).items():
                    batch.put(_LOG_KEY.pack(b"G", log_id), _LOG_END.pack(end))
                for lid, eid in deletes:
                    changed.add(lid)
                    batch.delete(entry_key(lid, eid))
                for lid, entry_ids, where in locations:
                    if len(entry_ids) != len(where):
                        raise ValueError(f"{len(entry_ids)} entry ids for {len(where)} locations")
                    changed.add(lid)
                    # In C, in steps the event loop can come in between (gilsteps).
                    keys = map(_ENTRY_KEY.pack, repeat(b"E"), repeat(lid), entry_ids)
                    consume_in_steps(batch.put, len(entry_ids), keys, where)
                for lid, info in infos:
                    if info is None:
                        changed.add(lid)
                        batch.delete(ledger_key(lid))
                    else:
                        batch.put(ledger_key(lid), info.to_json())
                for lid, key in (tombstones or {}).items():
                    batch.put(tombstone_key(lid), key)
                if checkpoint is not None:
                    batch.put(CHECKPOINT, struct.pack(">Q", checkpoint))
        except BaseException:
            self._last.forget(None)  # it may have written any part
            raise
        self._last.forget(changed)
