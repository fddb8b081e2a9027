"""The bookie's LevelDB index (plyvel): entry locations, per-ledger state, boot markers.

Keys:
    b"E" ledger i64 entry i64  -> log id u32 | offset u64 | length u32
    b"L" ledger i64            -> LedgerInfo (JSON)
    b"Munclean"                -> present while the bookie runs (unclean-shutdown bit)
    b"Mcheckpoint"             -> journal LSN u64 covered by ledger storage
    b"Mnojournal"              -> present when the last run acked adds without the journal
    b"Mprotect"                -> BP-46 phase one must run (set before it starts, or by
                                  ``embedlog bookie fixcookie``; cleared when it is done)
    b"Mrepair"                 -> BP-46 phase two (repair from peers) has not finished

Only synced writes are ever made: LevelDB would otherwise keep writes that our
crash model says are lost, and the BP-46 tests would stop meaning anything.
"""

from __future__ import annotations

import json
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import repeat
from pathlib import Path
from typing import Any

import plyvel
from attrs import define

from embedlog.bookie.entrylog import LOCATION
from embedlog.errors import BookieIOError

ENTRY = struct.Struct(">qq")
_ENTRY_KEY = struct.Struct(">cqq")
LEDGER = struct.Struct(">q")
UNCLEAN = b"Munclean"
CHECKPOINT = b"Mcheckpoint"
NOJOURNAL = b"Mnojournal"
PROTECT = b"Mprotect"
REPAIR = b"Mrepair"


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
        return json.dumps(
            {
                "k": self.master_key,
                "f": self.fenced,
                "l": self.limbo,
                "t": self.term,
                "x": self.explicit_lac,
                "c": self.lac,
                "r": self.lafr,
                "u": self.truncated_term,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LedgerInfo:
        d: dict[str, Any] = json.loads(data)
        return cls(d["k"], d["f"], d["l"], d["t"], d["x"], d["c"], d.get("r", -1), d.get("u", -1))

    @property
    def known_lac(self) -> int:
        return max(self.lac, self.explicit_lac)


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _ENTRY_KEY.pack(b"E", ledger_id, entry_id)


def ledger_key(ledger_id: int) -> bytes:
    return b"L" + LEDGER.pack(ledger_id)


class LedgerIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = plyvel.DB(str(path), create_if_missing=True)
        except plyvel.CorruptionError as exc:
            raise BookieIOError(
                f"the index at {path} is corrupt ({exc}); the bookie cannot tell which entries "
                "it holds. Replace the bookie's disks (wipe it) and let the cluster re-replicate."
            ) from exc
        except (plyvel.IOError, plyvel.Error) as exc:
            raise BookieIOError(
                f"cannot open the index at {path}: {exc}. Check that the directory exists, "
                "is writable and is not used by another bookie process."
            ) from exc

    def close(self) -> None:
        self.db.close()

    # -- markers -----------------------------------------------------------------------------

    def marker(self, name: bytes) -> bool:
        return self.db.get(name) is not None

    def set_marker(self, name: bytes, value: bool) -> None:
        if value:
            self.db.put(name, b"1", sync=True)
        else:
            self.db.delete(name, sync=True)

    def unclean_bit(self) -> bool:
        return self.marker(UNCLEAN)

    def set_unclean_bit(self, value: bool) -> None:
        self.set_marker(UNCLEAN, value)

    def checkpoint(self) -> int:
        raw = self.db.get(CHECKPOINT)
        return struct.unpack(">Q", raw)[0] if raw else 0

    # -- ledgers -----------------------------------------------------------------------------

    def ledger(self, ledger_id: int) -> LedgerInfo | None:
        raw = self.db.get(ledger_key(ledger_id))
        return LedgerInfo.from_json(raw) if raw is not None else None

    def ledgers(self) -> Iterator[tuple[int, LedgerInfo]]:
        for key, value in self.db.iterator(prefix=b"L"):
            yield LEDGER.unpack(key[1:])[0], LedgerInfo.from_json(value)

    def location(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        raw = self.db.get(entry_key(ledger_id, entry_id))
        return LOCATION.unpack(raw) if raw is not None else None

    def entry_ids(self, ledger_id: int) -> Iterator[int]:
        for key in self.db.iterator(prefix=b"E" + LEDGER.pack(ledger_id), include_value=False):
            yield ENTRY.unpack(key[1:])[1]

    def compact_ledger(self, ledger_id: int) -> None:
        """Compact a ledger's entry keys (after a cut): frees the space deletions left behind."""
        self.db.compact_range(
            start=b"E" + LEDGER.pack(ledger_id), stop=b"E" + LEDGER.pack(ledger_id + 1)
        )

    def live_logs(self) -> set[int]:
        """The entry log files that some index entry points into."""
        return {LOCATION.unpack(v)[0] for _, v in self.db.iterator(prefix=b"E")}

    def last_entry(self, ledger_id: int) -> int:
        prefix = b"E" + LEDGER.pack(ledger_id)
        with self.db.iterator(prefix=prefix, reverse=True, include_value=False) as it:
            for key in it:
                return ENTRY.unpack(key[1:])[1]
        return -1

    def commit(
        self,
        locations: Iterable[tuple[int, list[int], list[bytes]]],
        infos: Iterable[tuple[int, LedgerInfo | None]],
        deletes: Iterable[tuple[int, int]] = (),
        checkpoint: int | None = None,
    ) -> None:
        """One synced batch: entry locations (per ledger: entry ids and their packed
        locations), ledger states (None deletes), entry deletions."""
        with self.db.write_batch(sync=True) as batch:
            for lid, eid in deletes:
                batch.delete(entry_key(lid, eid))
            for lid, entry_ids, where in locations:
                if len(entry_ids) != len(where):
                    raise ValueError(f"{len(entry_ids)} entry ids for {len(where)} locations")
                # Consumed in C (a deque that keeps nothing): a flush holds the GIL for
                # this loop, beside the adds it would slow down.
                keys = map(_ENTRY_KEY.pack, repeat(b"E"), repeat(lid), entry_ids)
                deque(map(batch.put, keys, where), maxlen=0)
            for lid, info in infos:
                if info is None:
                    batch.delete(ledger_key(lid))
                else:
                    batch.put(ledger_key(lid), info.to_json())
            if checkpoint is not None:
                batch.put(CHECKPOINT, struct.pack(">Q", checkpoint))
