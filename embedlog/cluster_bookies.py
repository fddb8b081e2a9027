"""The bookies of a LocalCluster that run in this process: boot, pause, stop, crash, wipe.

A mixin of ``LocalCluster`` (embedlog/cluster.py), which holds the cluster's state; a
``ProcessBookies`` (embedlog/process/bookies.py) does the same for bookie processes.
"""

from __future__ import annotations

import shutil
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from embedlog.bookie.bookie import Bookie, BookieState
from embedlog.bookie.config import BookieConfig
from embedlog.client import Client
from embedlog.errors import CookieError
from embedlog.metrics import BookieMetrics
from embedlog.repair_client import repair_clients
from embedlog.transport.server import BookieGoneError, resume_serving

if TYPE_CHECKING:
    from embedlog.metadata.client import MetadataClient
    from embedlog.metadata.store import MetadataStore
    from embedlog.runtime import Runtime
    from embedlog.transport.base import Transport

WIPE_TARGETS = ("journal", "ledgers", "index", "all")


def repair_client_name(bookie_id: str) -> str:
    """Network-fault name of a bookie's repair client, for ``cluster.network.block``."""
    return f"{bookie_id}-repair"


def server_ssl(config: BookieConfig) -> ssl.SSLContext | None:
    """The bookie's TLS context, read from its files at each boot (a renewed certificate
    is served from the next restart on); None without TLS."""
    if not config.tls:
        return None
    from embedlog.transport import tls
    from embedlog.transport.tcp import parse_address

    assert config.tls_cert is not None and config.tls_key is not None
    return tls.server_context(
        config.tls_cert,
        config.tls_key,
        ca=config.tls_ca,
        require_client_cert=config.tls_require_client_cert,
        host=parse_address(config.address)[0] if config.address else "127.0.0.1",
    )


