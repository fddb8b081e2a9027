"""The journal: every add (unless journal_write_data is off) and every state change, fsync'd
in groups before the bookie answers.

Files are named by the log sequence number (LSN: a byte position in the
journal as a whole) of their first record, so a checkpoint is one number:
everything before it is already in ledger storage and its files can go.

Record frame: length u32 | crc32c u32 | payload. A torn tail (short frame or
bad CRC) ends replay; the file is cut there so nothing follows garbage.

Group commit: appends accumulate in a buffer while the previous batch is being
written; the writer task then writes the whole buffer with one write and one
fsync (in the bookie's journal thread, never on the event loop).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from pathlib import Path

import crc32c

from embedlog.bookie.config import BookieConfig
from embedlog.bookie.files import AppendFile
from embedlog.runtime import settle

log = logging.getLogger(__name__)

FRAME = struct.Struct(">II")
SUFFIX = ".jnl"

# Called once a record is durable (None) or can never be (the error). A plain callback
# rather than a future: the bookie's hot path answers an add from it without a task.
Durable = Callable[[BaseException | None], None]


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    files = []
    for p in directory.glob(f"*{SUFFIX}"):
        try:
            files.append((int(p.stem), p))
        except ValueError:
            continue
    return sorted(files)


def replay(directory: Path, from_lsn: int) -> Iterator[tuple[int, bytes]]:
    """Yield (lsn, payload) for every intact record at or after ``from_lsn``."""
    files = journal_files(directory)
    for i, (start, path) in enumerate(files):
        next_start = files[i + 1][0] if i + 1 < len(files) else None
        if next_start is not None and next_start <= from_lsn:
            continue
        data = path.read_bytes()
        pos = 0
        while pos + FRAME.size <= len(data):
            length, crc = FRAME.unpack_from(data, pos)
            end = pos + FRAME.size + length
            if end > len(data):
                break
            payload = data[pos + FRAME.size : end]
            if crc32c.crc32c(payload) != crc:
                break
            if start + pos >= from_lsn:
                yield start + pos, payload
            pos = end
        if pos < len(data):
            log.warning("journal %s: torn tail at byte %d of %d, cut there", path, pos, len(data))
            with path.open("r+b") as f:
                f.truncate(pos)


class Journal:
    def __init__(self, config: BookieConfig, executor: Executor, start_lsn: int) -> None:
        self.dir = config.journal_dir
        self.max_group_wait = config.journal_max_group_wait
        self.group_bytes = config.journal_group_bytes
        self.max_file_size = config.journal_max_file_size
        self._executor = executor
        self.lsn = start_lsn  # logical end, including buffered records
        self._file = AppendFile(self.dir / f"{start_lsn:020d}{SUFFIX}")
        self._file_start = start_lsn
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._buf_records = 0
        self._waiters: list[Durable] = []
        self._inflight: list[Durable] = []
        self._writing = False
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.error: OSError | None = None
        self.batches = 0
        self.records = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._writer())

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
        length = len(prefix) + len(payload)
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
        self._wakeup.set()
        if on_durable is not None:
            self._waiters.append(on_durable)

    async def sync(self) -> None:
        """Wait until everything appended so far is durable."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._buf and not self._waiters and not self._writing:
            fut.set_result(None)
        else:  # a batch being written is not durable yet either: wait for the next group
            self._waiters.append(settle(fut))
            self._wakeup.set()
        await fut

    async def _writer(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self.max_group_wait and self._buf_bytes < self.group_bytes:
                await asyncio.sleep(self.max_group_wait)
            if not self._buf and not self._waiters:
                continue
            parts, size, waiters = self._buf, self._buf_bytes, self._waiters
            self._inflight = waiters  # so that crash() can fail them
            records, self._buf_records = self._buf_records, 0
            self._buf, self._buf_bytes, self._waiters = [], 0, []
            batch_lsn = self.lsn - size
            self._writing = True
            failure: OSError | None = None
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self._executor, self._write, parts, size, batch_lsn
                )
            except OSError as exc:
                log.error("journal write failed: %s", exc)
                self.error = failure = exc
            finally:
                self._writing = False
                self._inflight = []
            if failure is None:
                self.batches += 1
                self.records += records
            _notify(waiters, failure)

    def _write(self, parts: list[bytes], size: int, batch_lsn: int) -> None:
        if size and self._file.size + size > self.max_file_size and self._file.size:
            old = self._file
            old.sync()
            self._file = AppendFile(self.dir / f"{batch_lsn:020d}{SUFFIX}")
            self._file_start = batch_lsn
            old.close()
        if size:
            self._file.append_parts(parts)
        self._file.sync()

    def remove_before(self, checkpoint_lsn: int) -> int:
        """Delete journal files wholly covered by the checkpoint; returns how many."""
        files = journal_files(self.dir)
        removed = 0
        for i, (_start, path) in enumerate(files[:-1]):
            if files[i + 1][0] <= checkpoint_lsn and path != self._file.path:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def size_on_disk(self) -> int:
        return sum(p.stat().st_size for _, p in journal_files(self.dir))

    async def close(self) -> None:
        """Sync, then release the file; released even when the sync fails (it raises)."""
        try:
            await self.sync()
        finally:
            if self._task is not None:
                self._task.cancel()
            self._file.close()

    def crash(self) -> None:
        if self._task is not None:
            self._task.cancel()
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
