"""Read-only metadata: a store view that refuses every write, and a private copy of an
embedded (LevelDB) store for looking at it without touching it.

LevelDB has no read-only open: opening a database writes a new log and manifest, and
the embedded store also sweeps leftover ephemeral nodes. So a read-only look at an
embedded store copies its directory (small: metadata only) under a shared lock that
keeps writers out while the copy is taken, and opens the copy.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from embedlog.dirlock import LOCK_FILE, DirLockedError, shared_lock
from embedlog.errors import MetadataError
from embedlog.metadata.store import ANY_VERSION, MetadataStore

# Never copied: the locks belong to the original's holders, and LevelDB makes its own.
LOCK_FILES = (LOCK_FILE, "LOCK")


class ReadOnlyMetadataError(MetadataError):
    """A write through a read-only view of the metadata."""


class ReadOnlyStore(MetadataStore):
    """``inner`` for reading; every write raises ReadOnlyMetadataError.

    ``cleanup`` (a directory) is removed when the view is closed: the private copy of
    an embedded store.
    """

    def __init__(self, inner: MetadataStore, cleanup: Path | None = None) -> None:
        self._inner = inner
        self._cleanup = cleanup
        self.blocking_io = inner.blocking_io

    @property
    def blocking_reads(self) -> bool:
        return self._inner.blocking_reads

    def _refuse(self, what: str, path: str) -> ReadOnlyMetadataError:
        return ReadOnlyMetadataError(f"read-only metadata: refusing to {what} {path}")

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        raise self._refuse("create", path)

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        raise self._refuse("create", path)

    def get(self, path: str) -> tuple[bytes, int]:
        return self._inner.get(path)

    def set(self, path: str, data: bytes, version: int) -> int:
        raise self._refuse("change", path)

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        raise self._refuse("delete", path)

    def children(self, path: str) -> list[str]:
        return self._inner.children(path)

    def sync(self, path: str) -> None:
        self._inner.sync(path)

    def held_by_another_session(self, path: str) -> bool:
        return self._inner.held_by_another_session(path)

    def session(self) -> MetadataStore:
        return self

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            if self._cleanup is not None:
                shutil.rmtree(self._cleanup, ignore_errors=True)
                self._cleanup = None


def copy_locked(sources: dict[Path, Path], locked: list[Path]) -> None:
    """Copy each source directory to its target while every ``locked`` directory is held
    with a shared lock (no DirLock holder can start writing during the copy)."""
    import contextlib

    with contextlib.ExitStack() as stack:
        for directory in locked:
            if directory.is_dir():
                stack.enter_context(shared_lock(directory))
        for source, target in sources.items():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(*LOCK_FILES))


def open_leveldb_copy(path: Path) -> ReadOnlyStore:
    """A read-only view of a private copy of the embedded store at ``path``.

    MetadataStoreInUseError-like MetadataError when a process holds the store: a copy
    taken while it writes could be torn, and that process is the one to ask.
    """
    from embedlog.metadata.leveldb_store import LevelDBMetadataStore

    tmp = Path(tempfile.mkdtemp(prefix="embedlog-metadata-copy-"))
    try:
        copy = tmp / "metadata"
        try:
            copy_locked({path: copy}, [path])
        except DirLockedError as exc:
            raise MetadataError(
                f"metadata store at {path} is in use by {exc.holder}: a read-only look needs "
                "it stopped, or use the cluster's --metadata-uri when it shares ZooKeeper"
            ) from None
        return ReadOnlyStore(LevelDBMetadataStore(copy), cleanup=tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


__all__ = [
    "LOCK_FILES",
    "ReadOnlyMetadataError",
    "ReadOnlyStore",
    "copy_locked",
    "open_leveldb_copy",
]
