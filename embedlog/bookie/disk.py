"""What a bookie needs of its disks, behind one narrow interface, and the real disks.

The bookie's parts (journal, entry logs, index, cookies, boot) touch files only
through a ``Disk``: append-only files that know which of their bytes are durable,
directory listings, small files read whole or replaced atomically, and the index's
key-value store. ``REAL_DISK`` (``RealDisk``) is the operating system's files and
LevelDB; the deterministic simulator gives each bookie an in-memory one
(embedlog/testing/simdisk.py) whose crashes tear unsynced tails and whose faults
(disk full, failing fsyncs, wiped disks) are drawn from the seed.

Paths stay ``Path`` objects so that messages name the files an operator would look at.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Protocol

from embedlog.bookie.files import AppendFile
from embedlog.bookie.kv import KeyValueStore
from embedlog.bookie.leveldb import LevelDBStore, has_leveldb
from embedlog.dirlock import DirLock


@functools.lru_cache(maxsize=4096)
def child(directory: Path, name: str) -> Path:
    """``directory / name``, the same object again for the same pair. A bookie names the
    same few files over and over (its journal's and entry logs' files, its cookies, at
    each boot and listing): each join parses and formats a new path, and in a simulated
    stream history those joins were 2% of the CPU (py-spy)."""
    return directory / name


class AppendOnlyFile(Protocol):
    """A file appended to at its end, which knows how much of itself an fsync made
    durable; ``crash()`` leaves it as a power cut would (files.py: ``AppendFile``)."""

    path: Path

    @property
    def size(self) -> int:
        """Where the next append starts."""
        ...

    def append(self, data: bytes) -> int: ...

    def append_parts(self, parts: list[bytes], *, durable: bool = False) -> int:
        """Write ``parts`` at the end, one after the other; the offset they start at.
        ``durable``: and make them durable, as ``sync()`` would (in one system call where
        there is one: files.py)."""
        ...

    def sync(self) -> None: ...

    def pread(self, offset: int, length: int) -> bytes: ...

    def close(self) -> None: ...

    def crash(self) -> None: ...


class Held(Protocol):
    """A directory held exclusively (``Disk.lock``) until ``release()``."""

    def release(self) -> None: ...


class Disk(Protocol):
    def open_append(self, path: Path) -> AppendOnlyFile:
        """Open (creating it, not yet durably) the append-only file at ``path``."""
        ...

    def listdir(self, directory: Path) -> list[str]:
        """The names in ``directory``; FileNotFoundError when it is missing."""
        ...

    def read(self, path: Path) -> bytes:
        """A whole file; FileNotFoundError when it is missing."""
        ...

    def write_atomic(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` durably: after a crash it holds the old bytes or
        the new ones, never a mix."""
        ...

    def truncate(self, path: Path, size: int) -> None:
        """Cut ``path`` to ``size`` bytes, durably."""
        ...

    def unlink(self, path: Path) -> None:
        """Delete ``path`` if it is there."""
        ...

    def mkdir(self, path: Path) -> None:
        """Create ``path`` and its parents if they are missing."""
        ...

    def exists(self, path: Path) -> bool: ...

    def size(self, path: Path) -> int: ...

    def resolve(self, path: Path) -> Path:
        """The absolute path that names the directory in cookies."""
        ...

    def lock(self, directory: Path) -> Held:
        """Hold ``directory`` exclusively (embedlog/dirlock.py); DirLockedError if held."""
        ...

    def has_index(self, path: Path) -> bool:
        """Whether ``path`` holds an index store (damaged or not)."""
        ...

    def open_index(self, path: Path, *, create: bool) -> KeyValueStore:
        """The index's store at ``path``; ``create``: a new one if there is none (a new or
        wiped disk); without it a missing store is damage (BookieIOError)."""
        ...


class RealDisk:
    """The operating system's files and LevelDB."""

    def open_append(self, path: Path) -> AppendOnlyFile:
        return AppendFile(path)

    def listdir(self, directory: Path) -> list[str]:
        return os.listdir(directory)

    def read(self, path: Path) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_atomic(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        _fsync_dir(path.parent)

    def truncate(self, path: Path, size: int) -> None:
        with path.open("r+b") as f:
            f.truncate(size)
            os.fsync(f.fileno())

    def unlink(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def mkdir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)

    def size(self, path: Path) -> int:
        return os.stat(path).st_size

    def resolve(self, path: Path) -> Path:
        return path.resolve()

    def lock(self, directory: Path) -> Held:
        return DirLock(directory)

    def has_index(self, path: Path) -> bool:
        return has_leveldb(path)

    def open_index(self, path: Path, *, create: bool) -> KeyValueStore:
        return LevelDBStore(path, create=create)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


REAL_DISK: Disk = RealDisk()
