"""The boot: cookie check -> open storage -> unclean-shutdown check -> journal replay
-> BP-46 phase one when a check failed (fence, limbo, cookie fix). ``boot`` returns what
it found (``BootReport``: the storage and journal it opened, what it suspected and did),
or why it failed (``BootFailed``); ``Bookie.start`` applies it, then registers, serves
and starts BP-46 phase two in the background (embedlog/bookie/repair.py).

A boot that fails leaves nothing open: it releases the storage and journal it opened,
after leaving the unclean-shutdown bit as ``end_failed_boot`` says.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from attrs import define, frozen

from embedlog.bookie import cookie as cookies
from embedlog.bookie import records
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import Disk, child
from embedlog.bookie.index import NOJOURNAL, PROTECT, REPAIR, LedgerInfo
from embedlog.bookie.integrity import Protection, owes_entries, protection_for, suspicion_reasons
from embedlog.bookie.journal import Journal
from embedlog.bookie.journal_replay import Replay
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.storage import LedgerStorage
from embedlog.clock import Clock
from embedlog.errors import BookieIOError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metrics import BookieMetrics

log = logging.getLogger(__name__)


@frozen
class BootEnv:
    """What a boot works with: the bookie's settings, metadata, disks and clock."""

    config: BookieConfig
    metadata: MetadataClient
    disk: Disk  # every file the bookie touches (embedlog/bookie/disk.py)
    journal_exec: Executor  # the journal's disk work (writes, fsyncs)
    flush_exec: Executor  # the flushes' disk work
    metrics: BookieMetrics
    clock: Clock
    ledgers: LedgerTable  # phase one's state records wait for their fsync here
    # Every ledger's metadata, in one pass over a synced store (repair_services.py).
    all_metadata: Callable[[], Awaitable[list[LedgerMetadata]]]


@frozen
class BootReport:
    """What a boot found and did; the bookie serves with ``storage`` and ``journal``."""

    storage: LedgerStorage
    journal: Journal  # started
    found_unclean: bool  # what the unclean-shutdown bit said
    unclean_shutdown_detected: bool  # set, and not on a first boot
    cookie_problem: str | None  # the cookie check's problems, when auto_fix_cookies fixed them
    suspicion: tuple[str, ...]  # why BP-46 phase one ran (empty: it did not)
    protected_ledgers: int  # ledgers phase one fenced or put in limbo
    phase_one_done: bool  # durably, on this boot
    repair_pending: bool  # BP-46 phase two is still to do (its marker is set)


@frozen
class BootFailed:
    error: Exception
    found_unclean: bool | None  # what the unclean-shutdown bit said (None: not read)
    left_unclean: bool  # the bit stays set: the next boot treats the shutdown as unclean


@define
class _Opened:
    """What a boot under way opened, to release if it fails."""

    storage: LedgerStorage | None = None
    journal: Journal | None = None
    found_unclean: bool | None = None


async def boot(env: BootEnv) -> BootReport | BootFailed:
    """Boot the bookie's disks once. An Exception comes back as BootFailed, everything
    it opened released; anything else (a cancellation) releases them and propagates."""
    opened = _Opened()
    try:
        return await _boot(env, opened)
    except Exception as exc:
        left = False
        if opened.found_unclean is not None and opened.storage is not None:
            left = await end_failed_boot(
                env.config.bookie_id, opened.found_unclean, opened.storage, opened.journal
            )
        _release(opened)
        return BootFailed(exc, opened.found_unclean, left)
    except BaseException:
        _release(opened)
        raise


def _release(opened: _Opened) -> None:
    if opened.journal is not None:
        opened.journal.crash()
    if opened.storage is not None:
        try:
            opened.storage.close()
        except Exception:
            pass


