"""The boot: cookie check -> open storage -> unclean-shutdown check -> journal replay
-> BP-46 phase one when a check failed (fence, limbo, cookie fix) -> register -> serve
-> BP-46 phase two in the background (embedlog/bookie/repair.py).

A part of the Bookie (embedlog/bookie/base.py); ``Bookie.start`` runs it once, and
abandons the bookie's files if it fails.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from embedlog.bookie import cookie as cookies
from embedlog.bookie import records
from embedlog.bookie.flushing import Flushing
from embedlog.bookie.gc import GarbageCollector
from embedlog.bookie.index import NOJOURNAL, PROTECT, REPAIR, LedgerInfo
from embedlog.bookie.integrity import suspicion_reasons
from embedlog.bookie.journal import Journal, Replay
from embedlog.bookie.repair_services import RepairServices
from embedlog.bookie.storage import LedgerStorage
from embedlog.errors import BookieIOError

log = logging.getLogger(__name__)


class Boot(RepairServices, Flushing):
    unclean_shutdown_detected: bool
    cookie_problem: str | None  # the cookie check's problems, when auto_fix_cookies fixes them
    suspicion: list[str]  # why BP-46 phase one ran on this boot (empty: it did not)
    protected_ledgers: int  # ledgers phase one fenced or put in limbo
    phase_one_done: bool  # durably, on this boot (which may still fail after it)
    # What the unclean-shutdown bit said when this boot read it (None: not read yet).
    found_unclean: bool | None
    _journal_exec: Executor  # the journal's disk work (writes, fsyncs)
    _flush_exec: Executor  # the flushes' disk work
    gc: GarbageCollector  # drops deleted ledgers, every gc_interval (gc.py)
    _gc_task: asyncio.Task[None] | None

    async def _boot(self) -> None:
        cfg, disk = self.config, self.disk
        try:
            disk.mkdir(cfg.data_dir)
        except OSError as exc:
            raise BookieIOError(
                f"cannot create the bookie directory {cfg.data_dir}: {exc}; check the path and "
                "its permissions"
            ) from exc
        check = cookies.check_cookies(cfg, self.metadata, disk)
        if check.foreign:
            raise cookies.cookie_error(cfg, list(check.foreign + check.problems), fixable=False)
        if check.problems:
            self.cookie_problem = "; ".join(check.problems)
            if not cfg.auto_fix_cookies:
                raise cookies.cookie_error(cfg, list(check.problems))
        first_boot = check.first_boot
        # A new or wiped index disk (no cookie yet) gets a new LevelDB; any other must
        # already have one, or it was damaged (see LedgerIndex).
        new_index = first_boot or not disk.exists(cfg.index_dir / cookies.COOKIE_FILE)
        for d in cookies.cookie_dirs(cfg):
            try:
                disk.mkdir(d)
            except OSError as exc:
                raise BookieIOError(f"cannot create {d}: {exc}") from exc
        if first_boot:
            cookies.write_cookies(cfg, self.metadata, disk)
        self.storage = LedgerStorage(cfg, self._flush_exec, new_index=new_index, disk=disk)
        index = self.storage.index
        self.found_unclean = index.unclean_bit()
        self.unclean_shutdown_detected = self.found_unclean and not first_boot
        self.suspicion = suspicion_reasons(
            unclean_shutdown=self.unclean_shutdown_detected,
            ran_without_journal=index.marker(NOJOURNAL) or not cfg.journal_write_data,
            cookie_problems=check.problems,
            protection_pending=index.marker(PROTECT),
        )
        if self.suspicion:
            # Before anything else: a crash during phase one must run it again next time,
            # even after the cookies below were fixed and the unclean bit is gone.
            index.set_marker(PROTECT, True)
        index.set_unclean_bit(True)
        index.set_marker(NOJOURNAL, not cfg.journal_write_data)
        end, damage = self._replay(index.checkpoint())
        if damage:
            # Records the bookie may have acknowledged are gone. Marked before the flush
            # below moves the checkpoint past them: a crash before phase one is done must
            # not find a journal that looks whole.
            index.set_marker(PROTECT, True)
            self.suspicion += damage
        self.journal = Journal(cfg, self._journal_exec, end, disk, self.metrics)
        self.journal.start()
        await self.storage.flush(self.journal.lsn)
        self.journal.remove_before(self.journal.lsn)
        if self.suspicion:
            await self._phase_one()
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        self.registration.watch()  # first: an expiry right after registering is not missed
        self.metadata.register_bookie(
            self.session,
            self.bookie_id,
            {"address": cfg.advertised_address, "rack": cfg.rack},
            readonly=self.readonly,
        )
        if index.marker(REPAIR) and cfg.run_repair:
            self._repair_task = asyncio.get_running_loop().create_task(self._run_repair())
        if cfg.gc_interval:
            self._gc_task = asyncio.get_running_loop().create_task(self.gc.run())

    def _replay(self, checkpoint: int) -> tuple[int, list[str]]:
        """Apply the journal from ``checkpoint``; returns the LSN after its end and the damage
        found in it (records lost to anything but a torn tail)."""
        assert self.storage is not None
        count = 0
        journal = Replay(self.config.journal_dir, checkpoint, self.disk)
        for _lsn, payload in journal:
            records.replay(self.storage, payload)
            count += 1
        if count:
            log.info("bookie %s replayed %d journal records", self.bookie_id, count)
        return max(journal.end, checkpoint), [d.describe() for d in journal.damage]

    async def _phase_one(self) -> None:
        """BP-46 phase one: protect every ledger this bookie belongs to, before serving."""
        assert self.storage is not None
        cfg = self.config
        log.warning(
            "bookie %s may have lost acknowledged data (%s): fencing its ledgers and putting "
            "them in limbo before serving",
            self.bookie_id,
            "; ".join(self.suspicion),
        )
        ledgers = await self.ledgers_to_protect()
        assert self.journal is not None
        for md, plan in ledgers:
            info = self.storage.info(md.ledger_id) or LedgerInfo()
            if not info.master_key:
                # The metadata's key, never a request's: a record whose key is empty
                # accepts no state change (keys.py) until it holds the ledger's own.
                info.master_key = md.master_key.hex()
            info.fenced = info.fenced or plan.fence
            info.limbo = info.limbo or plan.limbo
            if plan.term is not None and plan.term > info.term:
                info.term = plan.term
            self._journal_state(md.ledger_id, info, wait=False)
        # One wait for the whole group (a future per ledger would leave all but the one
        # awaited with an error nobody retrieves when the journal write fails).
        await self.journal.sync()
        self.protected_ledgers = len(ledgers)
        if self.cookie_problem is not None:
            cookies.write_cookies(cfg, self.metadata, self.disk)
            log.warning("bookie %s: cookies rewritten (auto_fix_cookies)", self.bookie_id)
        index = self.storage.index
        index.set_marker(REPAIR, True)
        index.set_marker(PROTECT, False)
        self.phase_one_done = True
        log.info("bookie %s: BP-46 phase one done: %d ledgers", self.bookie_id, len(ledgers))
