"""The metadata store interface: a small, ZooKeeper-shaped key/value tree.

Paths look like ``/ledgers/00000000000000000001``. Every node has a version
that ``set``/``delete`` compare against (compare-and-swap): this single
primitive is what makes ledger state changes (ensemble change, recovery,
close) safe between competing clients. Implementations: in-memory, embedded
LevelDB (the default for LocalCluster) and ZooKeeper.

The calls are blocking. ``blocking_io`` tells the asyncio client whether a
call may block long enough that it should run in a thread, ``blocking_reads`` whether
a read may (the embedded store's writes wait for the disk, its reads do not).
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from embedlog.errors import MetadataError, MetadataVersionError


class NoNodeError(MetadataError):
    """The metadata node does not exist."""


class NodeExistsError(MetadataError):
    """The metadata node already exists."""


ANY_VERSION = -1

# Seconds a store that talks to a server (ZooKeeper) waits for it: to connect, then in
# each call. Here, beside the interface, because both open_store (uri.py) and the
# ZooKeeper store default to it.
DEFAULT_METADATA_TIMEOUT = 10.0


class MetadataStore(abc.ABC):
    blocking_io: bool = False

    @property
    def blocking_reads(self) -> bool:
        """Whether a read (``get``, ``children``) may block long enough to belong in a
        thread too: as ``blocking_io`` unless the store knows its reads are local lookups."""
        return self.blocking_io

    @abc.abstractmethod
    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        """Create ``path`` (parents implied) and return its version (0).

        Raises NodeExistsError if it exists. Ephemeral nodes disappear when the
        store session that made them ends (``close``/``expire_session``).
        """

    @abc.abstractmethod
    def create_if(self, path: str, data: bytes, exists: str) -> int:
        """Create ``path`` (parents implied, not ephemeral) only while ``exists`` exists,
        in one step: a delete of ``exists`` lands wholly before it (NoNodeError, nothing
        made) or after it. NodeExistsError if ``path`` exists.

        A write beside a node that another client may delete (a stream's cursor beside
        its ledger) made this way cannot outlive the delete, whatever becomes of the
        writer after it (an error, a crash) before it could look again and clean up.
        """

    @abc.abstractmethod
    def get(self, path: str) -> tuple[bytes, int]:
        """The data and version of ``path``; NoNodeError if absent."""

    @abc.abstractmethod
    def set(self, path: str, data: bytes, version: int) -> int:
        """Replace ``path`` if its version is ``version`` (ANY_VERSION: always).

        Returns the new version; MetadataVersionError on a mismatch, NoNodeError if absent.
        """

    @abc.abstractmethod
    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        """Delete ``path`` (compare-and-swap on version); NoNodeError if absent."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names of the direct children of ``path``, sorted; [] if none."""

    @abc.abstractmethod
    def sync(self, path: str) -> None:
        """Make this connection's next reads see every change completed anywhere before the
        call. ZooKeeper serves reads from the server a client is connected to, which may
        lag the others; a read whose answer decides what a bookie protects or drops (BP-46
        phase one, garbage collection) syncs first. Abstract, so that every store says
        whether its reads can lag."""

    @abc.abstractmethod
    def held_by_another_session(self, path: str) -> bool:
        """Whether ``path`` exists and is not an ephemeral node of this session: a bookie
        registering again after a session expiry leaves such a node alone (a second
        process with its id holds it)."""

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except NoNodeError:
            return False
        return True

    def close(self) -> None:
        """Release the store (ends this session: its ephemeral nodes vanish)."""

    def on_session_expired(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread, so it should only hand the news on) each time
        this session expires while the store stays in use: a new session takes its place,
        and the ephemeral nodes made through the old one are gone. A bookie registers
        again then. Stores without sessions of their own never call it."""

    def stop_waiting(self) -> None:
        """From now on no call waits for an unreachable store: for a shutdown that must end
        whatever the store is doing (a stopping bookie). Local stores never wait."""

    def session(self) -> MetadataStore:
        """A view of this store with a session of its own.

        Ephemeral nodes created through the view vanish when it is closed (or
        ``expire()``d, which is what a crashed bookie's session does). ZooKeeper
        implements this with a separate connection; local stores track the paths.
        """
        return SessionView(self)


class SessionView(MetadataStore):
    """A session on a shared local store: ephemeral nodes are tracked and removed on close.

    Ownership is recorded per store, so an old session that ends after a new one
    re-created the same node (a bookie re-registering) leaves the new node alone.
    """

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self._ephemeral: set[str] = set()
        self.blocking_io = inner.blocking_io
        # Who owns each ephemeral node, shared by every session on ``inner``. Kept on the
        # store itself: a global map from stores to their sessions would keep every store
        # alive through the sessions that point back at it (and with them their bookies).
        owners: dict[str, SessionView] | None = getattr(inner, "_session_owners", None)
        if owners is None:
            owners = {}
            inner._session_owners = owners  # type: ignore[attr-defined]
        self._owners = owners
        self._on_expiry: list[Callable[[], None]] = []

    @property
    def blocking_reads(self) -> bool:
        return self._inner.blocking_reads

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        if not ephemeral:
            return self._inner.create(path, data)
        try:
            version = self._inner.create(path, data)
        except NodeExistsError:
            raise
        except BaseException:
            # An unknown outcome (a connection lost after the server applied it): a node
            # made, it is this session's, and goes when the session ends, as ZooKeeper's
            # ephemeral nodes do. Untracked, it outlived its bookie's crash and kept the
            # operator's cookie fix saying the bookie still runs (simulator, seed 333 of
            # ``unbounded-nojournal-races``).
            if path not in self._owners:
                self._ephemeral.add(path)
                self._owners[path] = self
            raise
        self._ephemeral.add(path)
        self._owners[path] = self
        return version

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        return self._inner.create_if(path, data, exists)

    def get(self, path: str) -> tuple[bytes, int]:
        return self._inner.get(path)

    def set(self, path: str, data: bytes, version: int) -> int:
        return self._inner.set(path, data, version)

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self._inner.delete(path, version)
        self._ephemeral.discard(path)
        self._owners.pop(path, None)  # gone: whoever creates it next owns it

    def children(self, path: str) -> list[str]:
        return self._inner.children(path)

    def sync(self, path: str) -> None:
        self._inner.sync(path)

    def held_by_another_session(self, path: str) -> bool:
        return self._owners.get(path) is not self and self._inner.exists(path)

    def session(self) -> MetadataStore:
        return SessionView(self._inner)

    def on_session_expired(self, callback: Callable[[], None]) -> None:
        self._on_expiry.append(callback)

    def expire(self) -> None:
        """End the session abruptly: its ephemeral nodes vanish, as after a crash or a
        ZooKeeper session expiry. The view stays usable (a new session, as a ZooKeeper
        client that reconnects gets) and says so to ``on_session_expired``'s callbacks."""
        self._end()
        for callback in list(self._on_expiry):
            callback()

    def _end(self) -> None:
        for path in sorted(self._ephemeral):
            if self._owners.get(path) is not self:
                continue  # deleted and re-created by another session since
            del self._owners[path]
            try:
                self._inner.delete(path)
            except NoNodeError:
                pass
        self._ephemeral.clear()

    def close(self) -> None:
        self._end()


__all__ = [
    "ANY_VERSION",
    "MetadataStore",
    "MetadataVersionError",
    "NoNodeError",
    "NodeExistsError",
]
