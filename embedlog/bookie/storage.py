"""Ledger storage: a write cache in front of entry logs and the LevelDB index.

Adds land in the write cache (readable at once). A flush, every
``flush_interval`` or when the cache is full, appends the cached entries to
the entry log, fsyncs it, and only then writes their locations, the ledger
states and the journal checkpoint to the index in one synced batch. Until a
flush, the journal (if it has the data) is what makes an entry durable.

At boot, an entry log that the index points into but that is missing or cut
short is found (``damage``): its entries read as EIO, as before, and are left
out of the bookie's entry lists, so that the auditor reports them as missing and
re-replication copies them back (docs/security.md, "Disk damage"). A record
spoilt in place is found by the first read of it, and is left out from then on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Executor
from typing import Literal, cast

from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK, Disk
from embedlog.bookie.entrylog import EntryLogs, damage_line, damaged_logs
from embedlog.bookie.index import LedgerIndex, LedgerInfo
from embedlog.bookie.tombstones import Tombstones
from embedlog.dirlock import DirLockedError
from embedlog.errors import BookieIOError
from embedlog.wire.entry import parse_header
from embedlog.wire.limits import read_batch_fits

log = logging.getLogger(__name__)

Cut = Literal["all", "below", "above"]
# A cut as a flush applies it: (ledger, how, at, only: the ids it may drop, None for all).
CutSpec = tuple[int, Cut, int, "frozenset[int] | None"]


class LedgerStorage:
    def __init__(
        self,
        config: BookieConfig,
        executor: Executor,
        *,
        new_index: bool = False,
        disk: Disk = REAL_DISK,
    ) -> None:
        """``new_index``: the index disk is new or wiped (``LedgerIndex``'s ``create``)."""
        self.config = config
        self._executor = executor
        disk.mkdir(config.index_dir)
        try:
            # Before LevelDB is touched: LevelDB refusing a second open in this process
            # would drop its lock for the first one (see embedlog/dirlock.py).
            self._dir_lock = disk.lock(config.index_dir)
        except DirLockedError as exc:
            raise BookieIOError(
                f"bookie {config.bookie_id}: its index {exc}; one bookie at a time may use "
                "a bookie's disks: stop the other one first"
            ) from None
        try:
            self.index = LedgerIndex(config.index_dir, create=new_index, disk=disk)
        except BaseException:
            self._dir_lock.release()
            raise
        try:
            ends = self.index.log_ends()
            self.logs = EntryLogs(
                config.ledger_dir,
                config.entry_log_max_size,
                next_id=max(ends, default=-1) + 1,
                disk=disk,
            )
            # Entry log id -> bytes left in it, for the logs that lost entries the index has.
            self.damaged: dict[int, int] = {}
            self._damaged_ledgers: set[int] = set()
            self.damage: list[str] = []  # what the boot found, for the bookie's status
            # Ledger -> entry -> location, for indexed entries a read found spoilt.
            self._spoilt: dict[int, dict[int, tuple[int, int, int]]] = {}
            self._check_logs(ends)
        except BaseException:
            self.index.close()
            self._dir_lock.release()
            raise
        self.cache: dict[int, dict[int, bytes]] = {}  # ledger -> entry -> entry bytes
        self.cache_bytes = 0
        self._flushing: dict[int, dict[int, bytes]] = {}  # the cache a flush is writing
        self._crashed = False
        self._infos: dict[int, LedgerInfo] = {}
        self._dirty: set[int] = set()
        self._deleted: set[int] = set()  # ledgers deleted since the last flush
        self.tombstones = Tombstones(self.index, keep=not config.unsafe_forget_deletions)
        self._flush_lock = asyncio.Lock()
        self._checkpoint = self.index.checkpoint()  # the journal LSN the index last recorded
        self.flushes = 0
        self._wake: Callable[[], None] | None = None  # see wake_on_change

    def _check_logs(self, ends: dict[int, int]) -> None:
        """Find the entry logs that lost entries the index points to (a scan of the index,
        only when some log is missing or short). A log nothing points into any more is
        forgotten; a short one whose lost bytes held no entry still indexed is taken as
        it is."""
        sizes = self.logs.sizes()
        damaged = damaged_logs(ends, sizes)
        if not damaged:
            return
        lost, pointed = self.index.unreadable_entries(damaged)
        settled = {i: left for i, left in damaged.items() if i in pointed and i not in lost}
        self.index.set_log_ends(settled, [i for i in damaged if i not in pointed])
        self.damaged = {i: damaged[i] for i in lost}
        for log_id, ledgers in sorted(lost.items()):
            self._damaged_ledgers.update(ledgers)
            left = damaged[log_id] if log_id in sizes else None
            self.damage.append(damage_line(self.logs.path(log_id), left, ends[log_id], ledgers))
        for line in self.damage:
            log.error("bookie %s: %s", self.config.bookie_id, line)

    # -- ledger state ------------------------------------------------------------------------

    def info(self, ledger_id: int) -> LedgerInfo | None:
        info = self._infos.get(ledger_id)
        if info is None and ledger_id not in self._deleted:
            info = self.index.ledger(ledger_id)
            if info is not None:
                self._infos[ledger_id] = info
        return info

    def set_info(self, ledger_id: int, info: LedgerInfo) -> None:
        self._infos[ledger_id] = info
        self._deleted.discard(ledger_id)
        self._dirty.add(ledger_id)
        if self._wake is not None:
            self._changed()

    def wake_on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, at the next change a flush would write (an entry cached,
        a ledger's state set, a failed flush's work put back): a flusher with nothing to
        write waits for it instead of waking every interval (flushing.py). Every journal
        record comes with such a change, so the journal needs no hook of its own."""
        self._wake = callback

    def _changed(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake()

    def dropped(self, ledger_id: int) -> bool:
        """The bookie dropped the ledger: no state of it, and a tombstone (tombstones.py)."""
        return self.info(ledger_id) is None and self.tombstones.key(ledger_id) is not None

    def ledger_ids(self) -> list[int]:
        ids = set(self.index.ledger_ids()) | set(self._infos)
        return sorted(ids - self._deleted)

    # -- entries -----------------------------------------------------------------------------

    def put(self, ledger_id: int, entry_id: int, data: bytes, *, lac: int | None = None) -> None:
        """Cache an entry; ``lac`` is the one in its header when the caller parsed it already."""
        cached = self.cache.setdefault(ledger_id, {})
        old = cached.get(entry_id)
        cached[entry_id] = data
        self.cache_bytes += len(data) - (len(old) if old is not None else 0)
        self._raise_lac(ledger_id, lac, (data,))
        if self._wake is not None:
            self._changed()

    def put_many(
        self, ledger_id: int, entries: dict[int, bytes], *, lac: int | None = None
    ) -> None:
        """Cache {entry id: entry} of one ledger; ``lac``: the highest in their headers,
        when the caller parsed them already."""
        cached = self.cache.get(ledger_id)
        if cached is None:
            cached = self.cache[ledger_id] = {}
        elif not cached.keys().isdisjoint(entries):  # rewrites (recovery, resends): rare
            self.cache_bytes -= sum(len(cached[e]) for e in entries if e in cached)
        cached.update(entries)
        self.cache_bytes += sum(map(len, entries.values()))
        self._raise_lac(ledger_id, lac, entries.values())
        if self._wake is not None:
            self._changed()

    def _raise_lac(self, ledger_id: int, lac: int | None, entries: Iterable[bytes]) -> None:
        """Raise the ledger's LAC to the highest in the headers of ``entries`` just stored
        (``lac``, when the caller parsed them already)."""
        info = self._infos.get(ledger_id) or self.info(ledger_id)
        if info is None:
            return
        if lac is None:
            lac = max(parse_header(data).lac for data in entries)
        if lac > info.lac:
            info.lac = lac
            self._dirty.add(ledger_id)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry, or None if this bookie does not hold it. Disk trouble raises BookieIOError."""
        for held in (self.cache, self._flushing):
            entries = held.get(ledger_id)
            if entries is not None:
                data = entries.get(entry_id)
                if data is not None:
                    return data
        if ledger_id in self._deleted:
            return None
        loc = self.index.location(ledger_id, entry_id)
        if loc is None:
            return None
        try:
            return self.logs.read(ledger_id, entry_id, loc)
        except BookieIOError:
            # Indexed, but its record is spoilt: no longer listed as held (``entry_ids``),
            # so that the auditor finds it missing and re-replication copies it back.
            self._spoilt.setdefault(ledger_id, {})[entry_id] = loc
            raise

    def get_run(
        self, ledger_id: int, first: int, stride: int, count: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        """A READ_BATCH's entries: ``first``, ``first + stride``, ... (at most ``count``),
        up to the first this bookie does not hold and within ``max_bytes``
        (``read_batch_fits``). Disk trouble with the first entry raises BookieIOError,
        as ``get`` does; with a later one the run ends before it (its own READ says EIO).

        The run is decided first (an indexed entry's size is in its location), then the
        indexed entries are read together (``EntryLogs.read_many``: one pread per stretch
        of the entry log instead of one per entry)."""
        held = [m for m in (self.cache.get(ledger_id), self._flushing.get(ledger_id)) if m]
        indexed = ledger_id not in self._deleted
        run: list[tuple[int, bytes | tuple[int, int, int]]] = []
        total = 0
        for entry_id in range(first, first + count * stride, stride):
            where: bytes | tuple[int, int, int] | None = None
            for entries in held:
                where = entries.get(entry_id)
                if where is not None:
                    break
            if where is None and indexed:
                where = self.index.location(ledger_id, entry_id)
            if where is None:
                break
            size = len(where) if isinstance(where, bytes) else where[2]
            if not read_batch_fits(len(run), total, size, max_bytes):
                break
            run.append((entry_id, where))
            total += size
        wanted = [(eid, loc) for eid, loc in run if not isinstance(loc, bytes)]
        if not wanted:
            return cast(list[tuple[int, bytes]], run)  # every entry came from memory
        datas, failed = self.logs.read_many(ledger_id, wanted)
        read = dict(zip((eid for eid, _ in wanted), datas, strict=False))
        out: list[tuple[int, bytes]] = []
        for entry_id, where in run:
            data = where if isinstance(where, bytes) else read.get(entry_id)
            if data is None:  # the first indexed entry that failed (read_many stops there)
                assert failed is not None and not isinstance(where, bytes)
                self._spoilt.setdefault(ledger_id, {})[entry_id] = where
                if not out:
                    raise failed
                break
            out.append((entry_id, data))
        return out

    def _in_memory(self, ledger_id: int) -> list[dict[int, bytes]]:
        """The ledger's entries in memory, by id: in the cache and in the flush in
        progress (those of the two that hold any)."""
        return [m for m in (self.cache.get(ledger_id), self._flushing.get(ledger_id)) if m]

    def _held(self, ledger_id: int) -> set[int]:
        """Ids of the ledger's entries in memory."""
        return set().union(*self._in_memory(ledger_id))

    def entry_ids(self, ledger_id: int) -> list[int]:
        """The ids of the entries held: cached or indexed, less those a damaged entry log
        lost (they read as EIO; LIST_ENTRIES must not claim them, or nobody copies them
        back)."""
        held = self._held(ledger_id)
        if ledger_id in self._deleted:
            return sorted(held)
        if ledger_id in self._damaged_ledgers:
            ids = set(self.index.readable_entry_ids(ledger_id, self.damaged))
        else:
            ids = set(self.index.entry_ids(ledger_id))
        spoilt = self._spoilt.get(ledger_id)
        if spoilt:
            for eid, where in list(spoilt.items()):
                if self.index.location(ledger_id, eid) == where:
                    ids.discard(eid)
                else:  # copied back (or cut) since
                    del spoilt[eid]
        return sorted(ids | held)

    def last_entry(self, ledger_id: int) -> int:
        best = max((max(entries) for entries in self._in_memory(ledger_id)), default=-1)
        if ledger_id not in self._deleted:
            best = max(best, self.index.last_entry(ledger_id))
        return best

    # -- flushing ----------------------------------------------------------------------------

    async def flush(self, checkpoint: int | None) -> None:
        """Make everything cached durable in entry logs + index; record ``checkpoint``."""
        if self.flush_if_idle(checkpoint):
            return
        async with self._flush_lock:
            await self._flush_locked(checkpoint)

    def flush_if_idle(self, checkpoint: int | None) -> bool:
        """``flush`` when it has nothing to write, at once: True if it had not.

        What _flush_locked does when idle, without taking the lock: a lock nobody holds or
        waits for is taken and given back with nothing run between, so this is the same
        step. An idle bookie flushes every interval: in the simulator this saves 1% of a
        history's instructions (callgrind)."""
        if self._idle(checkpoint) and _uncontended(self._flush_lock):
            self.flushes += 1
            return True
        return False

    def _idle(self, checkpoint: int | None) -> bool:
        """Nothing cached, no state changed, the journal where the index has it: a flush
        would rewrite what the index holds."""
        return (
            not self.cache
            and not self._dirty
            and not self._deleted
            and not self.tombstones.pending
            and checkpoint == self._checkpoint
        )

    async def _flush_locked(self, checkpoint: int | None, cut: CutSpec | None = None) -> None:
        if cut is None and self._idle(checkpoint):
            self.flushes += 1  # an idle bookie flushes often: nothing to write
            return
        # The cache is handed to the flush whole and adds start a new one: nothing is copied
        # or removed entry by entry (the flush was a third of a bookie's work per add).
        # Entries being flushed stay readable until the index has them.
        snapshot, self.cache, self.cache_bytes = self.cache, {}, 0
        self._flushing = snapshot
        infos = [(lid, self._infos.get(lid)) for lid in self._dirty]
        infos += [(lid, None) for lid in self._deleted]
        self._dirty.clear()
        deleted = set(self._deleted)
        graves = dict(self.tombstones.pending)
        written = infos
        if cut is not None and cut[1] == "all":
            written = [(lid, info) for lid, info in infos if lid != cut[0]] + [(cut[0], None)]
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._flush_sync, snapshot, written, checkpoint, cut, graves
            )
        except BaseException:
            # Nothing of this flush is known to be in the index: keep every state dirty,
            # or a later flush would move the checkpoint past journal records (a fence)
            # whose state never reached the index; and keep the entries cached, under any
            # written meanwhile.
            self._dirty.update(lid for lid, info in infos if info is not None)
            if not self._crashed:
                for lid, entries in snapshot.items():
                    entries.update(self.cache.get(lid, {}))
                    self.cache[lid] = entries
                self.cache_bytes = sum(
                    len(data) for entries in self.cache.values() for data in entries.values()
                )
            self._changed()
            raise
        finally:
            self._flushing = {}
        self._deleted -= deleted
        self.tombstones.written(graves)
        if checkpoint is not None:
            self._checkpoint = checkpoint
        self.flushes += 1

    def _flush_sync(
        self,
        snapshot: dict[int, dict[int, bytes]],
        infos: list[tuple[int, LedgerInfo | None]],
        checkpoint: int | None,
        cut: CutSpec | None = None,
        graves: dict[int, bytes] | None = None,
    ) -> None:
        locations = []
        first_log = self.logs.current_id
        for lid, entries in snapshot.items():
            ids = sorted(entries)  # ids, not (id, entry) pairs: no object per entry
            locations.append((lid, ids, self.logs.append_many(lid, ids, entries)))
        log_ends = None
        if locations:
            self.logs.sync()
            log_ends = self.logs.ends_since(first_log)
        deletes = [
            (lid, eid) for lid, info in infos if info is None for eid in self.index.entry_ids(lid)
        ]
        if cut is not None and cut[1] != "all":
            lid, how, at, only = cut
            deletes += [(lid, e) for e in self.index.entry_ids(lid) if not _keeps(how, at, e, only)]
        self.index.commit(locations, infos, deletes, checkpoint, log_ends, graves)

    def exclusive(self) -> asyncio.Lock:
        """Held by a cut (``cut_locked``) and what must come just before it: no flush runs
        meanwhile, so the index stays as it was when the cut was decided."""
        return self._flush_lock

    async def cut(self, ledger_id: int, how: Cut, at: int, checkpoint: int) -> None:
        """Durably drop a ledger's entries: all of them, those below ``at``, or those above it.

        Rare (ledger deletion, trimming), so it flushes everything cached, in the same
        synced index batch as the deletions and a checkpoint, so that journal replay can
        never bring the dropped entries back.
        """
        async with self._flush_lock:
            self.drop_cached(ledger_id, how, at)
            await self.cut_locked(ledger_id, how, at, checkpoint)
            await self.collect_locked(ledger_id)

    def drop_cached(
        self, ledger_id: int, how: Cut, at: int, only: frozenset[int] | None = None
    ) -> None:
        """The cut's effect on the write cache: the point in time the cut applies at (what
        arrives later is kept, as a journal replay of the cut's record would keep it).
        ``only``: the cut drops no entry but these (a truncation's, truncation.py)."""
        cached = self.cache.get(ledger_id)
        if cached is None:
            return
        for eid in [e for e in cached if not _keeps(how, at, e, only)]:
            self.cache_bytes -= len(cached.pop(eid))

    def cut_replayed(
        self, ledger_id: int, how: Cut, at: int, only: frozenset[int] | None = None
    ) -> None:
        """A cut redone by journal replay, before the bookie serves: its record is before the
        checkpoint the boot's flush will write, so a crash before then redoes it again."""
        self.drop_cached(ledger_id, how, at, only)
        doomed = [
            (ledger_id, e) for e in self.index.entry_ids(ledger_id) if not _keeps(how, at, e, only)
        ]
        if doomed:
            self.index.commit([], [], doomed, None)

    async def cut_locked(
        self,
        ledger_id: int,
        how: Cut,
        at: int,
        checkpoint: int,
        only: frozenset[int] | None = None,
    ) -> None:
        """``cut`` (the cache already cut, ``drop_cached``) with ``exclusive()`` held: the
        flush, the deletions, the ledger states (a truncation's flag among them) and the
        checkpoint in one synced index batch, so no crash can keep one without the others."""
        await self._flush_locked(checkpoint, (ledger_id, how, at, only))
        if how == "all":
            self._infos.pop(ledger_id, None)
            self._dirty.discard(ledger_id)
            gone = self.cache.pop(ledger_id, {})  # arrived for a ledger being deleted
            self.cache_bytes -= sum(map(len, gone.values()))

    async def drop_ledgers(self, ledger_ids: Collection[int], checkpoint: int) -> None:
        """Durably drop everything of each ledger, its entries and its state, and keep its
        tombstone: one synced index batch for all, with ``checkpoint``, so that journal
        replay cannot bring any back (a deletion, or garbage collection). The tombstones
        hold at once, before the lock is waited for: nothing arriving meanwhile is
        acknowledged and then dropped, or brings a ledger back (tombstones.py)."""
        for lid in ledger_ids:
            info = self.info(lid)
            key = bytes.fromhex(info.master_key) if info is not None else b""
            self.tombstones.bury(lid, key)
            self._infos.pop(lid, None)
            self._dirty.discard(lid)
            self._deleted.add(lid)
        async with self._flush_lock:
            for lid in ledger_ids:
                self.drop_cached(lid, "all", 0)
                self._infos.pop(lid, None)
                self._dirty.discard(lid)
                self._deleted.add(lid)
            await self._flush_locked(checkpoint)
            for lid in ledger_ids:
                gone = self.cache.pop(lid, {})  # arrived for a ledger being dropped
                self.cache_bytes -= sum(map(len, gone.values()))
            await self.collect_locked(*ledger_ids)

    async def collect_locked(self, *ledger_ids: int) -> None:
        """After a cut, with ``exclusive()`` still held: free the space it left behind."""
        # Entry logs that only held dropped entries (trimmed unbounded ledgers, deleted
        # ledgers) can go: the index no longer points into them (synced above). Under the
        # lock: no flush may be between writing an entry log and indexing it meanwhile.
        loop = asyncio.get_running_loop()
        live = await loop.run_in_executor(self._executor, self.index.live_logs)
        await loop.run_in_executor(self._executor, self.index.forget_logs_except, live)
        self.logs.remove_unreferenced(live)
        for ledger_id in ledger_ids:
            await loop.run_in_executor(self._executor, self.index.compact_ledger, ledger_id)

    def close(self) -> None:
        self._executor.submit(self._close_files).result()  # after any flush still running

    def _close_files(self) -> None:
        try:
            self.logs.close()
        finally:
            self.index.close()  # its lock must go whatever happened: the next boot needs it
            self._dir_lock.release()

    def crash(self) -> None:
        self._crashed = True
        self.cache, self._flushing = {}, {}  # rebound, not cleared: a flush may be reading
        self._infos.clear()
        # On the flush thread, after the flush it may be in the middle of: closing LevelDB
        # under a running batch or iterator crashes the process, and truncating an entry
        # log while it is written to would keep bytes that were never fsync'd.
        self._executor.submit(self._crash_files).result()

    def _crash_files(self) -> None:
        try:
            self.logs.crash()
        finally:
            self.index.close()
            self._dir_lock.release()


def _keeps(how: Cut, at: int, entry_id: int, only: frozenset[int] | None = None) -> bool:
    if only is not None and entry_id not in only:
        return True
    return (how == "below" and entry_id >= at) or (how == "above" and entry_id <= at)


def _uncontended(lock: asyncio.Lock) -> bool:
    """``lock`` is free and nobody waits for it: acquiring it would not yield. (Its
    waiters are private; where they cannot be seen, it counts as contended.)"""
    return not lock.locked() and not getattr(lock, "_waiters", True)
