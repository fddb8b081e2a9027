"""The bookie: boot sequence, request handler, flushing, clean stop and crash.

Boot: cookie check -> open storage -> unclean-shutdown check -> journal replay
-> BP-46 phase one when a check failed (fence, limbo, cookie fix) -> register ->
serve -> BP-46 phase two in the background (embedlog/bookie/repair.py).

The request handler answers with BookKeeper's status codes. A request that would
change a ledger's state must prove the ledger's master key (embedlog/bookie/keys.py);
refused with EUA, it changes nothing. The rule it never breaks: an entry the index
says it holds is returned or the read fails with EIO; it is never reported as missing.
A limbo ledger (BP-46) answers EUNKNOWN where it would otherwise say
NoSuchEntry/NoSuchLedger, and to the auditor's LIST_ENTRIES (a list is a negative for
every id it leaves out).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from embedlog.bookie import cookie as cookies
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.flushing import FlushHealth, stays_readonly
from embedlog.bookie.index import NOJOURNAL, PROTECT, REPAIR, LedgerInfo
from embedlog.bookie.integrity import protection_for, suspicion_reasons
from embedlog.bookie.journal import Durable, Journal, Replay
from embedlog.bookie.keys import KeyVerdict, key_verdict
from embedlog.bookie.repair import Repairer
from embedlog.bookie.storage import LedgerStorage
from embedlog.errors import BookieIOError, NoSuchLedgerInMetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.store import MetadataStore
from embedlog.runtime import settle
from embedlog.transport.server import BookieGoneError, Reply, handle_as_task
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FRAMED_HEADER, HEADER
from embedlog.wire.limits import MAX_PACKED_ENTRY, oversized
from embedlog.wire.messages import (
    ENTRY_FRAME,
    NO_TERM,
    AddFlags,
    FrameError,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
    pack_entries,
    pack_results,
    unpack_entries,
)

if TYPE_CHECKING:
    from embedlog.client import Client

log = logging.getLogger(__name__)

# Journal records: b"A" ledger entry | entry (one add); b"B" ledger | ADD_BATCH body
# (several entries of one ledger, as pack_entries frames them); b"S" ledger | state JSON;
# b"T" ledger entry | state JSON (an unbounded ledger's truncation: the entries above
# ``entry`` dropped and the state, whose truncated_term says so, set in one record).
_ADD = struct.Struct(">cqq")
# What parse_batch gives: the entries accepted, each one's verdict (None: all EOK), max LAC.
Batch = tuple[dict[int, bytes], list[int] | None, int]
_BATCH = struct.Struct(">cq")
_STATE = struct.Struct(">cq")
_TRUNCATE = struct.Struct(">cqq")


class _AddPlan:
    """What admitting an add (or an ADD_BATCH) decided, carried to storing and answering it.

    On the no-task path (``answer_by``) it is also the journal's callback that answers
    once durable. One small object rather than a closure per request: adds in flight
    live long enough for the garbage collector to move them to its oldest generation,
    and a closure is several tracked objects (function, cells, tuple).
    """

    __slots__ = (
        "batch",
        "bookie",
        "changed",
        "entries",
        "info",
        "lac",
        "old_lac",
        "reply",
        "req",
        "statuses",
        "term_changed",
        "truncate",
    )

    def __init__(
        self,
        info: LedgerInfo,
        entries: dict[int, bytes],
        lac: int,
        changed: bool,
        term_changed: bool,
        truncate: bool,
    ) -> None:
        self.info = info
        self.entries = entries  # {entry id: entry} to store, in the order they came
        self.lac = lac  # the highest LAC in the headers of the entries stored
        self.changed = changed
        self.term_changed = term_changed
        self.truncate = truncate
        self.old_lac = -1
        self.batch = False  # an ADD_BATCH (answered with a verdict per entry)
        # ADD_BATCH with an entry refused for its header: each entry's verdict, in batch
        # order (EOK for those stored); None when all were accepted.
        self.statuses: list[int] | None = None

    def answer_by(self, bookie: Bookie, req: Request, reply: Reply) -> _AddPlan:
        self.bookie, self.req, self.reply = bookie, req, reply
        return self

    def __call__(self, exc: BaseException | None) -> None:
        if exc is None:
            self.reply(self.bookie._added(self.req, self))
        else:
            self.bookie._answer_failure(self.req, exc, self.reply)


def parse_batch(ledger_id: int, body: bytes) -> tuple[dict[int, bytes], list[int] | None, int]:
    """An ADD_BATCH body, parsed and each entry checked against its header in one pass:
    the entries accepted ({entry id: entry}, in batch order), every entry's verdict
    (None when all are EOK; else EOK or EBADREQ each) and the highest LAC their headers
    carry. FrameError if the body is not whole or repeats an entry id.

    The hot path of a bookie: no object per entry but the entry's own bytes (the dict is
    what the write cache takes as it is), and no verdict list unless one is refused.
    """
    accepted: dict[int, bytes] = {}
    statuses: list[int] | None = None
    refused: list[int] = []  # ids of entries refused for their header
    lac = -1
    frame_size, header_size = ENTRY_FRAME.size, HEADER.size
    # An entry's frame and header read at once: the common case costs one unpack.
    framed, framed_size = FRAMED_HEADER.unpack_from, FRAMED_HEADER.size
    frame = ENTRY_FRAME.unpack_from
    pos, end, count = 0, len(body), 0
    while pos < end:
        if pos + framed_size <= end:
            entry_id, n, h_ledger, h_entry, h_lac, _flags = framed(body, pos)
            good = n >= header_size and h_ledger == ledger_id and h_entry == entry_id
        elif pos + frame_size <= end:  # too short for a header: refused, if whole
            entry_id, n = frame(body, pos)
            good = False
        else:
            raise FrameError("batch body truncated inside an entry's id and length")
        pos += frame_size
        stop = pos + n
        if stop > end:
            raise FrameError("batch body truncated inside an entry")
        if good:
            accepted[entry_id] = body[pos:stop]
            if h_lac > lac:
                lac = h_lac
            if statuses is not None:
                statuses.append(StatusCode.EOK)
        else:
            if statuses is None:
                statuses = [StatusCode.EOK] * count
            statuses.append(StatusCode.EBADREQ)
            refused.append(entry_id)
        count += 1
        pos = stop
    if len(accepted) + len(set(refused)) != count or not accepted.keys().isdisjoint(refused):
        raise FrameError("batch repeats an entry id")
    return accepted, statuses, lac


def _disk_thread(name: str) -> Executor:
    return ThreadPoolExecutor(1, thread_name_prefix=name)


class BookieState(enum.Enum):
    NEW = "new"
    BOOTING = "booting"
    SERVING = "serving"
    STOPPED = "stopped"
    CRASHED = "crashed"


class Bookie:
    def __init__(
        self,
        config: BookieConfig,
        metadata: MetadataClient,
        session: MetadataStore,
        *,
        client_factory: Callable[[], Client] | None = None,
        disk_executor: Callable[[str], Executor] | None = None,
    ) -> None:
        """``client_factory`` gives BP-46 repair a client to recover ledgers and reach peers.

        ``disk_executor(name)`` makes the executor for the journal's and for the flush's
        disk work (default: a thread each); the simulator's runs them on its one thread."""
        self.config = config
        self.metadata = metadata
        self.session = session
        self._state = BookieState.NEW
        self.unclean_shutdown_detected = False
        self.cookie_problem: str | None = None
        self.suspicion: list[str] = []  # why BP-46 phase one ran on this boot (empty: it did not)
        self.protected_ledgers = 0
        self.repairer = Repairer(self, client_factory, config.repair_retry_interval)
        self._repair_task: asyncio.Task[None] | None = None
        self.readonly = config.readonly
        self.storage: LedgerStorage | None = None
        self.journal: Journal | None = None
        disk = disk_executor or _disk_thread
        self._journal_exec = disk(f"{config.bookie_id}-journal")
        self._flush_exec = disk(f"{config.bookie_id}-flush")
        self._flusher: asyncio.Task[None] | None = None
        self._background_flush: asyncio.Task[None] | None = None
        self.flush_health = FlushHealth(config.flush_interval, config.flush_retry_max_interval)
        self._lac_changed: dict[int, asyncio.Event] = {}
        self.boot_seconds = 0.0

    @property
    def state(self) -> BookieState:
        return self._state

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id

    # -- boot --------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state is not BookieState.NEW:
            raise RuntimeError(f"bookie {self.bookie_id} objects boot once; make a new one")
        self._state = BookieState.BOOTING
        started = time.monotonic()
        try:
            await self._boot()
        except BaseException:
            self._abandon()
            raise
        self.boot_seconds = time.monotonic() - started
        self._state = BookieState.SERVING
        log.info("bookie %s serving (boot %.3fs)", self.bookie_id, self.boot_seconds)
        await self.publish_status()

    async def _boot(self) -> None:
        cfg = self.config
        try:
            cfg.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BookieIOError(
                f"cannot create the bookie directory {cfg.data_dir}: {exc}; check the path and "
                "its permissions"
            ) from exc
        check = cookies.check_cookies(cfg, self.metadata)
        if check.foreign:
            raise cookies.cookie_error(cfg, list(check.foreign + check.problems), fixable=False)
        if check.problems:
            self.cookie_problem = "; ".join(check.problems)
            if not cfg.auto_fix_cookies:
                raise cookies.cookie_error(cfg, list(check.problems))
        first_boot = check.first_boot
        # A new or wiped index disk (no cookie yet) gets a new LevelDB; any other must
        # already have one, or it was damaged (see LedgerIndex).
        new_index = not (cfg.index_dir / cookies.COOKIE_FILE).exists()
        for d in cookies.cookie_dirs(cfg):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BookieIOError(f"cannot create {d}: {exc}") from exc
        if first_boot:
            cookies.write_cookies(cfg, self.metadata)
        self.storage = LedgerStorage(cfg, self._flush_exec, new_index=new_index)
        index = self.storage.index
        self.unclean_shutdown_detected = index.unclean_bit() and not first_boot
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
        self.journal = Journal(cfg, self._journal_exec, end)
        self.journal.start()
        await self.storage.flush(self.journal.lsn)
        self.journal.remove_before(self.journal.lsn)
        if self.suspicion:
            await self._phase_one()
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        self.metadata.register_bookie(
            self.session,
            self.bookie_id,
            {"address": cfg.advertised_address, "rack": cfg.rack},
            readonly=self.readonly,
        )
        if index.marker(REPAIR):
            self._repair_task = asyncio.get_running_loop().create_task(self._run_repair())

    def _replay(self, checkpoint: int) -> tuple[int, list[str]]:
        """Apply the journal from ``checkpoint``; returns the LSN after its end and the damage
        found in it (records lost to anything but a torn tail)."""
        assert self.storage is not None
        count = 0
        journal = Replay(self.config.journal_dir, checkpoint)
        for _lsn, payload in journal:
            kind = payload[:1]
            if kind == b"A":
                _, lid, eid = _ADD.unpack_from(payload)
                self.storage.put(lid, eid, payload[_ADD.size :])
            elif kind == b"B":
                _, lid = _BATCH.unpack_from(payload)
                self.storage.put_many(lid, dict(unpack_entries(payload[_BATCH.size :])))
            elif kind == b"S":
                _, lid = _STATE.unpack_from(payload)
                self.storage.set_info(lid, LedgerInfo.from_json(payload[_STATE.size :]))
            elif kind == b"T":
                # The checkpoint is before this record, so its cut may not have reached
                # the index: redo it (a no-op if it had), in journal order with the adds.
                _, lid, eid = _TRUNCATE.unpack_from(payload)
                self.storage.set_info(lid, LedgerInfo.from_json(payload[_TRUNCATE.size :]))
                self.storage.cut_replayed(lid, "above", eid)
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
        for md in ledgers:
            plan = protection_for(md, skip_fence=cfg.unsafe_skip_fence_on_boot)
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
            cookies.write_cookies(cfg, self.metadata)
            log.warning("bookie %s: cookies rewritten (auto_fix_cookies)", self.bookie_id)
        index = self.storage.index
        index.set_marker(REPAIR, True)
        index.set_marker(PROTECT, False)
        log.info("bookie %s: BP-46 phase one done: %d ledgers", self.bookie_id, len(ledgers))

    # -- BP-46 helpers used by phase one and the repairer -------------------------------------

    async def _blocking_meta(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.metadata.store.blocking_io:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return fn(*args)

    async def ledgers_with_me(self) -> list[LedgerMetadata]:
        """Metadata of every ledger whose ensembles (any fragment) contain this bookie."""

        def scan() -> list[LedgerMetadata]:
            out = []
            for lid in self.metadata.list_ledgers():
                try:
                    md = self.metadata.read_ledger(lid)
                except NoSuchLedgerInMetadataError:
                    continue  # deleted while we listed
                if self.bookie_id in md.bookies():
                    out.append(md)
            return out

        result: list[LedgerMetadata] = await self._blocking_meta(scan)
        return result

    async def ledgers_to_protect(self) -> list[LedgerMetadata]:
        """``ledgers_with_me``, and the open ledgers this bookie holds state of that do not
        list it (yet): an ensemble change that adds it may be in flight, and it may have
        acknowledged that change's entries (a recovery's write-back) before its CAS."""
        listed = await self.ledgers_with_me()
        assert self.storage is not None
        known = {md.ledger_id for md in listed}
        for lid in self.storage.ledger_ids():
            if lid in known:
                continue
            try:
                md = await self.read_metadata(lid)
            except NoSuchLedgerInMetadataError:
                continue
            if not md.is_closed:
                listed.append(md)
        return listed

    async def read_metadata(self, ledger_id: int) -> LedgerMetadata:
        md: LedgerMetadata = await self._blocking_meta(self.metadata.read_ledger, ledger_id)
        return md

    def limbo_ledgers(self) -> list[int]:
        assert self.storage is not None
        return [
            lid for lid in self.storage.ledger_ids() if (i := self.storage.info(lid)) and i.limbo
        ]

    def holds_readable(self, ledger_id: int, entry_id: int) -> bool:
        """True when the entry is here and its bytes can be read back (not just indexed)."""
        assert self.storage is not None
        try:
            return self.storage.get(ledger_id, entry_id) is not None
        except BookieIOError:
            return False  # indexed, but its entry log is gone or damaged: copy it again

    def store_repaired(self, ledger_id: int, entry_id: int, body: bytes, key: bytes) -> None:
        """Keep an entry copied from a peer (made durable by the repairer's next flush)."""
        assert self.storage is not None
        if self.storage.info(ledger_id) is None:
            self.storage.set_info(ledger_id, LedgerInfo(master_key=key.hex(), limbo=True))
        self.storage.put(ledger_id, entry_id, body)

    async def clear_limbo(self, ledger_ids: list[int]) -> None:
        assert self.storage is not None and self.journal is not None
        cleared = False
        for lid in ledger_ids:
            info = self.storage.info(lid)
            if info is not None and info.limbo:
                info.limbo = False
                self._journal_state(lid, info, wait=False)
                cleared = True
        if cleared:
            await self.journal.sync()  # one wait for all (see _phase_one)

    def repair_finished(self) -> None:
        assert self.storage is not None
        self.storage.index.set_marker(REPAIR, False)

    async def _run_repair(self) -> None:
        try:
            await self.repairer.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._state is BookieState.SERVING:
                log.exception(
                    "bookie %s: BP-46 repair failed; it resumes at next boot", self.bookie_id
                )

    async def publish_status(self) -> None:
        """Leave the status where ``embedlog bookie status`` (any process) can read it."""
        status = self.status()
        try:
            await self._blocking_meta(self.metadata.publish_bookie_status, self.bookie_id, status)
        except Exception as exc:  # status is informative: never stop repair for it
            log.debug("bookie %s: could not publish status: %s", self.bookie_id, exc)

    def wait_repaired_nowait(self) -> bool:
        """True once no BP-46 repair is pending or running."""
        return self._repair_task is None or self._repair_task.done()

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
        for task in (self._flusher, self._background_flush, self._repair_task):
            if task is not None:
                task.cancel()
        if self.journal is not None:
            self.journal.crash()
        if self.storage is not None:
            self.storage.crash()
        self._wake_all()
        self._shutdown_executors()

    def _abandon(self) -> None:
        self._state = BookieState.STOPPED
        if self._flusher is not None:
            self._flusher.cancel()
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

    # -- background flushing -----------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_health.delay)
            await self._flush_in_background()

    async def _flush_in_background(self) -> None:
        """A flush nobody waits for (periodic, or early for a full write cache): here the
        bookie stops taking adds when it fails, and takes them again when it succeeds
        (embedlog/bookie/flushing.py)."""
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
        await self.storage.flush(checkpoint)
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
        except Exception:
            state = "read-only" if readonly else "writable"
            log.exception("bookie %s: could not register as %s", self.bookie_id, state)

    # -- ledger state changes (journaled) ------------------------------------------------------

    def _journal_state(
        self, lid: int, info: LedgerInfo, *, wait: bool
    ) -> asyncio.Future[None] | None:
        assert self.journal is not None and self.storage is not None
        self.storage.set_info(lid, info)
        return self.journal.append(_STATE.pack(b"S", lid) + info.to_json(), wait=wait)

    async def set_ledger_state(
        self,
        ledger_id: int,
        *,
        fenced: bool | None = None,
        limbo: bool | None = None,
        master_key: bytes | None = None,
    ) -> None:
        """Durably change a ledger's flags. A record it creates without ``master_key``
        accepts no request that changes the ledger's state (keys.py)."""
        assert self.storage is not None
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

    # -- request handling --------------------------------------------------------------------

    async def handle(self, req: Request) -> Response:
        if self._state is not BookieState.SERVING:
            raise BookieGoneError(f"bookie {self.bookie_id} is {self._state.value}")
        try:
            if req.op == OpCode.ADD:
                return await self._add(req)
            if req.op == OpCode.ADD_BATCH:
                answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
                self._add_batch(req, settle(answer))
                return await answer
            if req.op == OpCode.READ:
                return await self._read(req)
            if req.op == OpCode.READ_LAC:
                return await self._read_lac(req)
            if req.op == OpCode.WRITE_LAC:
                return self._write_lac(req)
            if req.op == OpCode.LIST_ENTRIES:
                return self._list_entries(req)
            if req.op in (OpCode.DELETE_LEDGER, OpCode.TRIM):
                return await self._cut(req)
            return Response.to(req, StatusCode.EBADREQ)
        except Exception as exc:
            return self._failed(req, exc)

    def handle_nowait(self, req: Request, reply: Reply) -> asyncio.Task[Response] | None:
        """``handle`` for transports that take a callback: ``reply`` gets the answer or the
        exception ``handle`` would raise.

        A plain add, the hot path, runs here without a task of its own and is answered
        from the journal's group commit; anything else runs ``handle`` as a task, which is
        returned so the transport can cancel it on shutdown.
        """
        if req.op == OpCode.ADD_BATCH:
            self._add_batch(req, reply)
            return None
        if req.op != OpCode.ADD or req.flags & AddFlags.TRUNCATE:
            return handle_as_task(self.handle(req), reply)
        self._add_nowait(req, reply)
        return None

    def _add_nowait(self, req: Request, reply: Reply, batch: Batch | None = None) -> None:
        """A plain add (or an ADD_BATCH, ``parse_batch``'s ``batch``) without a task:
        refused at once, or answered once durable."""
        if self._state is not BookieState.SERVING:
            reply(BookieGoneError(f"bookie {self.bookie_id} is {self._state.value}"))
            return
        try:
            plan = self._admit_add(req, batch)
            if isinstance(plan, Response):
                reply(plan)
                return
            self._store_add(req, plan, plan.answer_by(self, req, reply))
        except (BookieIOError, OSError) as exc:
            self._answer_failure(req, exc, reply)

    def _add_batch(self, req: Request, reply: Reply) -> None:
        """ADD_BATCH: one writer's entries of one ledger, each a plain add of its own
        (header checked and cached one by one, journaled together in one record), with
        one answer carrying a verdict per entry once that record is durable.

        The ledger's checks (fence, term, password) are made once for the whole batch:
        the batch is admitted and stored in one step of the loop, so no fence or takeover
        can come between its entries, and each entry would have met the same verdict.
        """
        if req.flags & AddFlags.TRUNCATE:  # never batched: their cut needs the slow path
            reply(Response.to(req, StatusCode.EBADREQ, entry_id=req.entry_id))
            return
        try:
            batch = parse_batch(req.ledger_id, req.body)
        except FrameError:
            batch = None
        if batch is None or (not batch[0] and batch[1] is None):  # undecodable or empty
            reply(Response.to(req, StatusCode.EBADREQ, entry_id=req.entry_id))
            return
        self._add_nowait(req, reply, batch)

    def _refusal(
        self, req: Request, status: int, statuses: list[int] | None = None, term: int = NO_TERM
    ) -> Response:
        """``req`` refused with ``status``. An ADD_BATCH's refusal carries a verdict per
        entry: ``status``, or the one ``statuses`` already holds for entries refused alone."""
        if req.op != OpCode.ADD_BATCH:
            return Response.to(req, status, entry_id=req.entry_id, term=term)
        if statuses is None:
            try:
                statuses = [StatusCode.EOK] * len(unpack_entries(req.body))
            except FrameError:
                statuses = []
        results = [(status if s == StatusCode.EOK else s, term) for s in statuses]
        return Response.to(req, status, entry_id=req.entry_id, body=pack_results(results))

    def _answer_failure(self, req: Request, exc: BaseException, reply: Reply) -> None:
        try:
            reply(self._failed(req, exc))
        except BookieGoneError as gone:
            reply(gone)

    def _failed(self, req: Request, exc: BaseException) -> Response:
        """The answer to a request that hit a disk error; raises BookieGoneError if the
        bookie crashed or stopped under the request (then there is no answer at all), and
        ``exc`` itself if it is no disk error.

        Whatever a request meets once its bookie is gone (closed files, shut executors,
        a journal failing its waiters) is the crash showing, not a failure of its own:
        it ends unanswered, quietly, like the bookie."""
        if self._state is not BookieState.SERVING:
            raise BookieGoneError(f"bookie {self.bookie_id} is {self._state.value}") from exc
        if isinstance(exc, BookieIOError):
            log.error("bookie %s: %s", self.bookie_id, exc)
            return self._refusal(req, StatusCode.EIO)
        if not isinstance(exc, OSError):
            raise exc
        log.error("bookie %s: disk error: %s; going read-only", self.bookie_id, exc)
        self.flush_health.met(exc)
        self._go_readonly()
        return self._refusal(req, StatusCode.EIO)

    def _missing(self, req: Request, info: LedgerInfo | None, status: StatusCode) -> Response:
        """An explicit negative, unless the ledger is in limbo: then we cannot know."""
        if info is not None and info.limbo and not self.config.unsafe_skip_limbo:
            status = StatusCode.EUNKNOWN
        lac = info.known_lac if info is not None else -1
        return Response.to(req, status, entry_id=req.entry_id, lac=lac)

    def _check_term(self, req: Request, info: LedgerInfo) -> tuple[bool, bool]:
        """(refused, changed) for a request that carries a term."""
        if req.term == NO_TERM:
            return False, False
        if info.term > req.term:
            return True, False
        if req.term > info.term:
            info.term = req.term
            return False, True
        return False, False

    async def _add(self, req: Request) -> Response:
        plan = self._admit_add(req)
        if isinstance(plan, Response):
            return plan
        if plan.truncate:
            await self._truncate(req.ledger_id, plan.info, req.entry_id, req.term)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._store_add(req, plan, settle(fut))
        await fut
        return self._added(req, plan)

    # An add in three steps, so that the hot path (handle_nowait) and ``_add`` share them:
    # admit (every check, and the state changes the add implies), store (write cache and
    # journal; the callback fires once it is durable), answer.

    def _admit_add(self, req: Request, batch: Batch | None = None) -> Response | _AddPlan:
        """A refusal, or the plan for the add (or ADD_BATCH, ``parse_batch``'s ``batch``)
        that passed every check; a batch's entries whose header does not match are refused
        alone."""
        storage = self.storage
        assert storage is not None
        lid = req.ledger_id
        if self.readonly:
            return self._refusal(req, StatusCode.EREADONLY)
        statuses: list[int] | None = None
        if batch is None:  # a plain add
            body = req.body
            if not HEADER.size <= len(body) <= MAX_PACKED_ENTRY:
                return self._refusal(req, StatusCode.EBADREQ)
            h_ledger, h_entry, lac, _flags = HEADER.unpack_from(body)
            if h_ledger != lid or h_entry != req.entry_id:
                return self._refusal(req, StatusCode.EBADREQ)
            accepted = {h_entry: body}
        else:
            accepted, statuses, lac = batch
            # Only a body above the limit can hold an entry above it: no cost per entry.
            if not accepted or (len(req.body) > MAX_PACKED_ENTRY and oversized(accepted)):
                return self._refusal(req, StatusCode.EBADREQ, statuses)
        info = storage.info(lid)
        if key_verdict(req, info) is KeyVerdict.REFUSED:
            return self._refusal(req, StatusCode.EUA, statuses)
        changed = info is None
        if info is None:
            info = LedgerInfo(master_key=req.master_key.hex())
        if info.fenced and not req.flags & AddFlags.RECOVERY:
            return self._refusal(req, StatusCode.EFENCED, statuses)
        refused, term_changed = self._check_term(req, info)
        if refused:
            return self._refusal(req, StatusCode.EINVALIDTERM, statuses, info.term)
        if req.lafr > info.lafr:
            # Not journaled (like the explicit LAC): a LAFR forgotten in a crash only makes
            # a takeover read forward from further back, never skip an entry.
            info.lafr = req.lafr
            if not changed:
                storage.set_info(lid, info)
        # Whether it still cuts is decided by _truncate, where no other truncation runs.
        truncate = bool(req.flags & AddFlags.TRUNCATE)
        plan = _AddPlan(info, accepted, lac, changed, term_changed, truncate)
        plan.batch = batch is not None
        plan.statuses = statuses
        return plan

    def _store_add(self, req: Request, plan: _AddPlan, on_durable: Durable) -> None:
        storage, journal = self.storage, self.journal
        assert storage is not None and journal is not None
        lid, info, entries = req.ledger_id, plan.info, plan.entries
        state_waits = plan.term_changed
        if plan.changed or plan.term_changed:
            storage.set_info(lid, info)
            # With the adds journaled behind it, their fsync covers the state record.
            journal.append_then(
                _STATE.pack(b"S", lid) + info.to_json(),
                on_durable if state_waits and not self.config.journal_write_data else None,
            )
        plan.old_lac = info.known_lac
        if plan.batch:
            storage.put_many(lid, entries, lac=plan.lac)
        else:
            storage.put(lid, req.entry_id, req.body, lac=plan.lac)
        if not self.config.journal_write_data:
            if not state_waits:
                on_durable(None)  # acknowledged from the write cache (BP-46)
        elif not plan.batch:
            journal.append_then(req.body, on_durable, prefix=_ADD.pack(b"A", lid, req.entry_id))
        else:  # one record for the batch: its body as it came, unless some entry was refused
            body = req.body if plan.statuses is None else pack_entries(list(entries.items()))
            journal.append_then(body, on_durable, prefix=_BATCH.pack(b"B", lid))

    def _added(self, req: Request, plan: _AddPlan) -> Response:
        if plan.info.known_lac > plan.old_lac:
            self._notify_lac(req.ledger_id)
        self._maybe_flush_early()
        # The request's term (the model's response term): the client discards answers of
        # another term, and a takeover that raced this add must not make its ack look stale.
        term = req.term if req.term != NO_TERM else plan.info.term
        if not plan.batch:
            return Response.to(req, StatusCode.EOK, entry_id=req.entry_id, term=term)
        statuses = plan.statuses
        if statuses is None:  # every entry stored
            body = pack_results([(StatusCode.EOK, term)]) * len(plan.entries)
            return Response.to(req, StatusCode.EOK, entry_id=req.entry_id, body=body)
        results = [(status, term) for status in statuses]
        failed = next(s for s in statuses if s != StatusCode.EOK)
        return Response.to(req, failed, entry_id=req.entry_id, body=pack_results(results))

    async def _read(self, req: Request) -> Response:
        storage = self.storage
        assert storage is not None
        lid, eid = req.ledger_id, req.entry_id
        info = storage.info(lid)
        verdict = key_verdict(req, info)
        if verdict is KeyVerdict.REFUSED:
            return Response.to(req, StatusCode.EUA, entry_id=eid)
        if verdict is not KeyVerdict.KEYLESS:  # a fence or a term: state to change
            fencing = bool(req.flags & ReadFlags.FENCE)
            new = info is None
            if info is None:
                info = LedgerInfo(master_key=req.master_key.hex())
            refused, changed = self._check_term(req, info)
            if refused:
                return Response.to(req, StatusCode.EINVALIDTERM, entry_id=eid, term=info.term)
            if fencing and not info.fenced:
                info.fenced = changed = True
            if new or changed:
                # Durable before we answer: a fence that a crash forgets lets the old writer
                # reach its ack quorum after recovery closed the ledger (BP-46 scenario 1).
                fut = self._journal_state(lid, info, wait=True)
                assert fut is not None
                await fut
        if info is None:
            return self._missing(req, None, StatusCode.ENOLEDGER)
        term = req.term if req.term != NO_TERM else info.term
        if eid < 0:
            return Response.to(
                req,
                StatusCode.EOK,
                entry_id=eid,
                lac=info.known_lac,
                last_entry_id=storage.last_entry(lid),
                term=term,
                lafr=info.lafr,
            )
        data = storage.get(lid, eid)
        if data is None:
            return self._missing(req, info, StatusCode.ENOENTRY)
        return Response.to(
            req, StatusCode.EOK, entry_id=eid, lac=info.known_lac, term=term, body=data
        )

    async def _read_lac(self, req: Request) -> Response:
        assert self.storage is not None
        lid = req.ledger_id
        info = self.storage.info(lid)
        if info is None:
            return self._missing(req, None, StatusCode.ENOLEDGER)
        if req.timeout_ms > 0 and info.known_lac <= req.entry_id:
            wait = min(req.timeout_ms / 1000.0, self.config.long_poll_max)
            deadline = asyncio.get_running_loop().time() + wait
            while info.known_lac <= req.entry_id and self._state is BookieState.SERVING:
                ev = self._lac_changed.setdefault(lid, asyncio.Event())
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(ev.wait(), remaining)
                except TimeoutError:
                    break
                info = self.storage.info(lid) or info
        if self._state is not BookieState.SERVING:
            raise BookieGoneError(f"bookie {self.bookie_id} is {self._state.value}")
        return Response.to(
            req,
            StatusCode.EOK,
            lac=info.known_lac,
            last_entry_id=self.storage.last_entry(lid),
            term=info.term,
            lafr=info.lafr,
        )

    def _notify_lac(self, ledger_id: int) -> None:
        ev = self._lac_changed.pop(ledger_id, None)
        if ev is not None:
            ev.set()

    def _write_lac(self, req: Request) -> Response:
        assert self.storage is not None
        info = self.storage.info(req.ledger_id)
        if key_verdict(req, info) is KeyVerdict.REFUSED:
            return Response.to(req, StatusCode.EUA)
        if info is None:
            return self._missing(req, None, StatusCode.ENOLEDGER)
        if req.entry_id > info.explicit_lac:
            # Not journaled: a LAC forgotten in a crash only makes readers wait for the next.
            info.explicit_lac = req.entry_id
            self.storage.set_info(req.ledger_id, info)
            self._notify_lac(req.ledger_id)
        return Response.to(req, StatusCode.EOK, lac=info.known_lac)

    def _list_entries(self, req: Request) -> Response:
        from embedlog.auditor.availability import AvailabilityOfEntries

        assert self.storage is not None
        info = self.storage.info(req.ledger_id)
        if info is None:
            return self._missing(req, None, StatusCode.ENOLEDGER)
        if info.limbo and not self.config.unsafe_skip_limbo:
            # A list is an explicit negative for every id it leaves out, and a limbo ledger
            # may have lost entries it acknowledged: the auditor must not take the holes for
            # missing data (nor an empty list for "nothing was ever here").
            return Response.to(req, StatusCode.EUNKNOWN)
        body = AvailabilityOfEntries.encode(self.storage.entry_ids(req.ledger_id))
        return Response.to(req, StatusCode.EOK, body=body)

    async def _cut(self, req: Request) -> Response:
        assert self.storage is not None and self.journal is not None
        lid = req.ledger_id
        if req.op == OpCode.TRIM and req.flags & TrimFlags.ABOVE:
            return await self._clean_above(req)
        info = self.storage.info(lid)
        if key_verdict(req, info) is KeyVerdict.REFUSED:
            return Response.to(req, StatusCode.EUA)
        if info is None:
            return self._missing(req, None, StatusCode.ENOLEDGER)
        if req.op == OpCode.DELETE_LEDGER:
            await self.storage.cut(lid, "all", 0, self.journal.lsn)
        else:
            await self.storage.cut(lid, "below", req.entry_id, self.journal.lsn)
        return Response.to(req, StatusCode.EOK)

    async def _clean_above(self, req: Request) -> Response:
        """Unbounded ledgers: drop entries above req.entry_id, once per term (TrimFlags)."""
        assert self.storage is not None and self.journal is not None
        lid = req.ledger_id
        if req.term == NO_TERM:
            return Response.to(req, StatusCode.EBADREQ)
        info = self.storage.info(lid)
        if key_verdict(req, info) is KeyVerdict.REFUSED:
            return Response.to(req, StatusCode.EUA)
        if info is None:
            info = LedgerInfo(master_key=req.master_key.hex())
        refused, changed = self._check_term(req, info)
        if refused:
            return Response.to(req, StatusCode.EINVALIDTERM, term=info.term)
        if not await self._truncate(lid, info, req.entry_id, req.term) and changed:
            fut = self._journal_state(lid, info, wait=True)
            assert fut is not None
            await fut
        return Response.to(req, StatusCode.EOK, term=req.term)

    async def _truncate(self, lid: int, info: LedgerInfo, at: int, term: int) -> bool:
        """Drop the ledger's entries above ``at``, once per ``term`` (``truncated_term``);
        False if this term's truncation was done already.

        Once per term: a delayed duplicate of the request (its sender retried) must not
        delete what the new term stored after the first one was answered. So the flag
        and the cut become durable together: one journal record carries both (replay
        redoes the cut), and the cut's index batch carries the flag; a crash between
        the two halves can never leave a flag that makes the retry skip a cut not made.
        Decided under the lock: a duplicate that comes while the first one is cutting
        waits for that cut to be durable rather than being answered before it.
        """
        storage, journal = self.storage, self.journal
        assert storage is not None and journal is not None
        async with storage.exclusive():
            info = storage.info(lid) or info
            if term != NO_TERM and term <= info.truncated_term:
                return False
            before = info.truncated_term
            info.truncated_term = term
            storage.set_info(lid, info)
            storage.drop_cached(lid, "above", at)
            durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            try:
                journal.append_then(_TRUNCATE.pack(b"T", lid, at) + info.to_json(), settle(durable))
                await durable
                await storage.cut_locked(lid, "above", at, journal.lsn)
            except BaseException:
                # Nothing of the cut reached the index: a retry must cut. (If the record
                # is durable, replay would redo it; a flush that moves the checkpoint past
                # it writes this state instead. Either way flag and cut go together.)
                info.truncated_term = before
                raise
            await storage.collect_locked(lid)
        return True

    # -- inspection --------------------------------------------------------------------------

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
