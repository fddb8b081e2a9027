"""Flushing: the write cache written to the entry logs and the index in the background,
and the bookie read-only while flushes fail.

A flush runs every ``flush_interval`` while there is something to write (a bookie with
nothing to write waits for the next change, then flushes an interval later) and early
when the write cache passes ``write_cache_max_bytes``; after it, the journal before its
checkpoint is removed.
A flush that fails makes the bookie read-only (it refuses adds with EREADONLY) and
keeps the entries in its write cache: they are acknowledged, the journal has them, and
the next flush writes them. Flushes go on, each failure doubling the wait from
``flush_interval`` up to ``flush_retry_max_interval``. When one succeeds, the bookie
registers as writable again, unless something it met says its disk is broken: then it
stays read-only until it is restarted, rather than flip-flop on a failing disk.

The rules are the pure functions and FlushHealth below; the Flusher, a part the Bookie
holds (``Bookie.flusher``), runs them, seeing the bookie through ``Flushed``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Protocol

from attrs import frozen

from embedlog import leveldb as binding  # plyvel or plyvel-next (embedlog/leveldb.py)
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.journal import Journal
from embedlog.bookie.registration import Registration
from embedlog.bookie.storage import LedgerStorage
from embedlog.clock import Clock
from embedlog.errors import BookieIOError
from embedlog.metrics import BookieMetrics

log = logging.getLogger(__name__)

# The disk itself failing, not a resource the process ran short of (file descriptors,
# memory, space): a retry that gets past one of these proves nothing about the next write.
BROKEN_DISK_ERRNOS = frozenset(
    {errno.EIO, errno.EROFS, errno.ENXIO, errno.ENODEV, errno.EUCLEAN, errno.EBADMSG}
)


def disk_is_broken(error: BaseException) -> bool:
    """Whether ``error`` (from a flush, or from a request's disk access) says the disk
    cannot be trusted with writes again in this run of the bookie."""
    if isinstance(error, BookieIOError):
        return True  # a record that does not read back as written
    if isinstance(error, OSError):
        return error.errno in BROKEN_DISK_ERRNOS
    if isinstance(error, binding.CorruptionError):
        return True
    # LevelDB's own I/O errors carry no errno; one that lasts keeps every retry failing
    # (and the bookie read-only) anyway.
    return not isinstance(error, binding.IOError)


@frozen
class Retry:
    delay: float  # seconds until the next flush
    resumable: bool  # a flush that then succeeds makes the bookie writable again


def after_failure(
    error: BaseException, failures: int, interval: float, max_interval: float
) -> Retry:
    """The ``failures``-th flush in a row (1 for the first) has just failed with ``error``."""
    delay = interval * 2.0 ** min(failures - 1, 62)
    return Retry(min(delay, max(interval, max_interval)), not disk_is_broken(error))


def stays_readonly(
    configured: bool, broken: str | None, journal_error: BaseException | None
) -> str | None:
    """Why a read-only bookie whose flush just succeeded must stay read-only, or None."""
    if configured:
        return "configured read-only (bookie setting readonly)"
    if broken is not None:
        return f"its disk failed ({broken}); restart it once the disk is fixed or replaced"
    if journal_error is not None:
        # A journal write that failed leaves the journal's file in an unknown state:
        # nothing more is appended to it in this run.
        return f"its journal failed ({journal_error}); restart it"
    return None


class FlushHealth:
    """A bookie's flushes since it last flushed: failures in a row, the wait before the
    next flush, and why (if at all) writes cannot resume in this run."""

    def __init__(self, interval: float, max_interval: float) -> None:
        self.interval = interval
        self.max_interval = max_interval
        self.failures = 0
        self.delay = interval
        self.broken: str | None = None

    def failed(self, error: BaseException) -> Retry:
        self.failures += 1
        retry = after_failure(error, self.failures, self.interval, self.max_interval)
        self.delay = retry.delay
        if not retry.resumable:
            self.met(error)
        return retry

    def met(self, error: BaseException) -> None:
        """A disk error outside a flush (a request's): only a broken disk counts here."""
        if self.broken is None and disk_is_broken(error):
            self.broken = f"{type(error).__name__}: {error}"

    def succeeded(self) -> bool:
        """A flush succeeded; True if flushes were failing until now."""
        was_failing = self.failures > 0
        self.failures = 0
        self.delay = self.interval
        return was_failing


class Flushed(Protocol):
    """What the flushes ask of their bookie (embedlog/bookie/bookie.py)."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def config(self) -> BookieConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def metrics(self) -> BookieMetrics: ...

    @property
    def storage(self) -> LedgerStorage | None: ...

    @property
    def journal(self) -> Journal | None: ...

    @property
    def serving(self) -> bool: ...

    @property
    def registration(self) -> Registration: ...

    readonly: bool  # refuses adds with EREADONLY


class Flusher:
    """A bookie's flushes: periodic, early for a full write cache, and the read-only
    state they (and a request's disk error) put the bookie in and take it out of."""

    def __init__(self, bookie: Flushed) -> None:
        self.bookie = bookie
        config = bookie.config
        self.health = FlushHealth(config.flush_interval, config.flush_retry_max_interval)
        self.periodic: asyncio.Task[None] | None = None  # started once the boot is done
        self.early: asyncio.Task[None] | None = None  # an early flush for a full write cache
        self._wake: asyncio.Future[None] | None = None  # set while parked (``_parked``)
        # Read on every add: the limit, not the config, one attribute away.
        self._cache_limit = config.write_cache_max_bytes

    def start(self) -> None:
        self.periodic = asyncio.get_running_loop().create_task(self._loop())

    def cancel(self, *, early: bool = False) -> None:
        """No more periodic flushes (nor, with ``early``, the early one under way)."""
        for task in (self.periodic, self.early if early else None):
            if task is not None:
                task.cancel()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.health.delay)
            if not self._idle_in_place():
                await self._in_background()
            elif not self.bookie.readonly and not self.health.failures:
                await self._parked()
            # else: an idle flush whose journal cleanup failed made the bookie read-only:
            # the next pass, an interval on, is the whole path that may resume writes.

    async def _parked(self) -> None:
        """Nothing to write: wait for the next change (``LedgerStorage.wake_on_change``) or
        for the bookie to go read-only, instead of flushing nothing every interval; the
        next flush comes one interval after that. A flush never lags a change by more
        than an interval, and an idle bookie does not wake at all (a simulated bookie
        flushes every 20 ms in a third of the histories: a stream's history had some
        2,000 of these wake-ups, 12% of its CPU)."""
        storage = self.bookie.storage
        assert storage is not None
        wake = self._wake = asyncio.get_running_loop().create_future()
        storage.wake_on_change(self._unpark)
        try:
            await wake
        finally:
            self._wake = None

    def _unpark(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _idle_in_place(self) -> bool:
        """The periodic flush of a writable bookie with nothing to write, done here: what
        ``_in_background`` does then, without its three coroutines. True if it was one.

        A simulated bookie flushes every 20 ms in a third of the histories, idle nearly
        always: a stream's history has some 2,000 of these flushes, this saves 2% of its
        instructions (callgrind)."""
        bookie = self.bookie
        journal, storage, clock = bookie.journal, bookie.storage, bookie.clock
        if journal is None or storage is None or bookie.readonly or self.health.failures:
            return False
        checkpoint = journal.lsn
        started = clock.monotonic()
        if not storage.flush_if_idle(checkpoint):
            return False
        bookie.metrics.flush_seconds.observe(clock.monotonic() - started)
        try:
            journal.remove_before(checkpoint)
        except Exception as exc:
            self._failed(exc)
            return True
        self.health.succeeded()
        return True

    async def _in_background(self) -> None:
        """A flush nobody waits for (periodic, or early for a full write cache): here the
        bookie stops taking adds when it fails, and takes them again when it succeeds."""
        bookie = self.bookie
        try:
            await self.flush()
        except Exception as exc:
            self._failed(exc)
            return
        recovered = self.health.succeeded()
        if bookie.readonly and bookie.serving:
            self._resume_writes(recovered)

    def _failed(self, exc: Exception) -> None:
        bookie = self.bookie
        if not bookie.serving:
            return  # the stop or crash showing, not a failure of the disk
        delay = self.health.failed(exc).delay
        why = f"{type(exc).__name__}: {exc}"
        # Anything but a disk error is a bug: show where it came from.
        log.error(
            "bookie %s: flush failed (%s); read-only, write cache kept, next flush in %.1fs",
            *(bookie.bookie_id, why, delay),
            exc_info=not isinstance(exc, OSError),
        )
        self.go_readonly()

    async def flush(self) -> None:
        bookie = self.bookie
        journal, storage, clock = bookie.journal, bookie.storage, bookie.clock
        assert journal is not None and storage is not None
        checkpoint = journal.lsn
        started = clock.monotonic()
        await storage.flush(checkpoint)
        bookie.metrics.flush_seconds.observe(clock.monotonic() - started)
        journal.remove_before(checkpoint)

    def maybe_early(self, cache_bytes: int) -> None:
        """After an add: a flush now if the write cache holds ``cache_bytes``, above its
        limit, and none is under way."""
        if cache_bytes > self._cache_limit and (self.early is None or self.early.done()):
            self.early = asyncio.get_running_loop().create_task(self._in_background())

    def met(self, error: BaseException) -> None:
        """A request met a disk error: read-only (for good if the disk is broken)."""
        self.health.met(error)
        self.go_readonly()

    def go_readonly(self) -> None:
        self._unpark()  # a read-only bookie's flushes decide when it is writable again
        if not self.bookie.readonly:
            self.bookie.readonly = True
            self.bookie.registration.register(readonly=True)

    def _resume_writes(self, recovered: bool) -> None:
        """A read-only bookie flushed: writable again, unless it is read-only for a reason
        a flush does not take away (``recovered``: flushes were failing until this one)."""
        bookie = self.bookie
        journal_error = bookie.journal.error if bookie.journal is not None else None
        why = stays_readonly(bookie.config.readonly, self.health.broken, journal_error)
        if why is None:
            log.warning("bookie %s: flushed again; writable again", bookie.bookie_id)
            bookie.readonly = False
            bookie.registration.register(readonly=False)
        elif recovered:
            log.warning("bookie %s: flushed again, but stays read-only: %s", bookie.bookie_id, why)
