"""The key-value store under a bookie's index: what ``LedgerIndex`` needs of LevelDB.

Every write is durable when it returns (LevelDB's ``sync=True``): a crash keeps every
write the store accepted and none it refused. The real store is ``LevelDBStore``
(embedlog/bookie/leveldb.py); the simulator's is an in-memory sorted map
(embedlog/testing/simkv.py). Read errors are ``BookieIOError``: damage is never taken
for an absent key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol


class Batch(Protocol):
    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...


class KeyValueStore(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def batch(self) -> AbstractContextManager[Batch]:
        """Writes applied together, durably, when the block ends without an exception."""
        ...

    def scan(
        self, prefix: bytes, *, reverse: bool = False, include_value: bool = True
    ) -> Iterator[Any]:
        """The keys starting with ``prefix`` in order (or reversed): (key, value) pairs, or
        keys alone without ``include_value``. It sees the store as it was when it started."""
        ...

    def compact_range(self, start: bytes, stop: bytes) -> None: ...

    def close(self) -> None: ...
