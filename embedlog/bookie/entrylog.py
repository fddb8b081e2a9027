"""Entry log files: where flushed entries live, appended in flush order.

Record: data_len u32 | crc32c(data) u32 | ledger i64 | entry i64 | data. The
index points at the record (``LOCATION``: log id u32 | offset u64 | data length
u32); a read checks the header and CRC, so a corrupt or truncated record is an
I/O error (never "no such entry": the index says we have it).

The index also remembers how far into each log its entries may point; a boot
compares that with the files (``damaged_logs``) to find a log that is missing or
cut short before anyone reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from itertools import accumulate, repeat
from operator import add
from pathlib import Path

import crc32c

from embedlog.bookie.disk import REAL_DISK, AppendOnlyFile, Disk, child
from embedlog.bookie.gilsteps import map_in_steps
from embedlog.errors import BookieIOError

RECORD = struct.Struct(">IIqq")
LOCATION = struct.Struct(">IQI")
SUFFIX = ".log"


def log_path(directory: Path, log_id: int) -> Path:
    """Entry log ``log_id``'s file in ``directory`` (the bookie's ledger directory)."""
    return child(directory, f"{log_id:08d}{SUFFIX}")


def damaged_logs(ends: Mapping[int, int], sizes: Mapping[int, int]) -> dict[int, int]:
    """The entry logs that lost bytes the index may point to: log id -> how many of its
    bytes are left (0 when the file is missing). ``ends``: log id -> how far into it the
    index's entries may point; ``sizes``: log id -> the size of each file present."""
    return {
        log_id: sizes.get(log_id, 0) for log_id, end in ends.items() if sizes.get(log_id, 0) < end
    }


def damage_line(path: Path, left: int | None, end: int, ledgers: Mapping[int, list[int]]) -> str:
    """What a boot says of an entry log that lost indexed entries: missing (``left`` None)
    or cut short to ``left`` of ``end`` bytes; ``ledgers``: ledger -> the entries lost."""
    what = (
        f"entry log {path} is missing"
        if left is None
        else f"entry log {path} is cut short ({left} of {end} bytes)"
    )
    count = sum(map(len, ledgers.values()))
    shown = ", ".join(map(str, sorted(ledgers)[:10])) + (", ..." if len(ledgers) > 10 else "")
    return (
        f"{what}: {count} indexed entries of ledger(s) {shown} were in the part that is "
        "gone; they read as EIO, and the bookie no longer lists them, until "
        "re-replication copies them back from their peers (`embedlog auditor replicate`)"
    )


def entry_readable(location: tuple[int, int, int], damaged: Mapping[int, int]) -> bool:
    """Whether the record at ``location`` (log id, offset, data length) is still on disk,
    given the ``damaged`` logs (log id -> bytes left)."""
    log_id, offset, length = location
    left = damaged.get(log_id)
    return left is None or offset + RECORD.size + length <= left


# Reading a run of entries (READ_BATCH), records of one entry log closer than READ_GAP
# bytes apart are read with one pread of at most READ_SPAN bytes: a flush writes a
# ledger's entries next to each other, so a run of them is one read instead of one per
# entry, even when a bookie reads every E-th entry (its share of the ensemble's).
READ_GAP = 64 * 1024
READ_SPAN = 8 * 1024 * 1024


def coalesce(
    locations: list[tuple[int, int, int]], max_gap: int, max_span: int
) -> list[tuple[int, int]]:
    """Consecutive groups [start, stop) of ``locations`` (log id, offset, data length) to
    read with one read each: the same log, each record after the previous one and less
    than ``max_gap`` bytes past its end, the whole span at most ``max_span`` bytes (a
    record longer than that is a group of its own)."""
    groups: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(locations) + 1):
        if i < len(locations):
            log_id, offset, _ = locations[i]
            first_log, first_offset, _ = locations[start]
            _, prev_offset, prev_len = locations[i - 1]
            prev_end = prev_offset + RECORD.size + prev_len
            end = offset + RECORD.size + locations[i][2]
            if (
                log_id == first_log
                and prev_end <= offset < prev_end + max_gap
                and end - first_offset <= max_span
            ):
                continue
        groups.append((start, i))
        start = i
    return groups


