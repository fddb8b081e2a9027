"""The index's key-value store on LevelDB (plyvel): the real one (embedlog/bookie/kv.py).

Paranoid checks on open, block checksums verified on every read: damage LevelDB can
see refuses the boot (``damaged_index``: a clear error naming the directory and what
to do) or fails the read with BookieIOError (EIO), never an answer that a key is
absent. Every write is synced.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plyvel

from embedlog.bookie.kv import Batch
from embedlog.errors import BookieIOError


class LevelDBStore:
    def __init__(self, path: Path, *, create: bool = False) -> None:
        """Open the LevelDB at ``path``; ``create`` makes a new one when there is none (a
        new or wiped disk). Without it the LevelDB files must be there: a directory that
        lost them (CURRENT, the MANIFEST it names) is damaged, not new."""
        self.path = path
        if not create:
            _check_files(path)
        try:
            self.db = plyvel.DB(str(path), create_if_missing=create, paranoid_checks=True)
        except plyvel.CorruptionError as exc:
            raise damaged_index(path, _reason(exc)) from exc
        except (plyvel.IOError, plyvel.Error) as exc:
            raise BookieIOError(
                f"cannot open the index at {path}: {exc}. Check that the directory exists, "
                "is writable and is not used by another bookie process."
            ) from exc

    def _read_error(self, exc: plyvel.Error) -> BookieIOError:
        return BookieIOError(f"reading the index at {self.path} failed: {_reason(exc)}")

    def get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self.db.get(key, verify_checksums=True)
        except plyvel.Error as exc:
            raise self._read_error(exc) from exc
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value, sync=True)

    def delete(self, key: bytes) -> None:
        self.db.delete(key, sync=True)

    def batch(self) -> Any:  # plyvel's own WriteBatch: a flush's keys go to it from C
        batch: Batch = self.db.write_batch(sync=True)
        return batch

    def scan(
        self, prefix: bytes, *, reverse: bool = False, include_value: bool = True
    ) -> Iterator[Any]:
        try:
            with self.db.iterator(
                prefix=prefix, reverse=reverse, include_value=include_value, verify_checksums=True
            ) as it:
                yield from it
        except plyvel.Error as exc:
            raise self._read_error(exc) from exc

    def compact_range(self, start: bytes, stop: bytes) -> None:
        self.db.compact_range(start=start, stop=stop)

    def close(self) -> None:
        self.db.close()


def has_leveldb(path: Path) -> bool:
    """Whether ``path`` holds a LevelDB (its CURRENT file), damaged or not."""
    return (path / "CURRENT").exists()


def _check_files(path: Path) -> None:
    current = path / "CURRENT"
    try:
        manifest = current.read_text().strip()
    except FileNotFoundError:
        raise damaged_index(path, "its LevelDB file CURRENT is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise damaged_index(path, f"its LevelDB file CURRENT is unreadable: {exc}") from exc
    if not manifest or "/" in manifest or not (path / manifest).exists():
        raise damaged_index(path, f"the LevelDB manifest CURRENT names ({manifest!r}) is missing")


def damaged_index(path: Path, what: str) -> BookieIOError:
    """The refusal to boot on an index LevelDB says is damaged, with the way out."""
    return BookieIOError(
        f"the index at {path} is damaged ({what}): the bookie cannot tell which entries it "
        "holds or which ledgers it fenced, so it does not boot. Move the directory away "
        "(keep it to investigate), then start the bookie with auto_fix_cookies=True or run "
        "`embedlog bookie fixcookie` first (LocalCluster: wipe_bookie(bookie_id, 'index'), "
        "then start_bookie(bookie_id, auto_fix_cookies=True)); it then boots on a new index, "
        "fences its ledgers and copies their entries back from its peers (BP-46)."
    )


def _reason(exc: plyvel.Error) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)
