"""The journal: every add (unless journal_write_data is off) and every state change, fsync'd
in groups before the bookie answers.

Files are named by the log sequence number (LSN: a byte position in the
journal as a whole) of their first record, so a checkpoint is one number:
everything before it is already in ledger storage and its files can go.

Record frame: length u32 | crc32c u32 | payload (never empty). Reading the files
back (replay, and what it makes of damage) is journal_replay.py.

Group commit: what is buffered is handed over at once, as one durable write (one
system call where the system has one: files.py) in the bookie's journal thread (never
on the event loop); appends that arrive while it runs accumulate and form the next
group. So a lone add waits for one fsync and nothing else, and a busy journal groups as
many records as arrive in an fsync's time (``grouping`` decides;
``journal_max_group_wait`` can add a wait for company, docs/performance.md).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor

import crc32c

from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK, AppendOnlyFile, Disk, child
from embedlog.bookie.diskthread import DiskThread, Work
from embedlog.bookie.journal_replay import FRAME, SUFFIX, journal_files
from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.metrics import BookieMetrics
from embedlog.runtime import settle

log = logging.getLogger(__name__)

# Called once a record is durable (None) or can never be (the error). A plain callback
# rather than a future: the bookie's hot path answers an add from it without a task.
Durable = Callable[[BaseException | None], None]


class Grouping(enum.Enum):
    """How the writer treats what is buffered when it wakes."""

    AT_ONCE = "at_once"  # write it now: nothing else is queued behind it
    FULL = "full"  # write it now: it holds a group's worth of bytes
    WAIT_FOR_COMPANY = "wait_for_company"  # wait max_group_wait for more, then write


def grouping(buffered_bytes: int, *, group_bytes: int, max_group_wait: float) -> Grouping:
    """The writer's decision once it wakes with ``buffered_bytes`` to write.

    Every append runs on the loop and lands in the buffer at once, so when the writer
    gets the loop the journal's queue is empty: whatever else is coming is still on
    its way to the bookie, and waiting for it costs every add in the group that wait
    (BookKeeper's ``journalFlushWhenQueueEmpty``). Records keep grouping without a wait
    while adds keep coming: those that arrive during a group's fsync are the next
    group. A positive ``max_group_wait`` waits for company anyway (fewer fsyncs for a
    disk that charges per operation), unless a group's worth of bytes is already there.
    """
    if buffered_bytes >= group_bytes:
        return Grouping.FULL
    if max_group_wait > 0:
        return Grouping.WAIT_FOR_COMPANY
    return Grouping.AT_ONCE


class Journal:
    def __init__(
        self,
        config: BookieConfig,
        executor: Executor,
        start_lsn: int,
        disk: Disk = REAL_DISK,
        metrics: BookieMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.metrics = metrics or BookieMetrics()
        self.clock = clock  # the fsync latency it observes (embedlog/clock.py)
        self.dir = config.journal_dir
        self._disk = disk
        self.max_group_wait = config.journal_max_group_wait
        self.group_bytes = config.journal_group_bytes
        self.max_file_size = config.journal_max_file_size
        self._executor = executor
        self.lsn = start_lsn  # logical end, including buffered records
        # The journal's files (start LSN, path), listed once: a flush's ``remove_before``
        # must not list the directory each time. The lock: files are added by the
        # journal's thread, removed from the loop.
        self._files_lock = threading.Lock()
        self._files = journal_files(self.dir, disk)
        self._file = self._open(start_lsn)
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._buf_records = 0
        self._waiters: list[Durable] = []
        self._inflight: list[Durable] = []
        self._writing = False  # a group is with the journal's thread
        self._due = False  # the next group's hand-off is scheduled on the loop
        self._loop: asyncio.AbstractEventLoop | None = None  # set by start()
        self._pending: asyncio.Future[None] | Work | None = None  # the group being written
        self._wait_timer: asyncio.TimerHandle | None = None
        self._group_records = 0
        self.error: OSError | None = None
        # Set once closed or crashed: an append then fails at once, not left unanswered
        # (no group is handed off after the stop).
        self._stopped: str | None = None
        self.batches = 0
        self.records = 0
        # The writer's decisions, counted (tests and benchmarks read them).
        self.decisions = dict.fromkeys(Grouping, 0)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._buf or self._waiters:
            self._schedule()

    def append(self, payload: bytes, *, wait: bool = True) -> asyncio.Future[None] | None:
        """Queue a record; with ``wait`` return a future that resolves once it is fsync'd."""
        if not wait:
            self.append_then(payload, None)
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.append_then(payload, settle(fut))
        return fut

    def append_then(
        self, payload: bytes, on_durable: Durable | None, *, prefix: bytes = b""
    ) -> None:
        """Queue the record ``prefix + payload``; ``on_durable`` is called from the journal's
        task after the fsync. The parts are framed without joining them (the group's write
        gathers them)."""
        if self.error is not None:
            raise self.error
        if self._stopped is not None:
            raise OSError(f"the journal is {self._stopped}: nothing more can be made durable")
        length = len(prefix) + len(payload)
        if not length:  # replay takes a zero length for preallocated or zeroed space
            raise ValueError("a journal record is never empty")
        crc = crc32c.crc32c(payload, crc32c.crc32c(prefix)) if prefix else crc32c.crc32c(payload)
        buf = self._buf
        buf.append(FRAME.pack(length, crc))
        if prefix:
            buf.append(prefix)
        buf.append(payload)
        size = FRAME.size + length
        self._buf_bytes += size
        self._buf_records += 1
        self.lsn += size
        if on_durable is not None:
            self._waiters.append(on_durable)
        if not self._due and not self._writing:
            self._schedule()

    async def sync(self) -> None:
        """Wait until everything appended so far is durable."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._buf and not self._waiters and not self._writing:
            fut.set_result(None)
        else:  # a batch being written is not durable yet either: wait for the next group
            self._waiters.append(settle(fut))
            if not self._due and not self._writing:
                self._schedule()
        await fut

    def _schedule(self) -> None:
        # The next loop turn, not now: every add that reaches the bookie in this turn
        # (a whole ADD_BATCH, the other requests read from the same wake-up) joins the
        # group. A call_soon, not a task: nothing here awaits.
        if self._loop is None:
            return  # not started: start() comes before any add is admitted
        self._due = True
        self._loop.call_soon(self._next_group)

    def _next_group(self) -> None:
        self._due = False
        if (
            self._writing
            or self._wait_timer is not None  # already waiting for company: one hand-off
            or self._loop is None
            or (not self._buf and not self._waiters)
        ):
            return
        decision = grouping(
            self._buf_bytes, group_bytes=self.group_bytes, max_group_wait=self.max_group_wait
        )
        self.decisions[decision] += 1
        if decision is Grouping.WAIT_FOR_COMPANY:
            self._due = True  # appends meanwhile join this group; no second hand-off
            self._wait_timer = self._loop.call_later(self.max_group_wait, self._waited)
            return
        self._write_group()

    def _waited(self) -> None:
        self._wait_timer = None
        self._due = False
        self._write_group()

    def _write_group(self) -> None:
        """Hand what is buffered to the journal's thread as one write and one fsync."""
        assert self._loop is not None
        if self._writing:
            # One group at a time: the one in flight starts the next when it is durable
            # (``_written``); a second hand-off would answer its waiters with the first
            # group's fsync.
            return
        parts, size, waiters = self._buf, self._buf_bytes, self._waiters
        self._inflight = waiters  # so that crash() can fail them
        self._group_records, self._buf_records = self._buf_records, 0
        self._buf, self._buf_bytes, self._waiters = [], 0, []
        batch_lsn = self.lsn - size
        failure = self.error
        if failure is not None:
            # Nothing is written after a group that failed: part of it may be in the
            # file (a disk that filled up mid-write), and records after it would make
            # the next boot find an intact record behind a broken one, which it must
            # take for lost acknowledged records (BP-46 protection of every ledger).
            # Left alone at the end, the broken group is a torn tail, cut at replay.
            self._inflight = []
            _notify(waiters, failure)
            return
        self._writing = True
        args = (parts, size, batch_lsn)
        executor = self._executor
        try:
            if isinstance(executor, DiskThread):
                self._pending = executor.run_then(self._loop, self._write, args, self._written)
            else:  # any other executor (the simulator's disk): through the loop's future
                fut = self._loop.run_in_executor(executor, self._write, *args)
                fut.add_done_callback(self._written_future)
                self._pending = fut
        except RuntimeError as exc:  # the executor is shut down (a crash during boot)
            self._writing = False
            self._inflight = []
            self.error = OSError(f"the journal's disk thread is gone: {exc}")
            _notify(waiters, self.error)

    def _written_future(self, fut: asyncio.Future[None]) -> None:
        if fut is not self._pending:
            return  # crashed meanwhile: crash() has told its waiters
        self._written(None if fut.cancelled() else fut.exception())

    def _written(self, outcome: BaseException | None) -> None:
        """On the loop, once the journal's thread wrote (or failed to write) the group."""
        if self._pending is None:
            return  # crashed or closed meanwhile: crash() has told its waiters
        self._pending = None
        self._writing = False
        waiters, self._inflight = self._inflight, []
        if outcome is None:
            self.batches += 1
            self.records += self._group_records
            self.metrics.journal_group_records.observe(self._group_records)
            failure: OSError | None = None
        else:
            failure = (
                outcome
                if isinstance(outcome, OSError)
                else OSError(f"journal write failed unexpectedly: {outcome!r}")
            )
            log.error("journal write failed: %s", outcome)
            self.error = failure
        _notify(waiters, failure)
        if self._buf or self._waiters:  # what arrived during the fsync: the next group
            self._next_group()

    def _open(self, start_lsn: int) -> AppendOnlyFile:
        path = child(self.dir, f"{start_lsn:020d}{SUFFIX}")
        f = self._disk.open_append(path)
        with self._files_lock:
            self._files = sorted({*self._files, (start_lsn, path)})
        return f

    def _write(self, parts: list[bytes], size: int, batch_lsn: int) -> None:
        if size and self._file.size + size > self.max_file_size and self._file.size:
            old = self._file
            old.sync()
            self._file = self._open(batch_lsn)
            old.close()
        started = self.clock.monotonic()
        if size:
            self._file.append_parts(parts, durable=True)
        else:  # a sync() with nothing buffered
            self._file.sync()
        # On the journal's thread, the only one that observes this histogram.
        self.metrics.journal_fsync_seconds.observe(self.clock.monotonic() - started)

    def remove_before(self, checkpoint_lsn: int) -> int:
        """Delete journal files wholly covered by the checkpoint; returns how many."""
        with self._files_lock:
            files = self._files
        if len(files) < 2:
            return 0  # the current file alone: nothing before it (a flush's usual case)
        doomed = [
            path
            for i, (_start, path) in enumerate(files[:-1])
            if files[i + 1][0] <= checkpoint_lsn and path != self._file.path
        ]
        if not doomed:
            return 0
        for path in doomed:
            self._disk.unlink(path)
        gone = set(doomed)
        with self._files_lock:
            self._files = [f for f in self._files if f[1] not in gone]
        return len(doomed)

    def size_on_disk(self) -> int:
        with self._files_lock:
            files = list(self._files)
        return sum(self._disk.size(p) for _, p in files if self._disk.exists(p))

    async def close(self) -> None:
        """Sync, then release the file; released even when the sync fails (it raises)."""
        try:
            await self.sync()
        finally:
            self._stop("closed")
            # What was appended while the final sync waited was not in its group.
            waiters, self._waiters, self._inflight = self._waiters + self._inflight, [], []
            _notify(waiters, OSError("the journal was closed before this record was durable"))
            self._file.close()

    def _stop(self, why: str) -> None:
        self._stopped = why
        if self._wait_timer is not None:
            self._wait_timer.cancel()
            self._wait_timer = None
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()  # not written if the thread has not started it
        self._loop = None  # no group is handed off after this
        self._writing = False

    def crash(self) -> None:
        self._stop("crashed")
        waiters, self._waiters, self._inflight = self._waiters + self._inflight, [], []
        _notify(waiters, OSError("bookie crashed"))
        self._buf.clear()
        self._buf_records = 0
        # On the journal's own thread, after any write it is doing: a crash must not race
        # a write into the file it truncates (bytes never fsync'd would then survive).
        self._executor.submit(self._file.crash).result()


def _notify(waiters: list[Durable], exc: BaseException | None) -> None:
    for w in waiters:
        try:
            w(exc)
        except Exception:  # one broken waiter must not leave the rest of its group hanging
            log.exception("journal waiter failed")
