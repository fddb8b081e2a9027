"""Append-only files that know which of their bytes are durable.

Every file a bookie appends to (journal, entry logs) tracks the length that an
fsync has made durable. ``crash()`` throws away everything past it, exactly as
a power cut would: that is the crash model the BP-46 tests depend on.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class AppendFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        existed = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        # A file we just created is not durable until its first fsync: after a crash
        # it is deleted, as its directory entry would be.
        self.synced = self.size if existed else -1
        self.lock = threading.Lock()  # writer thread vs crash()
        self.crashed = False

    @property
    def size(self) -> int:
        """Where the next append starts."""
        if self._size < 0 and self._fd >= 0:  # an append failed part way: where does it end?
            self._size = os.fstat(self._fd).st_size
        return self._size

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; returns the offset it starts at (not yet durable)."""
        return self.append_parts([data])

    def append_parts(self, parts: list[bytes]) -> int:
        """Write ``parts`` one after the other at the end (gathered: no joined copy of a
        group that can be tens of MB); returns the offset they start at."""
        with self.lock:
            if self.crashed:
                raise OSError(f"{self.path}: bookie crashed")
            offset = self.size
            try:
                for start in range(0, len(parts), _IOV_MAX):
                    group = parts[start : start + _IOV_MAX]
                    size = sum(map(len, group))
                    written = os.writev(self._fd, group)
                    if written < size:  # a short write: the rest one piece at a time
                        view = memoryview(b"".join(group))[written:]
                        while view:
                            view = view[os.write(self._fd, view) :]
                    self._size += size
            except BaseException:
                # Some of it may be in the file (a disk that filled up mid-write): the next
                # append (a flush retrying) must not count on the offsets it thinks it has.
                self._size = -1
                raise
            return offset

    def sync(self) -> None:
        with self.lock:
            if self.crashed:
                raise OSError(f"{self.path}: bookie crashed")
            os.fsync(self._fd)
            if self.synced < 0:  # a new file: make its directory entry durable too
                dfd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            self.synced = self.size

    def pread(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def close(self) -> None:
        with self.lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def crash(self) -> None:
        """Lose every byte that no fsync covered."""
        with self.lock:
            self.crashed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self.synced < 0:
                self.path.unlink(missing_ok=True)
            elif self.path.exists() and self.path.stat().st_size > self.synced:
                os.truncate(self.path, self.synced)
