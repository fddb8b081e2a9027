"""ZooKeeperMetadataStore: the metadata store for clusters shared between processes.

ZooKeeper already is the tree this interface describes: node versions are the
``stat.version`` compare-and-swap uses, ephemeral nodes are real ones (they
belong to the client session), and ``session()`` opens a connection of its own.

Paths are prefixed with ``chroot`` by this class rather than by kazoo's chroot
support, so that the chroot can be created on first use and ``children("/")``
can hide ZooKeeper's own ``/zookeeper`` node when the chroot is the root.

Differences from the local stores, inherent to ZooKeeper: parents a ``create``
implies become real (empty) nodes, so they exist for ``get`` and cannot be
``create``d afterwards; and ephemeral nodes cannot have children.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.exceptions import NodeExistsError as KazooNodeExistsError
from kazoo.exceptions import NoNodeError as KazooNoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult

from embedlog.errors import MetadataError, MetadataUnavailableError
from embedlog.metadata.memory import normalize
from embedlog.metadata.store import (
    ANY_VERSION,
    DEFAULT_METADATA_TIMEOUT,
    MetadataStore,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
)
from embedlog.metadata.zk_expire import expire_session
from embedlog.metadata.zk_outage import OutageLog, bound_handshake, reconnect_retry
from embedlog.stopsignals import to_main_thread

log = logging.getLogger(__name__)

DEFAULT_CHROOT = "/embedlog"
_RESERVED = "zookeeper"  # ZooKeeper's own subtree under "/"
# A request sent on a live connection gets at least this long for its answer, even when
# the caller's patience is spent (a stopping bookie): a dead connection fails it sooner.
ANSWER_GRACE = 2.0
# The connection is lost or the session expired: a read is sent again once kazoo is back.
_RESEND = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


def _normalize_chroot(chroot: str) -> str:
    chroot = normalize(chroot or "/")
    return "" if chroot == "/" else chroot


@contextlib.contextmanager
def _mapped(path: str) -> Iterator[None]:
    """Turn kazoo's exceptions into the MetadataStore ones."""
    try:
        yield
    except KazooNoNodeError:
        raise NoNodeError(f"{path} does not exist") from None
    except KazooNodeExistsError:
        raise NodeExistsError(f"{path} exists") from None
    except BadVersionError:
        raise MetadataVersionError(f"{path}: version changed") from None
    except KazooException as exc:
        # ConnectionLoss, SessionExpired, ...: a write's outcome is unknown.
        raise MetadataError(f"ZooKeeper {type(exc).__name__} on {path}: {exc}") from exc


RETRY, GONE = "retry", "gone"


def create_if_verdict(results: Sequence[object], parents: int) -> Exception | str | None:
    """What the results of ``create_if``'s multi-op (the check, ``parents`` creates of
    missing parents, the node's create) mean: None, the node was made; RETRY, a parent
    was made or removed between the look at the parents and the multi-op; GONE, the
    node it depends on does not exist; else the error to raise. Only those two races are
    tried again: any other error (no permission, a quota) would fail every time.

    The first failing operation gives the reason; those before it come back as
    RolledBackError, those after it with errors of their own."""
    failure = next(
        (
            (i, r)
            for i, r in enumerate(results)
            if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ),
        None,
    )
    if failure is None:
        return None
    at, error = failure
    raced = isinstance(error, KazooNodeExistsError | KazooNoNodeError)
    if 0 < at <= parents and raced:
        return RETRY
    if at == parents + 1 and isinstance(error, KazooNoNodeError):
        return RETRY
    if at == 0 and isinstance(error, KazooNoNodeError):
        return GONE
    return error


