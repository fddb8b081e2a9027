"""The auditor as a daemon: the BP-34 check (and, by default, re-replication) every interval.

BP-34 asks for a checker that "must run regularly giving the confidence that the
cluster is in good state". ``PeriodicAuditor`` runs one pass at start and then
one every ``interval`` seconds in a thread of its own, until stopped:

    with PeriodicAuditor.for_cluster(cluster, interval=600) as auditor:
        ...                              # auditor.last, auditor.passes, auditor.errors

A pass is ``Replicator.run()`` (check, then repair what it finds), or
``MetadataChecker.run()`` with ``repair=False``. A pass that fails (the metadata
store unreachable, say) is logged and counted, and the next one runs on
schedule: the daemon never dies of one bad pass. Run one auditor per cluster;
two would repair the same ledgers concurrently (safe, since every metadata
change is a compare-and-swap, but wasted work).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from embedlog.auditor.checker import MetadataChecker, Report
from embedlog.auditor.replication import ReplicationResult, Replicator
from embedlog.metadata.client import MetadataClient
from embedlog.runtime import Runtime
from embedlog.stopsignals import to_main_thread
from embedlog.transport.base import Transport

log = logging.getLogger(__name__)

Outcome = Report | ReplicationResult


class PeriodicAuditor:
    def __init__(
        self,
        metadata: MetadataClient,
        transport: Transport,
        runtime: Runtime,
        *,
        interval: float,
        repair: bool = True,
        on_pass: Callable[[Outcome], None] | None = None,
        **options: Any,
    ) -> None:
        """``options`` go to the Replicator (or, with ``repair=False``, the checker)."""
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.interval = interval
        self.repair = repair
        self.on_pass = on_pass
        self._pass: Callable[[], Outcome]
        if repair:
            self._pass = Replicator(metadata, transport, runtime, **options).run
        else:
            self._pass = MetadataChecker(metadata, transport, runtime, **options).run
        self.passes = 0
        self.errors = 0
        self.last: Outcome | None = None
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_cluster(cls, cluster: Any, **options: Any) -> PeriodicAuditor:
        """An auditor of a LocalCluster (``options`` as for the constructor)."""
        return cls(cluster.metadata, cluster.transport, cluster.runtime, **options)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> PeriodicAuditor:
        if self._thread is not None:
            raise RuntimeError("this auditor was already started")
        self._thread = threading.Thread(target=self._loop, name="embedlog-auditor", daemon=True)
        with to_main_thread():
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the pass under way (if any) ends."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_for_passes(self, count: int, timeout: float | None = None) -> bool:
        """Wait until ``count`` passes (failed ones included) have ended; False on timeout."""
        with self._done:
            return self._done.wait_for(lambda: self.passes + self.errors >= count, timeout)

    def run_once(self) -> Outcome:
        """One pass now, in the caller's thread."""
        outcome = self._pass()
        log.info("auditor pass: %s", outcome.summary())
        return outcome

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                outcome = self.run_once()
            except Exception as exc:  # one bad pass must not end the daemon
                log.exception("auditor pass failed; the next runs in %.0fs", self.interval)
                with self._done:
                    self.errors += 1
                    self.last_error = exc
                    self._done.notify_all()
            else:
                with self._done:
                    self.passes += 1
                    self.last = outcome
                    self._done.notify_all()
                if self.on_pass is not None:
                    try:
                        self.on_pass(outcome)
                    except Exception:
                        log.exception("auditor on_pass callback failed")
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def __enter__(self) -> PeriodicAuditor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
