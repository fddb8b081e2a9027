"""Append-only files that know which of their bytes are durable.

Every file a bookie appends to (journal, entry logs) tracks the length that an
fsync has made durable. ``crash()`` throws away everything past it, exactly as
a power cut would: that is the crash model the BP-46 tests depend on.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


class AppendFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        existed = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        # A file we just created is not durable until its first fsync: after a crash
        # it is deleted, as its directory entry would be.
        self.synced = self.size if existed else -1
        self.lock = threading.Lock()  # writer thread vs crash()
        self.crashed = False

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; returns the offset it starts at (not yet durable)."""
        with self.lock:
            if self.crashed:
                raise OSError(f"{self.path}: bookie crashed")
            offset = self.size
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self.size += len(data)
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