class InProcessBookies:
    """Bookie control for bookies that are objects of this process."""

    # LocalCluster's state, which these methods share with it.
    _lock: threading.RLock
    _bookies: dict[str, Bookie]
    _sessions: dict[str, MetadataStore]
    _known: list[str]
    _failed: dict[str, Exception]
    _bookie_metrics: list[BookieMetrics]
    _store: MetadataStore | None
    _meta: MetadataClient | None
    _transport: Transport | None
    _repair_request_timeout: float

    if TYPE_CHECKING:

        @property
        def runtime(self) -> Runtime: ...

        @property
        def metadata(self) -> MetadataClient: ...

        @property
        def transport(self) -> Transport: ...

        def bookie_config(self, bookie_id: str, **overrides: Any) -> BookieConfig: ...

        def _claim(self, bookie_id: str) -> None: ...

        def running_bookies(self) -> list[str]: ...

    def start_bookie(self, bookie_id: str, **settings: Any) -> None:
        """Boot ``bookie_id``: cookie check, unclean-shutdown check, BP-46 phases.

        ``settings`` override the cluster's bookie settings for this boot only
        (e.g. ``auto_fix_cookies=True`` for one replaced disk).
        """
        with self._lock:
            self._require_known(bookie_id)
            current = self._bookies.get(bookie_id)
            if current is not None and current.state in (BookieState.SERVING, BookieState.BOOTING):
                raise RuntimeError(f"bookie {bookie_id} is already running")
            try:
                self._claim(bookie_id)
            except CookieError as exc:
                self._failed[bookie_id] = exc
                raise
            config = self.bookie_config(bookie_id, **settings)
            assert self._store is not None and self._meta is not None
            session = self._store.session()
            bookie = Bookie(
                config,
                self._meta,
                session,
                client_factory=repair_clients(self._repair_client_factory(bookie_id)),
            )
            self._bookies[bookie_id] = bookie
            self._bookie_metrics.append(bookie.metrics)
            self._sessions[bookie_id] = session
            try:
                self.runtime.run(bookie.start())
            except BaseException as exc:
                self._end_session(bookie_id, clean=True)
                if isinstance(exc, Exception):
                    self._failed[bookie_id] = exc
                raise
            self._failed.pop(bookie_id, None)
            hook = getattr(self._transport, "bookie_started", None)
            if hook is not None:
                hook(bookie_id, bookie, server_ssl(config))

    def _repair_client_factory(self, bookie_id: str) -> Callable[[], Client]:
        """The client a booting bookie's BP-46 repair uses (named ``<bookie>-repair``)."""

        def make() -> Client:
            return Client(
                self.runtime,
                self.metadata,
                self.transport,
                name=repair_client_name(bookie_id),
                request_timeout=self._repair_request_timeout,
            )

        return make

    def wait_repaired(self, bookie_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Block until ``bookie_id``'s BP-46 repair is done; returns its status.

        Raises TimeoutError naming what the repair still waits for.
        """
        deadline = time.monotonic() + timeout
        while True:
            b = self._running(bookie_id)
            if b.wait_repaired_nowait():
                return b.status()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"bookie {bookie_id} still repairing after {timeout}s: {b.status()['repair']}"
                )
            time.sleep(0.02)

    def pause_bookie(self, bookie_id: str) -> None:
        """The bookie stops answering, and loses nothing: what SIGSTOP does to a bookie
        process. Requests sent to it wait, unanswered (their senders time out: an unknown
        outcome), until ``resume_bookie``; then it serves them all, in order. A request it
        was already working on is still answered; its background work (flushes, BP-46
        repair) goes on. Stopping or crashing a paused bookie drops what it held: the
        senders learn that the bookie went away.
        """
        with self._lock:
            bookie = self._running(bookie_id)
            self.runtime.call(bookie.pause_gate.pause)

    def resume_bookie(self, bookie_id: str) -> None:
        """Undo ``pause_bookie``: the bookie serves every request it held, in order. Resuming
        a bookie that is not paused does nothing."""
        with self._lock:
            bookie = self._running(bookie_id)
            self.runtime.call(resume_serving, bookie, bookie.pause_gate)

    def paused_bookies(self) -> list[str]:
        """Running bookies that ``pause_bookie`` paused."""
        return [b for b in self.running_bookies() if self._bookies[b].pause_gate.paused]

    def _drop_held(self, bookie: Bookie, how: str) -> None:
        gone = BookieGoneError(f"bookie {bookie.bookie_id} {how} while paused")
        self.runtime.call(bookie.pause_gate.drop, gone)

    def stop_bookie(self, bookie_id: str) -> None:
        """Clean shutdown: everything is flushed and the unclean-shutdown bit cleared.

        The bookie is stopped and its files released even when that fails (a full disk):
        then BookieIOError says so, and its next boot replays the journal as after a crash.
        """
        with self._lock:
            bookie = self._running(bookie_id)
            self._transport_stopped(bookie_id)
            self._drop_held(bookie, "stopped")
            try:
                self.runtime.run(bookie.stop())
            finally:
                self._end_session(bookie_id, clean=True)

    def crash_bookie(self, bookie_id: str) -> None:
        """Abrupt stop: the bookie loses everything its storage had not made durable."""
        with self._lock:
            bookie = self._running(bookie_id)
            self._transport_stopped(bookie_id)
            self._drop_held(bookie, "crashed")
            self.runtime.call(bookie.crash)
            self._end_session(bookie_id, clean=False)

    def wipe_bookie(self, bookie_id: str, what: str = "all") -> None:
        """Replace a stopped bookie's disk(s) with empty ones."""
        if what not in WIPE_TARGETS:
            raise ValueError(f"what must be one of {WIPE_TARGETS}, got {what!r}")
        with self._lock:
            self._require_known(bookie_id)
            b = self._bookies.get(bookie_id)
            if b is not None and b.state in (BookieState.SERVING, BookieState.BOOTING):
                raise RuntimeError(f"stop or crash bookie {bookie_id} before wiping its disks")
            config = self.bookie_config(bookie_id)
            dirs = {
                "journal": [config.journal_dir],
                "ledgers": [config.ledger_dir],
                "index": [config.index_dir],
                "all": [config.journal_dir, config.ledger_dir, config.index_dir],
            }[what]
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True, exist_ok=True)

    def _transport_stopped(self, bookie_id: str) -> None:
        hook = getattr(self._transport, "bookie_stopped", None)
        if hook is not None:
            hook(bookie_id)

    def _end_session(self, bookie_id: str, *, clean: bool) -> None:
        session = self._sessions.pop(bookie_id, None)
        if session is None:
            return
        expire = getattr(session, "expire", None)
        if not clean and expire is not None:
            expire()
        else:
            session.close()

    def _require_known(self, bookie_id: str) -> None:
        if bookie_id not in self._known:
            raise KeyError(f"unknown bookie {bookie_id!r}; bookies: {self._known}")

    def _running(self, bookie_id: str) -> Bookie:
        self._require_known(bookie_id)
        b = self._bookies.get(bookie_id)
        if b is None or b.state is not BookieState.SERVING:
            raise RuntimeError(f"bookie {bookie_id} is not running")
        return b