class EntryLogs:
    def __init__(
        self, directory: Path, max_size: int, *, next_id: int = 0, disk: Disk = REAL_DISK
    ) -> None:
        """``next_id``: no new log gets a lower id (the index may point into logs with
        lower ids that are missing: a new file must never pass for one of them)."""
        self.dir = directory
        self.max_size = max_size
        self._disk = disk
        stems = [n[: -len(SUFFIX)] for n in disk.listdir(directory) if n.endswith(SUFFIX)]
        ids = sorted(int(s) for s in stems if s.isdigit())
        self._files: dict[int, AppendOnlyFile] = {i: disk.open_append(self._path(i)) for i in ids}
        self.current_id = max(ids[-1] + 1 if ids else 0, next_id)
        # Always start a new log at boot: nothing is ever appended after a possibly torn tail.
        self._files[self.current_id] = disk.open_append(self._path(self.current_id))

    def _path(self, log_id: int) -> Path:
        return log_path(self.dir, log_id)

    def append_many(
        self, ledger_id: int, entry_ids: list[int], entries: dict[int, bytes]
    ) -> list[bytes]:
        """Append the records of one ledger's ``entry_ids`` (their data in ``entries``),
        in that order, with one write per log file; their locations, packed
        (``LOCATION``) as the index keeps them.

        Each step is a ``map`` over the flush rather than a Python loop over its
        entries, made in steps the event loop can come in between (``gilsteps``).
        """
        datas = map_in_steps(entries.__getitem__, len(entry_ids), entry_ids)
        lens = map_in_steps(len, len(datas), datas)
        locations: list[bytes] = []
        done = 0
        while done < len(datas):
            current = self._files[self.current_id]
            # Where each record starts (and, last, where the log would end).
            starts = list(
                accumulate(map(add, lens[done:], repeat(RECORD.size)), initial=current.size)
            )
            fit = len(starts) - 1
            if starts[fit - 1] > 0 and starts[fit - 1] + lens[-1] > self.max_size:
                # The log fills up within this flush (rare): the records up to the first
                # that would cross max_size go here, the rest to a new log.
                fit = next(
                    i
                    for i in range(fit)
                    if starts[i] > 0 and starts[i] + lens[done + i] > self.max_size
                )
            if fit:
                stop = done + fit
                chunk, sizes = datas[done:stop], lens[done:stop]
                parts: list[bytes] = [b""] * (2 * fit)
                parts[::2] = map_in_steps(
                    RECORD.pack,
                    fit,
                    sizes,
                    map(crc32c.crc32c, chunk),
                    repeat(ledger_id),
                    entry_ids[done:stop],
                )
                parts[1::2] = chunk
                current.append_parts(parts)
                locations += map_in_steps(
                    LOCATION.pack, fit, repeat(self.current_id), starts[:fit], sizes
                )
                done = stop
            if done < len(datas):
                current.sync()
                # Opened before current_id moves: a failed open (EMFILE) leaves the logs
                # as they were for the flush that retries.
                nxt = self._disk.open_append(self._path(self.current_id + 1))
                self.current_id += 1
                self._files[self.current_id] = nxt
        return locations

    def sync(self) -> None:
        self._files[self.current_id].sync()

    def path(self, log_id: int) -> Path:
        return self._path(log_id)

    def sizes(self) -> dict[int, int]:
        """Log id -> size of every log file present."""
        return {log_id: f.size for log_id, f in self._files.items()}

    def ends_since(self, first_id: int) -> dict[int, int]:
        """Log id -> size of the logs from ``first_id`` to the current one: after a flush
        that started writing at ``first_id``, how far into each its records reach."""
        return {i: self._files[i].size for i in range(first_id, self.current_id + 1)}

    def read(self, ledger_id: int, entry_id: int, location: tuple[int, int, int]) -> bytes:
        log_id, offset, length = location
        f = self._files.get(log_id)
        if f is None:
            raise self._error(ledger_id, entry_id, location, "the entry log file is missing")
        try:
            raw = f.pread(offset, RECORD.size + length)
        except OSError as exc:
            raise self._error(ledger_id, entry_id, location, f"read failed: {exc}") from exc
        if len(raw) != RECORD.size + length:
            raise self._error(ledger_id, entry_id, location, f"short read ({len(raw)} bytes)")
        n, crc, lid, eid = RECORD.unpack_from(raw)
        data = raw[RECORD.size :]
        if (n, lid, eid) != (length, ledger_id, entry_id) or crc32c.crc32c(data) != crc:
            raise self._error(ledger_id, entry_id, location, "the record is corrupt")
        return data

    def read_many(
        self, ledger_id: int, wanted: list[tuple[int, tuple[int, int, int]]]
    ) -> tuple[list[bytes], BookieIOError | None]:
        """The entries of ``wanted`` ((entry id, location) in the order asked), as ``read``
        checks each, read with one pread per group ``coalesce`` makes; up to the first that
        fails, and that failure (None if all were read)."""
        datas: list[bytes] = []
        for start, stop in coalesce([loc for _, loc in wanted], READ_GAP, READ_SPAN):
            log_id, begin, _ = wanted[start][1]
            _, last, length = wanted[stop - 1][1]
            f = self._files.get(log_id)
            try:
                raw = f.pread(begin, last + RECORD.size + length - begin) if f else b""
            except OSError:
                raw = b""  # each entry's own read says what went wrong
            for entry_id, location in wanted[start:stop]:
                at, size = location[1] - begin, location[2]
                if len(raw) >= at + RECORD.size + size:
                    n, crc, lid, eid = RECORD.unpack_from(raw, at)
                    data = raw[at + RECORD.size : at + RECORD.size + size]
                    if (n, lid, eid) == (size, ledger_id, entry_id) and crc32c.crc32c(data) == crc:
                        datas.append(data)
                        continue
                try:  # the group's read did not give it whole: read it alone, for the reason
                    datas.append(self.read(ledger_id, entry_id, location))
                except BookieIOError as exc:
                    return datas, exc
        return datas, None

    def _error(
        self, ledger_id: int, entry_id: int, location: tuple[int, int, int], what: str
    ) -> BookieIOError:
        # Made only on failure: formatting the path took a third of a read's time.
        log_id, offset, _ = location
        where = f"entry {ledger_id}:{entry_id} in {self._path(log_id)} at {offset}"
        return BookieIOError(f"{where}: {what}")

    def remove_unreferenced(self, live: set[int]) -> int:
        """Delete the full (not current) log files no index entry points into; bytes freed."""
        freed = 0
        for log_id in [i for i in self._files if i != self.current_id and i not in live]:
            f = self._files.pop(log_id)
            freed += f.size
            f.close()
            self._disk.unlink(self._path(log_id))
        return freed

    def size_on_disk(self) -> int:
        return sum(f.size for f in self._files.values())

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def crash(self) -> None:
        for f in self._files.values():
            f.crash()
