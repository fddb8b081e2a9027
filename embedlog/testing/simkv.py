"""The simulator's index store: a sorted map in memory (the ``KeyValueStore`` of
embedlog/bookie/kv.py).

Every write the real store accepts is synced, so a crash keeps all of them: the map
survives a simulated power cut whole, and only a wiped disk loses it. A scan sees
the store as it was when the scan started, as LevelDB's iterators do.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any


class MemoryKV:
    """One open handle on a store; ``reopen()`` gives another on the same keys (a boot
    after a crash or a stop: the keys outlive the handle, as files outlive a process)."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted
        self.closed = False

    def reopen(self) -> MemoryKV:
        handle = MemoryKV()
        handle._data, handle._keys = self._data, self._keys
        return handle

    def _check(self) -> None:
        if self.closed:
            raise RuntimeError("the index store is closed")

    def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._check()
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        self._check()
        if self._data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def batch(self) -> _MemoryBatch:
        self._check()
        return _MemoryBatch(self)

    def scan(
        self, prefix: bytes, *, reverse: bool = False, include_value: bool = True
    ) -> Iterator[Any]:
        self._check()
        keys = self._keys
        lo = bisect.bisect_left(keys, prefix)
        hi = lo
        while hi < len(keys) and keys[hi].startswith(prefix):
            hi += 1
        chosen = keys[lo:hi]
        if reverse:
            chosen.reverse()
        if not include_value:
            return iter(chosen)
        data = self._data
        return iter([(k, data[k]) for k in chosen])

    def compact_range(self, start: bytes, stop: bytes) -> None:
        self._check()

    def close(self) -> None:
        self.closed = True

    def apply(self, puts: dict[bytes, bytes | None]) -> None:
        """Apply a batch's writes (None: a deletion), in one step."""
        for key, value in puts.items():
            if value is None:
                self.delete(key)
            else:
                self.put(key, value)


class _MemoryBatch:
    def __init__(self, store: MemoryKV) -> None:
        self._store = store
        self._writes: dict[bytes, bytes | None] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self._writes[key] = value

    def delete(self, key: bytes) -> None:
        self._writes[key] = None

    def __enter__(self) -> _MemoryBatch:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._store.apply(self._writes)
