"""The bookie: one object per bookie, put together from its parts (embedlog/bookie/base.py
lists them); here its construction, its lifecycle (start, clean stop, crash), its status,
and the ledger state others may inspect or set. Requests go to its request parts
(``Bookie.requests``: requests.py, adds.py, refusals.py).

Lifecycle: NEW -> BOOTING (embedlog/bookie/boot.py) -> SERVING -> STOPPED or CRASHED.
A bookie object boots once; a bookie that stops or crashes is booted again as a new
object on the same directories.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from concurrent.futures import Executor
from typing import Any

from attrs import evolve

from embedlog.bookie.adds import Adds, parse_batch
from embedlog.bookie.base import BookieState, journal_state
from embedlog.bookie.boot import BootEnv, BootFailed, BootReport, boot, end_failed_boot, final_flush
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK, Disk
from embedlog.bookie.diskthread import DiskThread
from embedlog.bookie.flushing import Flusher
from embedlog.bookie.gc import GarbageCollector
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.journal import Journal
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.refusals import Refusals
from embedlog.bookie.registration import Registration
from embedlog.bookie.repair import ClientFactory, Repairer
from embedlog.bookie.repair_services import RepairServices
from embedlog.bookie.requests import Requests
from embedlog.bookie.storage import LedgerStorage
from embedlog.bookie.verdicts import Mode
from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.errors import BookieIOError, LedgerDeletedError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore
from embedlog.metrics import BookieMetrics
from embedlog.transport.pause import PauseGate
from embedlog.transport.server import Reply
from embedlog.wire.messages import Request, Response

__all__ = ["Bookie", "BookieState", "parse_batch"]

log = logging.getLogger(__name__)


def _disk_thread(name: str) -> Executor:
    return DiskThread(name)


class Bookie:
    # NEW, BOOTING, SERVING, STOPPED or CRASHED: a plain attribute, which the add path
    # reads for every request (base.Served).
    state: BookieState
    storage: LedgerStorage | None  # both set by the boot
    journal: Journal | None
    mode: Mode  # what the admission verdicts ask of the bookie as a whole (verdicts.py)
    booted: BootReport | None  # what the boot found, once it succeeded (boot.py)
    # What the unclean-shutdown bit said when this boot read it (None: not read yet).
    found_unclean: bool | None
    left_unclean: bool  # a failed boot left the unclean-shutdown bit set
    _journal_exec: Executor  # the journal's disk work (writes, fsyncs)
    _flush_exec: Executor  # the flushes' disk work
    gc: GarbageCollector  # drops deleted ledgers, every gc_interval (gc.py)
    registration: Registration  # keeps it registered through session expiries
    _gc_task: asyncio.Task[None] | None

    def __init__(
        self,
        config: BookieConfig,
        metadata: MetadataClient,
        session: MetadataStore,
        *,
        client_factory: ClientFactory | None = None,
        disk_executor: Callable[[str], Executor] | None = None,
        disk: Disk = REAL_DISK,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``client_factory`` gives BP-46 repair a client to recover ledgers and reach peers
        (embedlog/repair_client.py makes one of a Client).

        ``disk_executor(name)`` makes the executor for the journal's and for the flush's
        disk work (default: a thread each); the simulator's runs them on its one thread.
        ``disk``: the bookie's files (embedlog/bookie/disk.py; the simulator's are in
        memory). ``clock``: where the bookie reads the time (embedlog/clock.py)."""
        self.config = config
        self.clock = clock
        self.disk = disk
        self.metadata = metadata
        self.session = session
        self.state = BookieState.NEW
        self.booted = None
        self.found_unclean = None
        self.left_unclean = False  # a failed boot left the unclean-shutdown bit set
        self.repair = RepairServices(self, client_factory, clock)  # BP-46 phase two
        self.gc = GarbageCollector(self, config.gc_interval)
        self.registration = Registration(self)
        self._gc_task = None
        self.mode = Mode(readonly=config.readonly, skip_limbo=config.unsafe_skip_limbo)
        self.storage = None
        self.journal = None
        executor = disk_executor or _disk_thread
        self._journal_exec = executor(f"{config.bookie_id}-journal")
        self._flush_exec = executor(f"{config.bookie_id}-flush")
        self.flusher = Flusher(self)
        self.ledgers = LedgerTable()
        self.boot_seconds = 0.0
        self.metrics = BookieMetrics()  # embedlog/metrics.py: what operators watch
        self.pause_gate = PauseGate()  # LocalCluster.pause_bookie: requests held, not served
        # The request parts: each sees this bookie only as ``base.Served``.
        refusals = Refusals(self, self.metrics, self.flusher.met)
        adds = Adds(self, self.ledgers, refusals, self.flusher, self.metrics, config)
        self.requests = Requests(self, adds, refusals, self.ledgers, self.metrics, config, clock)

    # -- what every part reads -----------------------------------------------------------------

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id

    @property
    def serving(self) -> bool:
        return self.state is BookieState.SERVING

    @property
    def readonly(self) -> bool:
        """Refuses adds with EREADONLY (configured, or a disk that failed)."""
        return self.mode.readonly

    @readonly.setter
    def readonly(self, value: bool) -> None:
        if value != self.mode.readonly:
            self.mode = evolve(self.mode, readonly=value)

    async def call_metadata(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, on a thread if the metadata store blocks (ZooKeeper's does)."""
        if self.metadata.store.blocking_io:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return fn(*args)

    # -- requests (requests.py) ------------------------------------------------------------------

    async def handle(self, req: Request) -> Response:
        return await self.requests.handle(req)

    def handle_nowait(self, req: Request, reply: Reply) -> asyncio.Task[Response] | None:
        """``Requests.handle_nowait``: plain adds and batches answered without a task."""
        return self.requests.handle_nowait(req, reply)

    async def drop_ledgers(self, lids: Collection[int]) -> None:
        """``Requests.drop_ledgers``: what garbage collection drops (gc.py)."""
        await self.requests.drop_ledgers(lids)

    async def start(self) -> None:
        if self.state is not BookieState.NEW:
            raise RuntimeError(f"bookie {self.bookie_id} objects boot once; make a new one")
        self.state = BookieState.BOOTING
        started = self.clock.monotonic()
        try:
            found = await boot(self._boot_env())
        except BaseException:
            self._abandon()
            raise
        if isinstance(found, BootFailed):
            self.found_unclean, self.left_unclean = found.found_unclean, found.left_unclean
            self._abandon()
            raise found.error
        try:
            self._apply(found)
            self._serve(found)
        except Exception:
            await self._end_failed_boot()
            self._abandon()
            raise
        except BaseException:
            self._abandon()
            raise
        self.boot_seconds = self.clock.monotonic() - started
        self.state = BookieState.SERVING
        log.info("bookie %s serving (boot %.3fs)", self.bookie_id, self.boot_seconds)
        await self.publish_status()

    # What the last boot found (False, None, empty before a boot succeeded).

    @property
    def unclean_shutdown_detected(self) -> bool:
        return self.booted is not None and self.booted.unclean_shutdown_detected

    @property
    def cookie_problem(self) -> str | None:
        """The cookie check's problems, when auto_fix_cookies fixed them."""
        return None if self.booted is None else self.booted.cookie_problem

    @property
    def suspicion(self) -> list[str]:
        """Why BP-46 phase one ran on this boot (empty: it did not)."""
        return [] if self.booted is None else list(self.booted.suspicion)

    @property
    def protected_ledgers(self) -> int:
        """Ledgers phase one fenced or put in limbo."""
        return 0 if self.booted is None else self.booted.protected_ledgers

    @property
    def phase_one_done(self) -> bool:
        """Durably, on this boot (which may still fail after it, registering)."""
        return self.booted is not None and self.booted.phase_one_done

    def _boot_env(self) -> BootEnv:
        return BootEnv(
            config=self.config,
            metadata=self.metadata,
            disk=self.disk,
            journal_exec=self._journal_exec,
            flush_exec=self._flush_exec,
            metrics=self.metrics,
            clock=self.clock,
            ledgers=self.ledgers,
            all_metadata=lambda: self.repair.scan_metadata(lambda md: True),
        )

    def _apply(self, found: BootReport) -> None:
        """Take over what the boot opened, and keep what it found for ``status``."""
        self.storage, self.journal = found.storage, found.journal
        self.found_unclean = found.found_unclean
        self.booted = found

    def _serve(self, found: BootReport) -> None:
        """After the boot: flushes, the registration, repair and garbage collection."""
        cfg = self.config
        self.flusher.start()
        self.registration.watch()  # first: an expiry right after registering is not missed
        self.metadata.register_bookie(
            self.session,
            self.bookie_id,
            {"address": cfg.advertised_address, "rack": cfg.rack},
            readonly=self.readonly,
        )
        if found.repair_pending and cfg.run_repair:
            self.repair.start()
        if cfg.gc_interval:
            self._gc_task = asyncio.get_running_loop().create_task(self.gc.run())

    async def _end_failed_boot(self) -> None:
        """The boot succeeded but what follows it failed (registering): the bookie never
        served, and leaves the unclean-shutdown bit as ``boot.end_failed_boot`` says."""
        assert self.found_unclean is not None and self.storage is not None
        self.left_unclean = True
        self.flusher.cancel()  # no periodic flush beside the last one
        self.left_unclean = await end_failed_boot(
            self.bookie_id, self.found_unclean, self.storage, self.journal
        )

    async def publish_status(self) -> None:
        """Leave the status where ``embedlog bookie status`` (any process) can read it."""
        status = self.status()
        try:
            await self.call_metadata(self.metadata.publish_bookie_status, self.bookie_id, status)
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
        if self.state is not BookieState.SERVING:
            return
        self.state = BookieState.STOPPED
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
            self.flusher.cancel()
            if self.repair.task is not None:
                self.repair.task.cancel()
            try:
                assert self.journal is not None and self.storage is not None
                await final_flush(self.storage, self.journal)
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
        if self.state not in (BookieState.SERVING, BookieState.BOOTING):
            return
        self.state = BookieState.CRASHED
        self.flusher.cancel(early=True)
        for task in (self.repair.task, self._gc_task):
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
        self.state = BookieState.STOPPED
        self.flusher.cancel()
        if self._gc_task is not None:
            self._gc_task.cancel()
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
        self.ledgers.wake_all()

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
        await journal_state(self, self.ledgers, ledger_id, info)

    @property
    def first_live(self) -> dict[int, int]:
        """Limbo ledger -> the first entry a writer sent after this boot (repair.py; kept
        only under unsafe_limbo_clears_at_first_resend)."""
        return self.ledgers.first_live

    # -- flushes (flushing.py, Flushed) ---------------------------------------------------------

    async def flush(self) -> None:
        """Write the write cache to the entry logs and the index; the journal before the
        checkpoint goes."""
        await self.flusher.flush()

    def _go_readonly(self) -> None:
        self.flusher.go_readonly()

    # -- BP-46 repair (repair_services.py, RepairHost) -----------------------------------------

    @property
    def repairer(self) -> Repairer:
        return self.repair.repairer

    def limbo_ledgers(self) -> list[int]:
        return self.repair.limbo_ledgers()

    async def clear_limbo(self, ledger_ids: list[int]) -> None:
        await self.repair.clear_limbo(ledger_ids)

    def wait_repaired_nowait(self) -> bool:
        """True once no BP-46 repair is pending or running."""
        return self.repair.wait_repaired_nowait()

    def journal_states(self, states: dict[int, LedgerInfo]) -> None:
        for lid, info in states.items():
            journal_state(self, self.ledgers, lid, info)

    async def sync(self) -> None:
        assert self.journal is not None
        await self.journal.sync()

    # -- what garbage collection asks (gc.py, Collectable) ------------------------------------

    def held_ledgers(self) -> list[int] | None:
        if self.storage is None or self.journal is None:
            return None
        return self.storage.ledger_ids()

    async def listed_ledgers(self) -> list[int]:
        listed: list[int] = await self.call_metadata(lambda: list(self.metadata.list_ledgers()))
        return listed

    async def ledger_is_gone(self, ledger_id: int) -> bool:
        gone: bool = await self.call_metadata(self.metadata.ledger_is_gone, ledger_id)
        return gone

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
            "state": self.state.value,
            "readonly": self.readonly,
            "unclean_shutdown_detected": self.unclean_shutdown_detected,
            "cookie_problem": self.cookie_problem,
            "suspicious_boot": self.suspicion,
            "protected_ledgers": self.protected_ledgers,
            "boot_seconds": round(self.boot_seconds, 3),
            "repair": self.repair.repairer.progress.as_dict(self.clock.monotonic()),
            "garbage_collection": {"rounds": self.gc.rounds, "dropped": self.gc.collected},
            "registered_again": self.registration.renewals,
        }
        if self.storage is not None and self.state is BookieState.SERVING:
            ids = self.storage.ledger_ids()
            out.update(
                ledgers=len(ids),
                limbo_ledgers=sum(1 for i in ids if (inf := self.storage.info(i)) and inf.limbo),
                write_cache_bytes=self.storage.cache_bytes,
                entry_log_bytes=self.storage.logs.size_on_disk(),
                entry_log_damage=self.storage.damage,
                flushes=self.storage.flushes,
            )
        if self.journal is not None and self.state is BookieState.SERVING:
            out.update(
                journal_bytes=self.journal.size_on_disk(),
                journal_batches=self.journal.batches,
                journal_records=self.journal.records,
            )
        return out
