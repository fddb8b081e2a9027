"""A bookie's disks in memory, for the deterministic simulator (the ``Disk`` of
embedlog/bookie/disk.py).

Every file keeps two lengths: the bytes written and the bytes an fsync made durable.
A power cut (``power_cut``) keeps the durable bytes and, drawn from the seed, a prefix
of the rest (``kept_tail``): none of it, all of it, or a cut anywhere, mid-record and
mid-header included, as a real power cut can leave a file whose last writes reached
the platter in part. A file created and never fsync'd loses its directory entry too.
Whole-file writes (cookies) and truncations are durable when they return, as the real
disk makes them. The index store (embedlog/testing/simkv.py) keeps every write it
accepted, since the real one syncs each.

Seeded faults, switched on by the simulation:

* ``fill(until)``: the disk is full until virtual time ``until``: an append writes a
  drawn prefix of its bytes, then fails with ENOSPC (a retry must not count on the
  offsets it had); an fsync fails with ENOSPC;
* ``fail_syncs(n)``: the next ``n`` fsyncs fail with EIO, leaving nothing more durable;
* ``wipe()``: every file, directory and index is gone (a replaced disk), for a bookie
  that is down;
* ``flip(path, offset, bit)``: one bit of a file flipped at rest (simrot.py), for a bookie
  that is down.

The index store draws no faults: LevelDB's write errors stick to the open database
(every later write fails until it is reopened), which the bookie meets as a broken
disk; that path is tested on real LevelDB (tests/bookie).
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from pathlib import Path

from embedlog.bookie.disk import AppendOnlyFile, Held
from embedlog.bookie.kv import KeyValueStore
from embedlog.bookie.leveldb import damaged_index
from embedlog.dirlock import DirLockedError
from embedlog.testing.simkv import MemoryKV

INDEX_NAME = "CURRENT"  # what a directory holding an index lists (LevelDB's own file)


def kept_tail(draw: float, cut: Callable[[int, int], int], tail: int) -> int:
    """How many of a file's ``tail`` bytes that no fsync covered a power cut keeps:
    ``draw`` (uniform in [0, 1)) picks none (a third of the time), all, or a cut at
    ``cut(1, tail - 1)`` (a torn tail)."""
    if tail <= 0 or draw < 1 / 3:
        return 0
    if draw < 2 / 3 or tail == 1:
        return tail
    return cut(1, tail - 1)


class MemFile:
    """A file's bytes on the (simulated) platter."""

    __slots__ = ("data", "durable")

    def __init__(self, data: bytes = b"", durable: int = -1) -> None:
        self.data = bytearray(data)
        # Bytes an fsync made durable; -1: the file was created and never fsync'd, so a
        # crash loses its directory entry as well.
        self.durable = durable


class SimFile:
    """An open append-only file on a ``MemoryDisk`` (``AppendOnlyFile``)."""

    def __init__(self, disk: MemoryDisk, path: Path, f: MemFile) -> None:
        self.path = path
        self._disk = disk
        self._f = f
        self.crashed = False
        self.closed = False

    @property
    def size(self) -> int:
        return len(self._f.data)

    @property
    def durable(self) -> int:
        return self._f.durable

    def _usable(self) -> None:
        if self.crashed:
            raise OSError(f"{self.path}: bookie crashed")
        if self.closed:
            raise ValueError(f"{self.path}: closed")

    def append(self, data: bytes) -> int:
        return self.append_parts([data])

    def append_parts(self, parts: list[bytes], *, durable: bool = False) -> int:
        self._usable()
        offset = len(self._f.data)
        data = b"".join(parts)
        room = self._disk.room(len(data))
        if room < len(data):
            self._f.data += data[:room]
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        self._f.data += data
        if durable:  # the write, then the sync's own faults, as a real durable write has both
            self.sync()
        return offset

    def sync(self) -> None:
        self._usable()
        self._disk.check_sync(self.path)
        self._f.durable = len(self._f.data)

    def pread(self, offset: int, length: int) -> bytes:
        if self.closed:
            raise ValueError(f"{self.path}: closed")
        return bytes(self._f.data[offset : offset + length])

    def close(self) -> None:
        self.closed = True

    def crash(self) -> None:
        """The process is gone; what its file keeps is the power cut's (``power_cut``)."""
        self.crashed = True
        self.closed = True


class _Held:
    def __init__(self, disk: MemoryDisk, key: str) -> None:
        self._disk = disk
        self._key = key

    def release(self) -> None:
        self._disk._locks.discard(self._key)