class ZooKeeperMetadataStore(MetadataStore):
    # Every call is a network round trip.
    blocking_io = True

    def __init__(
        self,
        hosts: str,
        chroot: str = DEFAULT_CHROOT,
        *,
        timeout: float = 10.0,
        metadata_timeout: float = DEFAULT_METADATA_TIMEOUT,
        create_chroot: bool = True,
    ) -> None:
        """Connect to ``hosts`` ("host:port[,host:port...]") and keep the tree under ``chroot``.

        ``timeout``: the ZooKeeper session timeout. ``metadata_timeout``: how long the
        connection at start, and then each call, waits for ZooKeeper before raising
        MetadataUnavailableError; meanwhile kazoo reconnects at least every
        ``zk_outage.RECONNECT_BOUND`` seconds. ``create_chroot=False`` (a read-only look)
        leaves a missing chroot missing and raises NoNodeError: a mistyped path then says so
        instead of creating a new tree.
        """
        if not metadata_timeout > 0:
            raise ValueError(f"metadata_timeout must be > 0 seconds, got {metadata_timeout!r}")
        self.hosts = hosts
        self.chroot = _normalize_chroot(chroot)
        self.metadata_timeout = float(metadata_timeout)
        self._timeout = timeout
        self._patience = self.metadata_timeout  # 0 once stop_waiting() was called
        self._lock = threading.Lock()
        self._closed = False
        self._up = threading.Event()  # kazoo is connected
        self._hurry = threading.Event()  # stop_waiting() or close(): waiting calls give up
        self._on_expiry: list[Callable[[], None]] = []
        self._lost = False  # the session expired; a new one is being made
        self._outage = OutageLog(hosts, self.metadata_timeout)
        self._client = self._connect()
        if self.chroot:
            try:
                if create_chroot:
                    self._call(
                        self.chroot, self._client.ensure_path_async, self.chroot, resend=True
                    )
                elif self._call(self.chroot, self._client.exists_async, self.chroot) is None:
                    raise NoNodeError(
                        f"no embedlog cluster at zk://{hosts}{self.chroot}: ZooKeeper has "
                        f"no {self.chroot}; check the URI's path"
                    )
            except BaseException:
                self._client.stop()
                self._client.close()
                raise

    def _connect(self, client_id: tuple[int, bytes] | None = None) -> KazooClient:
        client = bound_handshake(
            KazooClient(
                hosts=self.hosts,
                timeout=self._timeout,
                client_id=client_id,
                connection_retry=reconnect_retry(),
                command_retry=reconnect_retry(),
                logger=self._outage,
            )
        )
        client.add_listener(self._state_changed)
        # KazooClient.start, with kazoo's threads (its connection's, its callbacks')
        # leaving Ctrl-C to the main thread, and the wait for the connection outside that,
        # so that a Ctrl-C ends the wait at once.
        with to_main_thread():
            connected = client.start_async()
        connected.wait(self.metadata_timeout)
        if not client.connected:
            # Stopped, so that it does not retry forever.
            client.stop()
            client.close()
            reason = f" ({self._outage.reason})" if self._outage.reason else ""
            raise MetadataUnavailableError(
                f"cannot reach ZooKeeper at {self.hosts} within {self.metadata_timeout:g}s"
                f"{reason}: start it, or fix the metadata URI (zk://host:port/path)"
            ) from None
        return client

    def _state_changed(self, state: str) -> None:
        """kazoo's connection states, on its own thread (nothing here may block): LOST is
        an expired session; kazoo then connects with a new one."""
        if state == KazooState.CONNECTED:
            self._up.set()
            self._outage.connected()
        else:
            self._up.clear()
            self._outage.disconnected()
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            for callback in list(self._on_expiry):
                try:
                    callback()
                except Exception:
                    log.exception("a session-expiry callback failed")

    def on_session_expired(self, callback: Callable[[], None]) -> None:
        self._on_expiry.append(callback)

    def stop_waiting(self) -> None:
        """From now on no call waits for ZooKeeper: one made while it is unreachable raises
        MetadataUnavailableError at once, and those waiting now give up. For a shutdown
        that must end whatever ZooKeeper is doing (a stopping bookie)."""
        self._patience = 0.0
        self._hurry.set()

    def _full(self, path: str) -> str:
        path = normalize(path)
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    # -- one request, waiting for ZooKeeper at most the metadata timeout ------------------------

    def _call(
        self, path: str, send: Callable[..., IAsyncResult], *args: Any, resend: bool = False
    ) -> Any:
        """``send(*args)``'s answer once kazoo is connected. ``resend``: the request changes
        nothing (or is idempotent), so it is sent again when the connection is lost before
        its answer; a write is sent once (a lost answer leaves its outcome unknown)."""
        deadline = time.monotonic() + self._patience
        while True:
            self._await_connection(path, deadline)
            result = send(*args)
            try:
                with _mapped(path):
                    try:
                        return result.get(
                            timeout=max(deadline - time.monotonic(), 0.0) + ANSWER_GRACE
                        )
                    except _RESEND as exc:
                        if not resend or isinstance(exc, ConnectionClosedError):
                            raise
            except KazooTimeoutError:
                raise self._unavailable(path) from None
            if time.monotonic() >= deadline or self._hurry.is_set():
                raise self._unavailable(path)
            time.sleep(0.05)  # kazoo fails pending requests just before it says it is down

    def _await_connection(self, path: str, deadline: float) -> None:
        while not self._up.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._hurry.is_set():
                raise self._unavailable(path)
            self._up.wait(min(left, 0.1))

    def _unavailable(self, path: str) -> MetadataError:
        if self._closed:
            return MetadataError(f"the ZooKeeper store ({self.hosts}) is closed (on {path})")
        reason = f" ({self._outage.reason})" if self._outage.reason else ""
        waited = (
            f"within {self.metadata_timeout:g}s (the metadata timeout)"
            if self._patience
            else "(this store is stopping: it does not wait)"
        )
        return MetadataUnavailableError(
            f"ZooKeeper at {self.hosts} is unreachable{reason}: no answer on {path} {waited}; "
            "calls succeed again once it answers"
        )

    # -- MetadataStore -------------------------------------------------------------------------

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        create = functools.partial(self._client.create_async, ephemeral=ephemeral, makepath=True)
        self._call(path, create, self._full(path), bytes(data))
        return 0  # ZooKeeper starts every node at version 0

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        full, condition = self._full(path), self._full(exists)
        while True:
            # One multi-op: the check, the missing parents (a multi-op makes none of its
            # own), the node. A parent made or removed meanwhile fails it: look again.
            txn = self._client.transaction()
            txn.check(condition, ANY_VERSION)
            missing = self._missing_parents(path, full)
            for parent in missing:
                txn.create(parent, b"")
            txn.create(full, bytes(data))
            results = self._call(path, txn.commit_async)
            verdict = create_if_verdict(results, len(missing))
            if verdict is None:
                return 0
            if isinstance(verdict, Exception):
                with _mapped(path):
                    raise verdict
            if verdict == GONE:
                raise NoNodeError(f"{exists} does not exist: {path} was not created")
            # RETRY: a parent came or went meanwhile

    def _missing_parents(self, path: str, full: str) -> list[str]:
        """The ancestors of ``full`` below the chroot that do not exist, the top first."""
        out: list[str] = []
        parent = full.rsplit("/", 1)[0]
        top = self.chroot or ""
        while parent and parent != top:
            if self._call(path, self._client.exists_async, parent, resend=True) is not None:
                break
            out.append(parent)
            parent = parent.rsplit("/", 1)[0]
        return out[::-1]

    def get(self, path: str) -> tuple[bytes, int]:
        data, stat = self._call(path, self._client.get_async, self._full(path), resend=True)
        return bytes(data), int(stat.version)

    def sync(self, path: str) -> None:
        self._call(path, self._client.sync_async, self._full(path), resend=True)

    def held_by_another_session(self, path: str) -> bool:
        stat = self._call(path, self._client.exists_async, self._full(path), resend=True)
        mine = self._client.client_id
        return stat is not None and (mine is None or stat.ephemeralOwner != mine[0])

    def set(self, path: str, data: bytes, version: int) -> int:
        stat = self._call(path, self._client.set_async, self._full(path), bytes(data), version)
        return int(stat.version)

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        full = self._full(path)
        while True:
            doomed = self._descendants(path, full)
            if not doomed:
                self._call(path, self._client.delete_async, full, version)
                return
            # One multi-op, children first: the subtree goes atomically, and the
            # version check on the node itself decides whether anything goes.
            txn = self._client.transaction()
            for p in doomed:
                txn.delete(p)
            txn.delete(full, version=version)
            results = self._call(path, txn.commit_async)
            failures = [
                r
                for r in results
                if isinstance(r, Exception) and not isinstance(r, RolledBackError)
            ]
            failure = failures[0] if failures else None
            if failure is None:
                return
            if isinstance(failure, NotEmptyError | KazooNoNodeError) and not (
                isinstance(failure, KazooNoNodeError) and results[-1] is failure
            ):
                # The subtree changed under us (a child came or went): list it again.
                continue
            with _mapped(path):
                raise failure

    def _descendants(self, path: str, full: str) -> list[str]:
        """Every node below ``full``, deepest first (the order a multi-op can delete them)."""
        out: list[str] = []
        for name in self._call(path, self._client.get_children_async, full, resend=True):
            child = f"{full}/{name}" if full != "/" else f"/{name}"
            if full == "/" and name == _RESERVED:
                continue
            out.extend(self._descendants(path, child))
            out.append(child)
        return out

    def children(self, path: str) -> list[str]:
        full = self._full(path)
        try:
            names = self._call(path, self._client.get_children_async, full, resend=True)
        except NoNodeError:
            return []
        if full == "/":
            names = [n for n in names if n != _RESERVED]
        return sorted(names)

    def session(self) -> ZooKeeperSession:
        return ZooKeeperSession(
            self.hosts,
            self.chroot or "/",
            timeout=self._timeout,
            metadata_timeout=self.metadata_timeout,
        )

    def close(self) -> None:
        """Close the connection; ZooKeeper removes this session's ephemeral nodes at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._hurry.set()
        self._client.stop()
        self._client.close()
        self._outage.closed()

    def __enter__(self) -> ZooKeeperMetadataStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ZooKeeperSession(ZooKeeperMetadataStore):
    """A store with a ZooKeeper session (connection) of its own, e.g. a bookie's registration."""

    def expire(self) -> None:
        """End the session abruptly, as when its process crashes and ZooKeeper times it out.

        Waiting out the session timeout would make every crash test slow, so the
        session is expired the way ZooKeeper's own tests do it: a second
        connection attaches to the same session id and closes it. The server
        removes the ephemerals at once and the original client sees an expired
        session, not a polite close.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        original = self._client
        try:
            session = original.client_id
            if session is not None:
                expire_session(self.hosts, session, self._timeout, self.metadata_timeout)
        finally:
            # If stealing failed, this clean close still removes the ephemerals.
            original.stop()
            original.close()
            self._outage.closed()

    @property
    def session_id(self) -> tuple[int, bytes] | None:
        """ZooKeeper's (session id, password) of this session, for ``expire_session``."""
        client_id = self._client.client_id
        return None if client_id is None else (int(client_id[0]), bytes(client_id[1]))


__all__ = ["DEFAULT_CHROOT", "ZooKeeperMetadataStore", "ZooKeeperSession", "expire_session"]
