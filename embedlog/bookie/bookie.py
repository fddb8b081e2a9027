"""The bookie: one object per bookie, put together from its parts (embedlog/bookie/base.py
lists them); here its construction, its lifecycle (start, clean stop, crash), its status,
and the ledger state others may inspect or set.

Lifecycle: NEW -> BOOTING (embedlog/bookie/boot.py) -> SERVING -> STOPPED or CRASHED.
A bookie object boots once; a bookie that stops or crashes is booted again as a new
object on the same directories.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from embedlog.bookie.adds import parse_batch
from embedlog.bookie.base import BookieState
from embedlog.bookie.boot import Boot
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK, Disk
from embedlog.bookie.flushing import FlushHealth
from embedlog.bookie.gc import GarbageCollector
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.registration import Registration
from embedlog.bookie.repair import Repairer
from embedlog.bookie.requests import Requests
from embedlog.bookie.verdicts import Mode
from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.errors import BookieIOError, LedgerDeletedError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore
from embedlog.metrics import BookieMetrics
from embedlog.transport.pause import PauseGate

if TYPE_CHECKING:
    from embedlog.client import Client

__all__ = ["Bookie", "BookieState", "parse_batch"]

log = logging.getLogger(__name__)


def _disk_thread(name: str) -> Executor:
    return ThreadPoolExecutor(1, thread_name_prefix=name)


class Bookie(Requests, Boot):
    def __init__(
        self,
        config: BookieConfig,
        metadata: MetadataClient,
        session: MetadataStore,
        *,
        client_factory: Callable[[], Client] | None = None,
        disk_executor: Callable[[str], Executor] | None = None,
        disk: Disk = REAL_DISK,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``client_factory`` gives BP-46 repair a client to recover ledgers and reach peers.

        ``disk_executor(name)`` makes the executor for the journal's and for the flush's
        disk work (default: a thread each); the simulator's runs them on its one thread.
        ``disk``: the bookie's files (embedlog/bookie/disk.py; the simulator's are in
        memory). ``clock``: where the bookie reads the time (embedlog/clock.py)."""
        self.config = config
        self.clock = clock
        self.disk = disk
        self.metadata = metadata
        self.session = session
        self._state = BookieState.NEW
        self.unclean_shutdown_detected = False
        self.cookie_problem = None
        self.suspicion = []
        self.protected_ledgers = 0
        self.phase_one_done = False
        self.found_unclean = None
        self.left_unclean = False  # a failed boot left the unclean-shutdown bit set
        # Limbo ledger -> first entry a writer sent after this boot (kept only under
        # unsafe_limbo_clears_at_first_resend).
        self.first_live = {}
        self.repairer = Repairer(self, client_factory, config.repair_retry_interval)
        self._repair_task = None
        self.gc = GarbageCollector(self, config.gc_interval)
        self.registration = Registration(self)
        self._gc_task = None
        self.mode = Mode(readonly=config.readonly, skip_limbo=config.unsafe_skip_limbo)
        self.storage = None
        self.journal = None
        executor = disk_executor or _disk_thread
        self._journal_exec = executor(f"{config.bookie_id}-journal")
        self._flush_exec = executor(f"{config.bookie_id}-flush")
        self._flusher = None
        self._background_flush = None
        self.flush_health = FlushHealth(config.flush_interval, config.flush_retry_max_interval)
        self._lac_changed = {}
        self._unsynced_state = {}
        self.boot_seconds = 0.0
        self.metrics = BookieMetrics()  # embedlog/metrics.py: what operators watch
        self.pause_gate = PauseGate()  # LocalCluster.pause_bookie: requests held, not served

    async def start(self) -> None:
        if self._state is not BookieState.NEW:
            raise RuntimeError(f"bookie {self.bookie_id} objects boot once; make a new one")
        self._state = BookieState.BOOTING
        started = time.monotonic()
        try:
            await self._boot()
        except Exception:
            await self._end_failed_boot()
            self._abandon()
            raise
        except BaseException:
            self._abandon()
            raise
        self.boot_seconds = time.monotonic() - started
        self._state = BookieState.SERVING
        log.info("bookie %s serving (boot %.3fs)", self.bookie_id, self.boot_seconds)
        await self.publish_status()

    async def _end_failed_boot(self) -> None:
        """A boot that failed never served, so it acknowledged nothing: when it found the
        last shutdown clean, it leaves it clean (its own work flushed first), as a clean
        stop does. Left set, the bit made the next boot suspicious of a loss that cannot
        have happened; with the journal off, that boot put every ledger in limbo, and two
        bookies of one write set in limbo leave a stream that no takeover can settle
        (simulator seed 9483 of ``unbounded-nojournal``). A flush that fails leaves the
        bit set, as a failed clean stop does."""
        if self.found_unclean is None or self.storage is None:
            return  # the bit was not touched
        self.left_unclean = True
        if self._flusher is not None:
            self._flusher.cancel()  # no periodic flush beside the last one
        if self.found_unclean:
            return  # the last shutdown was not clean: the next boot must know
        try:
            if self.journal is not None:
                await self._final_flush()
            else:
                self.storage.index.set_unclean_bit(False)
        except Exception as exc:
            log.warning(
                "bookie %s: its failed boot could not finish cleanly (%s); the next boot "
                "treats the last shutdown as unclean",
                *(self.bookie_id, exc),
            )
            return
        self.left_unclean = False

    async def publish_status(self) -> None:
        """Leave the status where ``embedlog bookie status`` (any process) can read it."""
        status = self.status()
        try:
            await self._blocking_meta(self.metadata.publish_bookie_status, self.bookie_id, status)
        except Exception as exc:  # status is informative: never stop repair for it
            log.debug("bookie %s: could not publish status: %s", self.bookie_id, exc)

    # -- stop and crash ----------------------------------------------------------------------

    async def stop(self) -> None:
        """Clean shutdown: flush, clear the unclean-shutdown bit, release every file.

        The files and the index are released whatever fails, so the bookie can boot again
        once the cause is fixed. When the final flush fails (a full disk) the unclean bit
        stays set, so the next boot replays the journal as after a crash; this then raises
        BookieIOError saying so, once everything is released.
        """
        if self._state is not BookieState.SERVING:
            return
        self._state = BookieState.STOPPED
        # Before anything awaited: no garbage collection round may start on a stopped bookie.
        if self._gc_task is not None:
            self._gc_task.cancel()
        self.registration.cancel()
        try:
            await self.publish_status()
            try:
                self.metadata.unregister_bookie(self.session, self.bookie_id)
            except Exception as exc:  # the end of its session removes the registration too
                log.warning("bookie %s: could not unregister: %s", self.bookie_id, exc)
            for task in (self._flusher, self._repair_task):
                if task is not None:
                    task.cancel()
            try:
                await self._final_flush()
            except Exception as exc:
                log.error("bookie %s: clean shutdown failed: %s", self.bookie_id, exc)
                raise BookieIOError(
                    f"bookie {self.bookie_id} stopped, but not cleanly: its final flush failed "
                    f"({exc}). Its files are released; its next boot replays the journal as "
                    "after a crash, so nothing acknowledged is lost. Free space (or fix the "
                    "disk) before starting it again."
                ) from exc
        finally:
            await self._release_files()

    async def _final_flush(self) -> None:
        assert self.journal is not None and self.storage is not None
        await self.journal.sync()
        await self.storage.flush(self.journal.lsn)
        self.journal.remove_before(self.journal.lsn)
        self.storage.index.set_unclean_bit(False)  # only once everything above held

    async def _release_files(self) -> None:
        if self.journal is not None:
            try:
                await self.journal.close()
            except OSError:
                pass  # the final flush failed on it already, and said so
        if self.storage is not None:
            self.storage.close()
        self._wake_all()
        self._shutdown_executors()

    def crash(self) -> None:
        """Abrupt stop: everything not yet durable is lost."""
        if self._state not in (BookieState.SERVING, BookieState.BOOTING):
            return
        self._state = BookieState.CRASHED
        for task in (self._flusher, self._background_flush, self._repair_task, self._gc_task):
            if task is not None:
                task.cancel()
        self.registration.cancel()
        if self.journal is not None:
            self.journal.crash()
        if self.storage is not None:
            self.storage.crash()
        self._wake_all()
        self._shutdown_executors()

    def _abandon(self) -> None:
        self._state = BookieState.STOPPED
        for task in (self._flusher, self._gc_task):
            if task is not None:
                task.cancel()
        self.registration.cancel()
        if self.journal is not None:
            self.journal.crash()
        if self.storage is not None:
            try:
                self.storage.close()
            except Exception:
                pass
        self._shutdown_executors()

    def _shutdown_executors(self) -> None:
        self._journal_exec.shutdown(wait=False)
        self._flush_exec.shutdown(wait=False)

    def _wake_all(self) -> None:
        for ev in self._lac_changed.values():
            ev.set()

    # -- ledger state ------------------------------------------------------------------------

    async def set_ledger_state(
        self,
        ledger_id: int,
        *,
        fenced: bool | None = None,
        limbo: bool | None = None,
        master_key: bytes | None = None,
    ) -> None:
        """Durably change a ledger's flags. A record it creates without ``master_key``
        accepts no request that changes the ledger's state (keys.py). LedgerDeletedError
        for a ledger the bookie dropped (tombstones.py)."""
        assert self.storage is not None
        if self.storage.dropped(ledger_id):
            raise LedgerDeletedError(
                f"bookie {self.bookie_id} dropped ledger {ledger_id} (it was deleted) and "
                "keeps a tombstone of it: it takes no state for it any more"
            )
        info = self.storage.info(ledger_id) or LedgerInfo()
        if fenced is not None:
            info.fenced = fenced
        if limbo is not None:
            info.limbo = limbo
        if master_key is not None and not info.master_key:
            info.master_key = master_key.hex()
        fut = self._journal_state(ledger_id, info, wait=True)
        assert fut is not None
        await fut

    def ledger_entries(self, ledger_id: int) -> list[int]:
        """The entry ids this bookie holds for ``ledger_id`` (cache and index)."""
        assert self.storage is not None
        return self.storage.entry_ids(ledger_id)

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        assert self.storage is not None
        return self.storage.info(ledger_id)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bookie_id": self.bookie_id,
            "state": self._state.value,
            "readonly": self.readonly,
            "unclean_shutdown_detected": self.unclean_shutdown_detected,
            "cookie_problem": self.cookie_problem,
            "suspicious_boot": self.suspicion,
            "protected_ledgers": self.protected_ledgers,
            "boot_seconds": round(self.boot_seconds, 3),
            "repair": self.repairer.progress.as_dict(),
            "garbage_collection": {"rounds": self.gc.rounds, "dropped": self.gc.collected},
            "registered_again": self.registration.renewals,
        }
        if self.storage is not None and self._state is BookieState.SERVING:
            ids = self.storage.ledger_ids()
            out.update(
                ledgers=len(ids),
                limbo_ledgers=sum(1 for i in ids if (inf := self.storage.info(i)) and inf.limbo),
                write_cache_bytes=self.storage.cache_bytes,
                entry_log_bytes=self.storage.logs.size_on_disk(),
                entry_log_damage=self.storage.damage,
                flushes=self.storage.flushes,
            )
        if self.journal is not None and self._state is BookieState.SERVING:
            out.update(
                journal_bytes=self.journal.size_on_disk(),
                journal_batches=self.journal.batches,
                journal_records=self.journal.records,
            )
        return out