class MemoryDisk:
    """All of one bookie's disks, in memory."""

    def __init__(
        self,
        rng: random.Random,
        clock: Callable[[], float],
        on_fault: Callable[[str, str], None] = lambda _what, _detail: None,
    ) -> None:
        """``rng``: this disk's own stream of the seed (partial writes, torn tails);
        ``clock``: virtual time (how long the disk stays full); ``on_fault(what, detail)``
        hears each fault that bites: ``disk_full``, ``fsync_error``, ``torn_tail``."""
        self._rng = rng
        self._clock = clock
        self._on_fault = on_fault
        self._files: dict[str, MemFile] = {}
        self._dirs: dict[str, set[str]] = {}  # directory -> the names in it
        self._indexes: dict[str, MemoryKV] = {}
        self._locks: set[str] = set()
        self._full_until = -1.0
        self._full_told = True
        self._failing_syncs = 0
        self.bitten = 0  # faults that made an operation fail, ever
        # A power cut happened since the bookie last locked its directories (booted): its
        # next boot finds an unclean shutdown.
        self.powered_off = False

    # -- faults -------------------------------------------------------------------------------

    def fill(self, until: float) -> None:
        self._full_until = until
        self._full_told = False  # on_fault hears of the episode once

    def fail_syncs(self, n: int) -> None:
        self._failing_syncs = n

    def clear_faults(self) -> None:
        self._full_until, self._failing_syncs = -1.0, 0

    @property
    def full(self) -> bool:
        return self._clock() < self._full_until

    def room(self, wanted: int) -> int:
        """How many of ``wanted`` bytes an append writes before the disk is full."""
        if not self.full:
            return wanted
        self._full("append")
        return self._rng.randint(0, wanted - 1) if wanted else 0

    def _full(self, what: str) -> None:
        self.bitten += 1
        if not self._full_told:
            self._full_told = True
            self._on_fault("disk_full", what)

    def check_sync(self, path: Path) -> None:
        if self.full:
            self._full(f"fsync {path.name}")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        if self._failing_syncs > 0:
            self._failing_syncs -= 1
            self.bitten += 1
            self._on_fault("fsync_error", path.name)
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))

    def power_cut(self) -> None:
        """Every file as the platter has it after a power cut (the bookie is gone)."""
        for key in sorted(self._files):
            f = self._files[key]
            if f.durable < 0:
                self._drop(key)
                continue
            tail = len(f.data) - f.durable
            if tail <= 0:
                continue
            kept = kept_tail(self._rng.random(), self._rng.randint, tail)
            if 0 < kept < tail:
                self._on_fault("torn_tail", f"{key}: {kept} of {tail} unsynced bytes kept")
            del f.data[f.durable + kept :]
        self._locks.clear()
        self.powered_off = True

    def files(self, suffixes: tuple[str, ...]) -> list[tuple[str, int]]:
        """(path, size) of every non-empty file whose name ends with one of ``suffixes``,
        by path."""
        return [
            (key, len(f.data))
            for key, f in sorted(self._files.items())
            if f.data and key.endswith(suffixes)
        ]

    def flip(self, path: str, offset: int, bit: int) -> None:
        """Flip bit ``bit`` of byte ``offset`` of ``path``, as rot on the platter would:
        durable or not, the file keeps its lengths."""
        self._files[path].data[offset] ^= 1 << bit

    def wipe(self) -> None:
        """The disks are replaced by empty ones (their directories stay, empty)."""
        self._files.clear()
        self._indexes.clear()
        self._locks.clear()
        for names in self._dirs.values():
            names.clear()
        for d in list(self._dirs):
            parent = os.path.dirname(d)
            if parent in self._dirs:
                self._dirs[parent].add(os.path.basename(d))

    # -- the Disk interface -------------------------------------------------------------------

    def open_append(self, path: Path) -> AppendOnlyFile:
        key = str(path)
        f = self._files.get(key)
        if f is None:
            self._parent(key)
            f = self._files[key] = MemFile()
            self._dirs[os.path.dirname(key)].add(os.path.basename(key))
        return SimFile(self, path, f)

    def _parent(self, key: str) -> None:
        if os.path.dirname(key) not in self._dirs:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), key)

    def _drop(self, key: str) -> None:
        del self._files[key]
        names = self._dirs.get(os.path.dirname(key))
        if names is not None:
            names.discard(os.path.basename(key))

    def listdir(self, directory: Path) -> list[str]:
        names = self._dirs.get(str(directory))
        if names is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(directory))
        return sorted(names)

    def read(self, path: Path) -> bytes:
        f = self._files.get(str(path))
        if f is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        return bytes(f.data)

    def write_atomic(self, path: Path, data: bytes) -> None:
        key = str(path)
        self._parent(key)
        self._files[key] = MemFile(data, len(data))
        self._dirs[os.path.dirname(key)].add(os.path.basename(key))

    def truncate(self, path: Path, size: int) -> None:
        f = self._files.get(str(path))
        if f is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        del f.data[size:]
        f.durable = len(f.data)

    def unlink(self, path: Path) -> None:
        if str(path) in self._files:
            self._drop(str(path))

    def mkdir(self, path: Path) -> None:
        made = []
        d = path
        while str(d) not in self._dirs:
            self._dirs[str(d)] = set()
            made.append(d)
            if d.parent == d:
                break
            d = d.parent
        for d in made:
            if d.parent != d:
                self._dirs[str(d.parent)].add(d.name)

    def exists(self, path: Path) -> bool:
        key = str(path)
        if key in self._files or key in self._dirs:
            return True
        return os.path.basename(key) == INDEX_NAME and os.path.dirname(key) in self._indexes

    def size(self, path: Path) -> int:
        f = self._files.get(str(path))
        if f is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        return len(f.data)

    def resolve(self, path: Path) -> Path:
        return path

    def lock(self, directory: Path) -> Held:
        key = str(directory)
        if key in self._locks:
            raise DirLockedError(directory, "another simulated bookie", in_this_process=True)
        self._locks.add(key)
        self.powered_off = False  # a bookie boots on these disks
        return _Held(self, key)

    def has_index(self, path: Path) -> bool:
        return str(path) in self._indexes

    def open_index(self, path: Path, *, create: bool) -> KeyValueStore:
        key = str(path)
        store = self._indexes.get(key)
        if store is not None:
            return store.reopen()
        if not create:
            raise damaged_index(path, "its store is missing")
        self.mkdir(path)
        store = self._indexes[key] = MemoryKV()
        self._dirs[key].add(INDEX_NAME)
        return store.reopen()

    # -- for tests and traces -----------------------------------------------------------------

    def durable_bytes(self, path: Path) -> int:
        return self._files[str(path)].durable