async def end_failed_boot(
    bookie_id: str, found_unclean: bool, storage: LedgerStorage, journal: Journal | None
) -> bool:
    """Leave the unclean-shutdown bit as a failed boot must; True if it stays set.

    A boot that failed never served, so it acknowledged nothing: when it found the last
    shutdown clean, it leaves it clean (its own work flushed first), as a clean stop
    does. Left set, the bit made the next boot suspicious of a loss that cannot have
    happened; with the journal off, that boot put every ledger in limbo, and two bookies
    of one write set in limbo leave a stream that no takeover can settle (simulator seed
    9483 of ``unbounded-nojournal``). A flush that fails leaves the bit set, as a failed
    clean stop does."""
    if found_unclean:
        return True  # the last shutdown was not clean: the next boot must know
    try:
        if journal is not None:
            await final_flush(storage, journal)
        else:
            storage.index.set_unclean_bit(False)
    except Exception as exc:
        log.warning(
            "bookie %s: its failed boot could not finish cleanly (%s); the next boot "
            "treats the last shutdown as unclean",
            *(bookie_id, exc),
        )
        return True
    return False


async def final_flush(storage: LedgerStorage, journal: Journal) -> None:
    """Everything journaled written to the ledger storage; then the unclean bit cleared."""
    await journal.sync()
    await storage.flush(journal.lsn)
    journal.remove_before(journal.lsn)
    storage.index.set_unclean_bit(False)  # only once everything above held


async def _boot(env: BootEnv, opened: _Opened) -> BootReport:
    cfg, disk = env.config, env.disk
    try:
        disk.mkdir(cfg.data_dir)
    except OSError as exc:
        raise BookieIOError(
            f"cannot create the bookie directory {cfg.data_dir}: {exc}; check the path and "
            "its permissions"
        ) from exc
    check = cookies.check_cookies(cfg, env.metadata, disk)
    if check.foreign:
        raise cookies.cookie_error(cfg, list(check.foreign + check.problems), fixable=False)
    cookie_problem = None
    if check.problems:
        cookie_problem = "; ".join(check.problems)
        if not cfg.auto_fix_cookies:
            raise cookies.cookie_error(cfg, list(check.problems))
    first_boot = check.first_boot
    # A new or wiped index disk (no cookie yet) gets a new LevelDB; any other must
    # already have one, or it was damaged (see LedgerIndex).
    new_index = first_boot or not disk.exists(child(cfg.index_dir, cookies.COOKIE_FILE))
    for d in cookies.cookie_dirs(cfg):
        try:
            disk.mkdir(d)
        except OSError as exc:
            raise BookieIOError(f"cannot create {d}: {exc}") from exc
    if first_boot:
        cookies.write_cookies(cfg, env.metadata, disk)
    storage = opened.storage = LedgerStorage(cfg, env.flush_exec, new_index=new_index, disk=disk)
    index = storage.index
    found_unclean = opened.found_unclean = index.unclean_bit()
    unclean_shutdown_detected = found_unclean and not first_boot
    suspicion = suspicion_reasons(
        unclean_shutdown=unclean_shutdown_detected,
        ran_without_journal=index.marker(NOJOURNAL) or not cfg.journal_write_data,
        cookie_problems=check.problems,
        protection_pending=index.marker(PROTECT),
    )
    if suspicion:
        # Before anything else: a crash during phase one must run it again next time,
        # even after the cookies below were fixed and the unclean bit is gone.
        index.set_marker(PROTECT, True)
    index.set_unclean_bit(True)
    index.set_marker(NOJOURNAL, not cfg.journal_write_data)
    end, damage = _replay(cfg, disk, storage, index.checkpoint())
    if damage:
        # Records the bookie may have acknowledged are gone. Marked before the flush
        # below moves the checkpoint past them: a crash before phase one is done must
        # not find a journal that looks whole.
        index.set_marker(PROTECT, True)
        suspicion += damage
    journal = opened.journal = Journal(cfg, env.journal_exec, end, disk, env.metrics, env.clock)
    journal.start()
    await storage.flush(journal.lsn)
    journal.remove_before(journal.lsn)
    protected = None
    if suspicion:
        protected = await _phase_one(env, storage, journal, suspicion, cookie_problem)
    return BootReport(
        storage=storage,
        journal=journal,
        found_unclean=found_unclean,
        unclean_shutdown_detected=unclean_shutdown_detected,
        cookie_problem=cookie_problem,
        suspicion=tuple(suspicion),
        protected_ledgers=protected or 0,
        phase_one_done=protected is not None,
        repair_pending=index.marker(REPAIR),
    )


