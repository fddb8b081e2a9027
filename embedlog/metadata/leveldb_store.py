"""LevelDBMetadataStore: the embedded, durable default metadata store of a LocalCluster.

Semantics are MemoryMetadataStore's (versions, compare-and-swap, implied
parents, subtree delete, sorted children), kept on disk with LevelDB (embedlog/leveldb.py) so a
cluster restarted over the same ``data_dir`` finds its ledgers again.

Layout of the LevelDB keyspace:

    b"n" + path   ->  version (8 bytes, big-endian) + data     every node
    b"e" + path   ->  b""                                      ephemeral marker

One store object at a time may have the directory open: the store holds a lock
of its own on it (embedlog/dirlock.py) for its whole lifetime, taken before
LevelDB is touched, refusing a second open in this process and any open by
another process. A lock protecting read-modify-write cycles inside this object
is then enough for compare-and-swap.
Every write is synced: metadata is the record of which ledgers exist and how
they were closed, and losing an acknowledged close on a power cut would let a
later reader see a different end of the ledger.

Ephemeral nodes live only as long as the session that made them, but that
session dies with the process, while the disk survives it. So ephemerals are
marked, and the markers left over by an earlier holder (which no session can
still own, given the lock) are swept when the store is opened.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

from embedlog import leveldb
from embedlog.dirlock import DirLock, DirLockedError
from embedlog.errors import MetadataError
from embedlog.metadata.memory import normalize
from embedlog.metadata.store import (
    ANY_VERSION,
    MetadataStore,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
    SessionView,
)
from embedlog.readcache import ReadCache

_NODE = b"n"
_EPHEMERAL = b"e"
_VERSION = struct.Struct(">q")
_SYNC = {"sync": True}
# How many nodes the store keeps as last read (the ledgers that followers re-read).
KEPT_NODES = 1024


class MetadataStoreInUseError(MetadataError):
    """The embedded metadata store is open already (in this process or another one)."""


def _node_key(path: str) -> bytes:
    return _NODE + path.encode()


def _ephemeral_key(path: str) -> bytes:
    return _EPHEMERAL + path.encode()


def _child_prefix(path: str) -> str:
    return "/" if path == "/" else path + "/"


class LevelDBMetadataStore(MetadataStore):
    # Synced writes wait for the disk: an asyncio caller should use a thread. A read is
    # one LevelDB lookup in this process (a get, or a walk of a few keys), shorter than
    # the thread hop it would take (a follower reads the metadata after every LAC).
    blocking_io = True

    @property
    def blocking_reads(self) -> bool:
        return False

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        # Reads take no lock (a LevelDB get is atomic), but LevelDB must not be closed under
        # one: closing waits for the reads under way (one that met the close in the middle
        # crashed the process with a segfault), and refuses the ones after it.
        self._reads = 0
        self._reads_done = threading.Condition(threading.Lock())
        self._closing = False
        self._last_session = 0  # 0 is the store's own session
        # (data, version) of the nodes read lately. This object alone has the directory
        # open (the lock below), so every change goes through it and forgets the node
        # (``forget``): a read of a kept node needs no LevelDB get, which lets go of the
        # GIL and waits for it back (a follower re-reads its stream's metadata after
        # every LAC).
        self._kept: ReadCache[str, tuple[bytes, int]] = ReadCache(KEPT_NODES)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MetadataError(f"cannot create metadata store at {self.path}: {exc}") from exc
        try:
            # Before LevelDB is touched: a refused LevelDB open drops the process's LevelDB
            # lock (see embedlog/dirlock.py), and another process could then open it too.
            self._dir_lock = DirLock(self.path)
        except DirLockedError as exc:
            raise _in_use(self.path, exc) from None
        except OSError as exc:
            raise MetadataError(f"cannot lock metadata store at {self.path}: {exc}") from exc
        try:
            self._db = leveldb.DB(str(self.path), create_if_missing=True)
            # No session outlives the previous holder: ephemerals on disk are leftovers.
            self._sweep_ephemerals()
        except leveldb.Error as exc:
            self._dir_lock.release()
            detail = exc.args[0].decode(errors="replace") if exc.args else str(exc)
            if detail.startswith("IO error: lock "):  # opened without embedlog's lock
                raise MetadataStoreInUseError(
                    f"metadata store at {self.path} is open in LevelDB by something that does "
                    f"not take embedlog's lock ({detail}); stop it first"
                ) from exc
            raise MetadataError(f"cannot open metadata store at {self.path}: {detail}") from exc
        except BaseException:
            self._dir_lock.release()
            raise

    def _sweep_ephemerals(self) -> None:
        """Delete every ephemeral node, whichever session made it."""
        stale = [
            key[len(_EPHEMERAL) :].decode()
            for key in self._db.iterator(prefix=_EPHEMERAL, include_value=False)
        ]
        if not stale:
            return
        with self._db.write_batch(**_SYNC) as batch:
            for path in stale:
                batch.delete(_ephemeral_key(path))
                batch.delete(_node_key(path))

    # -- helpers -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        with self._reads_done:
            if self._closing:
                raise RuntimeError(f"metadata store at {self.path} is closed")
            self._reads += 1
        try:
            yield
        finally:
            with self._reads_done:
                self._reads -= 1
                if not self._reads:
                    self._reads_done.notify_all()

    def _read(self, path: str) -> tuple[bytes, int] | None:
        with self._reading():
            raw = self._db.get(_node_key(path))
        if raw is None:
            return None
        return raw[_VERSION.size :], _VERSION.unpack_from(raw)[0]

    def _check(self, path: str, version: int) -> int:
        """The current version of ``path``, after checking it against the expected one."""
        node = self._read(path)
        if node is None:
            raise NoNodeError(f"{path} does not exist")
        current = node[1]
        if version != ANY_VERSION and version != current:
            raise MetadataVersionError(f"{path}: version {version} != {current}")
        return current

    # -- MetadataStore -------------------------------------------------------------------------

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        # Ephemerals made directly on the store belong to the store's own session (0).
        return self._create(normalize(path), data, 0 if ephemeral else None)

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        return self._create(normalize(path), data, None, normalize(exists))

    def _create(self, path: str, data: bytes, owner: int | None, exists: str | None = None) -> int:
        with self._lock:
            if exists is not None and self._db.get(_node_key(exists)) is None:
                raise NoNodeError(f"{exists} does not exist: {path} was not created")
            if self._db.get(_node_key(path)) is not None:
                raise NodeExistsError(f"{path} exists")
            try:
                with self._db.write_batch(**_SYNC) as batch:
                    batch.put(_node_key(path), _VERSION.pack(0) + bytes(data))
                    if owner is not None:
                        batch.put(_ephemeral_key(path), _VERSION.pack(owner))
            finally:
                self._kept.forget((path,))
        return 0

    def get(self, path: str) -> tuple[bytes, int]:
        path = normalize(path)
        kept = self._kept.get(path)
        if kept is not None and not self._closing:
            return kept
        ticket = self._kept.ticket()
        node = self._read(path)  # a single LevelDB get is atomic: no lock needed
        if node is None:
            raise NoNodeError(f"{path} does not exist")
        self._kept.keep(path, node, ticket)
        return node

    def set(self, path: str, data: bytes, version: int) -> int:
        path = normalize(path)
        with self._lock:
            new = self._check(path, version) + 1
            try:
                self._db.put(_node_key(path), _VERSION.pack(new) + bytes(data), **_SYNC)
            finally:
                self._kept.forget((path,))
            return new

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        path = normalize(path)
        with self._lock:
            self._check(path, version)
            doomed = [path]
            prefix = _node_key(_child_prefix(path))
            doomed += [
                key[len(_NODE) :].decode()
                for key in self._db.iterator(prefix=prefix, include_value=False)
            ]
            # One batch: a crash never leaves half a subtree.
            try:
                with self._db.write_batch(**_SYNC) as batch:
                    for p in doomed:
                        batch.delete(_node_key(p))
                        batch.delete(_ephemeral_key(p))
            finally:
                self._kept.forget(doomed)

    def sync(self, path: str) -> None:
        """Reads are served by this process from the store itself: never behind."""

    def held_by_another_session(self, path: str) -> bool:
        return self.exists(path)  # the store itself has no session: every node is another's

    def children(self, path: str) -> list[str]:
        path = normalize(path)
        prefix = _node_key(_child_prefix(path))
        names: list[str] = []
        # Walk the sorted keys, jumping over each child's own subtree instead of
        # reading every descendant: /ledgers may hold many nodes.
        with self._reading(), self._db.iterator(prefix=prefix, include_value=False) as it:
            for key in it:
                name, sep, _ = key[len(prefix) :].partition(b"/")
                names.append(name.decode())
                if sep:
                    # b"0" is the byte after b"/": seek past every key under name/.
                    it.seek(prefix + name + b"0")
        return sorted(set(names))

    # -- sessions ------------------------------------------------------------------------------

    def session(self) -> MetadataStore:
        with self._lock:
            self._last_session += 1
            return _LevelDBSession(self, self._last_session)

    def _end_session(self, owner: int, paths: builtins.set[str]) -> None:
        """Delete the ephemerals that ``owner`` made and still owns.

        The owner is checked on disk, not just remembered: after another session
        deleted a node and made its own at the same path (a bookie registering
        again), ending the old session must leave the new node alone.
        """
        with self._lock:
            if self._db.closed:
                return  # close() already removed every ephemeral
            mine = _VERSION.pack(owner)
            try:
                with self._db.write_batch(**_SYNC) as batch:
                    for path in paths:
                        if self._db.get(_ephemeral_key(path)) == mine:
                            batch.delete(_ephemeral_key(path))
                            batch.delete(_node_key(path))
            finally:
                self._kept.forget(paths)

    def close(self) -> None:
        """Release the database. Every session ends with it, so every ephemeral node vanishes."""
        with self._lock:
            if self._db.closed:
                return
            with self._reads_done:
                self._closing = True
                self._reads_done.wait_for(lambda: not self._reads)
            try:
                self._sweep_ephemerals()
            finally:
                self._kept.forget(None)
                self._db.close()
                self._dir_lock.release()  # only now: LevelDB has let go of every file

    @property
    def closed(self) -> bool:
        return bool(self._db.closed)

    def __enter__(self) -> LevelDBMetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_use(path: Path, exc: DirLockedError) -> MetadataStoreInUseError:
    if exc.in_this_process:
        return MetadataStoreInUseError(
            f"metadata store at {path} is already open in this process ({exc.holder}); "
            "use that cluster's clients (cluster.client()) or stop it first: one LocalCluster "
            "or connect() at a time may open an embedded store"
        )
    return MetadataStoreInUseError(
        f"metadata store at {path} is in use by another process ({exc.holder}); stop it "
        "first, or use a ZooKeeper metadata_uri to share a cluster between processes"
    )


class _LevelDBSession(SessionView):
    """A session on a LevelDBMetadataStore: its ephemerals are owned by its id on disk."""

    _inner: LevelDBMetadataStore

    def __init__(self, inner: LevelDBMetadataStore, session_id: int) -> None:
        super().__init__(inner)
        self.session_id = session_id

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        path = normalize(path)
        version = self._inner._create(path, data, self.session_id if ephemeral else None)
        if ephemeral:
            self._ephemeral.add(path)
        return version

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        path = normalize(path)
        self._inner.delete(path, version)
        self._ephemeral.discard(path)

    def session(self) -> MetadataStore:
        return self._inner.session()

    def held_by_another_session(self, path: str) -> bool:
        return normalize(path) not in self._ephemeral and self._inner.exists(path)

    def _end(self) -> None:
        paths, self._ephemeral = self._ephemeral, set()
        self._inner._end_session(self.session_id, paths)


__all__ = ["LevelDBMetadataStore", "MetadataStoreInUseError"]
