"""Flushing: the write cache written to the entry logs and the index in the background,
and the bookie read-only while flushes fail.

A flush runs every ``flush_interval`` and early when the write cache passes
``write_cache_max_bytes``; after it, the journal before its checkpoint is removed.
A flush that fails makes the bookie read-only (it refuses adds with EREADONLY) and
keeps the entries in its write cache: they are acknowledged, the journal has them, and
the next flush writes them. Flushes go on, each failure doubling the wait from
``flush_interval`` up to ``flush_retry_max_interval``. When one succeeds, the bookie
registers as writable again, unless something it met says its disk is broken: then it
stays read-only until it is restarted, rather than flip-flop on a failing disk.

The rules are the pure functions and FlushHealth below; Flushing is the part of the
Bookie (embedlog/bookie/base.py) that runs them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time

from attrs import frozen

from embedlog import leveldb as binding  # plyvel or plyvel-next (embedlog/leveldb.py)
from embedlog.bookie.base import BookieBase, BookieState
from embedlog.bookie.registration import Registration
from embedlog.errors import BookieIOError

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


class Flushing(BookieBase):
    _flusher: asyncio.Task[None] | None  # the periodic flushes (started by the boot)
    _background_flush: asyncio.Task[None] | None  # an early flush for a full write cache
    flush_health: FlushHealth
    registration: Registration  # retries a registration that failed (registration.py)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_health.delay)
            await self._flush_in_background()

    async def _flush_in_background(self) -> None:
        """A flush nobody waits for (periodic, or early for a full write cache): here the
        bookie stops taking adds when it fails, and takes them again when it succeeds."""
        try:
            await self.flush()
        except Exception as exc:
            if self._state is not BookieState.SERVING:
                return  # the stop or crash showing, not a failure of the disk
            delay = self.flush_health.failed(exc).delay
            why = f"{type(exc).__name__}: {exc}"
            # Anything but a disk error is a bug: show where it came from.
            log.error(
                "bookie %s: flush failed (%s); read-only, write cache kept, next flush in %.1fs",
                *(self.bookie_id, why, delay),
                exc_info=not isinstance(exc, OSError),
            )
            self._go_readonly()
            return
        recovered = self.flush_health.succeeded()
        if self.readonly and self._state is BookieState.SERVING:
            self._resume_writes(recovered)

    async def flush(self) -> None:
        assert self.journal is not None and self.storage is not None
        checkpoint = self.journal.lsn
        started = time.perf_counter()
        await self.storage.flush(checkpoint)
        self.metrics.flush_seconds.observe(time.perf_counter() - started)
        self.journal.remove_before(checkpoint)

    def _maybe_flush_early(self) -> None:
        assert self.storage is not None
        if self.storage.cache_bytes > self.config.write_cache_max_bytes and (
            self._background_flush is None or self._background_flush.done()
        ):
            self._background_flush = asyncio.get_running_loop().create_task(
                self._flush_in_background()
            )

    def _go_readonly(self) -> None:
        if not self.readonly:
            self.readonly = True
            self._register(readonly=True)

    def _resume_writes(self, recovered: bool) -> None:
        """A read-only bookie flushed: writable again, unless it is read-only for a reason
        a flush does not take away (``recovered``: flushes were failing until this one)."""
        journal_error = self.journal.error if self.journal is not None else None
        why = stays_readonly(self.config.readonly, self.flush_health.broken, journal_error)
        if why is None:
            log.warning("bookie %s: flushed again; writable again", self.bookie_id)
            self.readonly = False
            self._register(readonly=False)
        elif recovered:
            log.warning("bookie %s: flushed again, but stays read-only: %s", self.bookie_id, why)

    def _register(self, *, readonly: bool) -> None:
        try:
            self.metadata.register_bookie(
                self.session,
                self.bookie_id,
                {"address": self.config.advertised_address, "rack": self.config.rack},
                readonly=readonly,
            )
        except Exception as exc:
            state = "read-only" if readonly else "writable"
            log.warning(
                "bookie %s: could not register as %s (%s); retrying", self.bookie_id, state, exc
            )
            self.registration.refresh()