def _replay(
    cfg: BookieConfig, disk: Disk, storage: LedgerStorage, checkpoint: int
) -> tuple[int, list[str]]:
    """Apply the journal from ``checkpoint``; returns the LSN after its end and the damage
    found in it (records lost to anything but a torn tail)."""
    count = 0
    journal = Replay(cfg.journal_dir, checkpoint, disk)
    for _lsn, payload in journal:
        records.replay(storage, payload)
        count += 1
    if count:
        log.info("bookie %s replayed %d journal records", cfg.bookie_id, count)
    return max(journal.end, checkpoint), [d.describe() for d in journal.damage]


def ledgers_to_protect(
    mds: list[LedgerMetadata], storage: LedgerStorage, me: str, *, skip_fence: bool
) -> list[tuple[LedgerMetadata, Protection]]:
    """What BP-46 phase one does to each ledger of the cluster (``integrity``:
    ``owes_entries`` and ``protection_for``), for those it does something to.

    Not to a ledger this bookie dropped (tombstones.py), though its metadata may not
    be gone yet (a delete under way): it owes nothing of a deleted ledger, and a fence
    or limbo record would give it state again."""
    held = set(storage.ledger_ids())
    plans = []
    for md in mds:
        if storage.dropped(md.ledger_id):
            continue
        owes = owes_entries(md, me, held=md.ledger_id in held)
        plan = protection_for(md, owes=owes, skip_fence=skip_fence)
        if plan.fence or plan.limbo or plan.term is not None:
            plans.append((md, plan))
    return plans


async def _phase_one(
    env: BootEnv,
    storage: LedgerStorage,
    journal: Journal,
    suspicion: list[str],
    cookie_problem: str | None,
) -> int:
    """BP-46 phase one: protect every ledger this bookie belongs to, before serving;
    returns how many it protected."""
    cfg = env.config
    log.warning(
        "bookie %s may have lost acknowledged data (%s): fencing its ledgers and putting "
        "them in limbo before serving",
        cfg.bookie_id,
        "; ".join(suspicion),
    )
    ledgers = ledgers_to_protect(
        await env.all_metadata(),
        storage,
        cfg.bookie_id,
        skip_fence=cfg.unsafe_skip_fence_on_boot,
    )
    for md, plan in ledgers:
        info = storage.info(md.ledger_id) or LedgerInfo()
        if not info.master_key:
            # The metadata's key, never a request's: a record whose key is empty
            # accepts no state change (keys.py) until it holds the ledger's own.
            info.master_key = md.master_key.hex()
        info.fenced = info.fenced or plan.fence
        info.limbo = info.limbo or plan.limbo
        if plan.term is not None and plan.term > info.term:
            info.term = plan.term
        env.ledgers.journal_state(journal, storage, md.ledger_id, info)
    # One wait for the whole group (a future per ledger would leave all but the one
    # awaited with an error nobody retrieves when the journal write fails).
    await journal.sync()
    if cookie_problem is not None:
        cookies.write_cookies(cfg, env.metadata, env.disk)
        log.warning("bookie %s: cookies rewritten (auto_fix_cookies)", cfg.bookie_id)
    index = storage.index
    index.set_marker(REPAIR, True)
    index.set_marker(PROTECT, False)
    log.info("bookie %s: BP-46 phase one done: %d ledgers", cfg.bookie_id, len(ledgers))
    return len(ledgers)
