"""A failed flush: when to try again, and whether the bookie may take writes again after.

A flush that fails makes the bookie read-only (it refuses adds with EREADONLY) and
keeps the entries in its write cache: they are acknowledged, the journal has them, and
the next flush writes them. Flushes go on, each failure doubling the wait from
``flush_interval`` up to ``flush_retry_max_interval``. When one succeeds, the bookie
registers as writable again, unless something it met says its disk is broken: then it
stays read-only until it is restarted, rather than flip-flop on a failing disk.
"""

from __future__ import annotations

import errno

import plyvel
from attrs import frozen

from embedlog.errors import BookieIOError

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
    if isinstance(error, plyvel.CorruptionError):
        return True
    # LevelDB's own I/O errors carry no errno; one that lasts keeps every retry failing
    # (and the bookie read-only) anyway.
    return not isinstance(error, plyvel.IOError)


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
