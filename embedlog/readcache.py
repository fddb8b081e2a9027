"""Values read from a store, kept until a write to the store changes them.

A read and a write can run at once (flushes commit from a worker thread, metadata is
written from any thread), so a read that began before a write and ended after it may
hold the value the write replaced. Such a read is not kept: every write counts itself
(``forget``), and ``keep`` only stores a value read under the count it began with
(``ticket``).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadCache(Generic[K, V]):
    def __init__(self, bound: int | None = None) -> None:
        """``bound``: the most values kept (the oldest kept goes first); None, no bound."""
        self._kept: dict[K, V] = {}
        self._bound = bound
        self._writes = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key``, or None."""
        return self._kept.get(key)

    def ticket(self) -> int:
        """Taken before a read of the store: ``keep`` needs it."""
        return self._writes

    def keep(self, key: K, value: V, ticket: int) -> None:
        """Keep what a read that took ``ticket`` found, unless a write came since."""
        with self._lock:
            if self._writes != ticket:
                return
            self._kept[key] = value
            if self._bound is not None and len(self._kept) > self._bound:
                del self._kept[next(iter(self._kept))]

    def forget(self, keys: Iterable[K] | None) -> None:
        """After a write (done or failed) that changed ``keys`` (None: it may have
        changed any)."""
        with self._lock:
            self._writes += 1
            if keys is None:
                self._kept.clear()
                return
            for key in keys:
                self._kept.pop(key, None)
