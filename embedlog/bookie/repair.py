"""BP-46 phase two: recover limbo ledgers, copy missing entries from peers, clear limbo.

Runs in the background once the bookie serves. It is restartable by design: the
index keeps the REPAIR marker and each ledger's limbo flag until the work is done
and durable, so a crash in the middle only means the next boot starts again.
Limbo is cleared only after the copied entries are flushed, never before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from attrs import define, field

from embedlog.bookie.integrity import assigned_entries, repair_target, takeover_needed
from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.errors import (
    BKError,
    BookieIOError,
    DigestMismatchError,
    LedgerRecoveryError,
    MetadataError,
    NoSuchLedgerInMetadataError,
    status_name,
)
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType
from embedlog.wire.messages import Response

if TYPE_CHECKING:
    from embedlog.bookie.config import BookieConfig

log = logging.getLogger(__name__)


class TakenOver(Protocol):
    """What a takeover of an open unbounded ledger settled."""

    @property
    def md(self) -> LedgerMetadata:
        """OPEN, at the new term."""
        ...

    @property
    def term(self) -> int: ...

    @property
    def last_entry_id(self) -> int:
        """The recovered end (the no-op's id)."""
        ...


class RepairClient(Protocol):
    """What BP-46 repair asks of a client of the cluster: recover a ledger, take an open
    stream over, read an entry from a peer (embedlog/repair_client.py makes one of a
    Client; the bookie knows no client)."""

    async def recover(self, ledger_id: int, password: bytes) -> None:
        """Open the ledger with recovery, which closes it at its recovered end."""
        ...

    async def take_over(self, ledger_id: int, password: bytes) -> TakenOver: ...

    async def read(self, bookie: str, ledger_id: int, entry_id: int) -> Response:
        """A plain READ of one entry from ``bookie``."""
        ...


# What gives the repair its client: it recovers ledgers and reads from peers with it.
ClientFactory = Callable[[], RepairClient]

COPY_CONCURRENCY = 64  # entry reads in flight to peers
LEDGER_BATCH = 64  # ledgers repaired between two flushes


class BookieForRepair(Protocol):
    """What the repairer asks of its bookie (embedlog/bookie/repair_services.py, and the
    bookie's flush and status)."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def config(self) -> BookieConfig: ...

    @property
    def first_live(self) -> dict[int, int]: ...  # under unsafe_limbo_clears_at_first_resend

    async def ledgers_with_me(self) -> list[LedgerMetadata]: ...

    def limbo_ledgers(self) -> list[int]: ...

    def dropped_here(self, ledger_id: int) -> bool: ...

    async def read_metadata(self, ledger_id: int) -> LedgerMetadata: ...

    def holds_readable(self, ledger_id: int, entry_id: int) -> bool: ...

    def store_repaired(self, ledger_id: int, entry_id: int, body: bytes, key: bytes) -> None: ...

    async def flush(self) -> None: ...

    async def clear_limbo(self, ledger_ids: list[int]) -> None: ...

    def repair_finished(self) -> None: ...

    async def publish_status(self) -> None: ...


@define
class RepairProgress:
    state: str = "idle"  # idle | running | waiting | done | unavailable
    ledgers_total: int = 0
    ledgers_done: int = 0
    entries_copied: int = 0
    recovered: int = 0
    started: float = 0.0
    finished: float = 0.0
    waiting: dict[int, str] = field(factory=dict)  # ledger -> why it is not repaired yet

    def as_dict(self, now: float) -> dict[str, Any]:
        """What ``embedlog bookie status`` shows; ``now`` on the bookie's clock."""
        return {
            "state": self.state,
            "ledgers_total": self.ledgers_total,
            "ledgers_done": self.ledgers_done,
            "entries_copied": self.entries_copied,
            "ledgers_recovered": self.recovered,
            "seconds": round((self.finished or now) - self.started, 3) if self.started else 0.0,
            "waiting": {str(k): v for k, v in sorted(self.waiting.items())[:20]},
        }


class Repairer:
    def __init__(
        self,
        bookie: BookieForRepair,
        client_factory: ClientFactory | None,
        retry_interval: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.bookie = bookie
        self.clock = clock  # progress times and takeover backoffs (embedlog/clock.py)
        self._client_factory = client_factory
        self._client: RepairClient | None = None
        self.retry_interval = retry_interval
        self.progress = RepairProgress()
        # Open unbounded ledgers this repair took over: the end that takeover settled.
        # It stays true after later terms (they recover every entry up to it and write
        # above it), so a copy that failed is retried without taking the ledger over
        # again, which would displace its writer on every round.
        self._settled: dict[int, int] = {}
        # After a takeover that failed: when the next may be tried, and the pause then.
        self._takeover_backoff: dict[int, tuple[float, float]] = {}

    @property
    def me(self) -> str:
        return self.bookie.bookie_id

    async def run(self) -> None:
        """Repair until every ledger is done; then clear the REPAIR marker."""
        p = self.progress
        if self._client_factory is None:
            p.state = "unavailable"
            log.error(
                "bookie %s: BP-46 repair needs a client to reach its peers and has none; its "
                "ledgers stay in limbo (start it through LocalCluster or the sandbox)",
                self.me,
            )
            await self.bookie.publish_status()
            return
        self._client = self._client_factory()
        p.state, p.started = "running", self.clock.monotonic()
        pending = await self._ledgers_to_repair_when_readable()
        p.ledgers_total = len(pending)
        log.info("bookie %s: BP-46 repair of %d ledgers started", self.me, len(pending))
        await self.bookie.publish_status()
        while pending:
            for i in range(0, len(pending), LEDGER_BATCH):
                batch = pending[i : i + LEDGER_BATCH]
                results = await asyncio.gather(*(self._repair(lid) for lid in batch))
                done = [lid for lid, ok in zip(batch, results, strict=True) if ok]
                if done:
                    try:
                        await self.bookie.flush()  # copied entries durable before limbo goes
                        await self.bookie.clear_limbo(done)
                    except (OSError, BookieIOError) as exc:
                        # A full or failing disk must not end the repair until the next
                        # boot: the entries this bookie lost would stay below their ack
                        # quorum meanwhile (simulator seed 132 of bounded-nojournal-races).
                        log.warning("bookie %s: BP-46 repair waits: %s", self.me, exc)
                        for lid in done:
                            p.waiting[lid] = f"disk: {type(exc).__name__}: {exc}"
                    else:
                        p.ledgers_done += len(done)
                log.info(
                    "bookie %s: BP-46 repair %d/%d ledgers, %d entries copied",
                    self.me,
                    p.ledgers_done,
                    p.ledgers_total,
                    p.entries_copied,
                )
                await self.bookie.publish_status()
            pending = sorted(p.waiting)
            if pending:
                p.state = "waiting"
                await self.bookie.publish_status()
                await asyncio.sleep(self.retry_interval)
                p.state = "running"
        self.bookie.repair_finished()
        p.state, p.finished = "done", self.clock.monotonic()
        log.info(
            "bookie %s: BP-46 repair done in %.2fs (%d ledgers, %d entries copied)",
            self.me,
            p.finished - p.started,
            p.ledgers_total,
            p.entries_copied,
        )
        await self.bookie.publish_status()

    async def _ledgers_to_repair_when_readable(self) -> list[int]:
        """``_ledgers_to_repair``, listed again after a pause while the metadata store fails
        (a ZooKeeper ConnectionLoss): a transient error must not end the repair until the
        next boot, leaving the entries this bookie lost with fewer copies meanwhile."""
        p = self.progress
        while True:
            try:
                return await self._ledgers_to_repair()
            except MetadataError as exc:
                p.state = "waiting"
                log.warning("bookie %s: BP-46 repair cannot list its ledgers yet: %s", self.me, exc)
                await self.bookie.publish_status()
                await asyncio.sleep(self.retry_interval)
                p.state = "running"

    async def _ledgers_to_repair(self) -> list[int]:
        """Ledgers whose ensembles hold this bookie, plus any still in limbo locally."""
        listed = await self.bookie.ledgers_with_me()
        local = self.bookie.limbo_ledgers()
        return sorted({md.ledger_id for md in listed} | set(local))

    async def _repair(self, lid: int) -> bool:
        """Repair one ledger; False leaves it for a later round (reason in ``waiting``)."""
        p = self.progress
        if self.bookie.dropped_here(lid):
            p.waiting.pop(lid, None)
            return True  # deleted: nothing to hold any more, whatever the metadata says
        try:
            md = await self.bookie.read_metadata(lid)
        except NoSuchLedgerInMetadataError:
            p.waiting.pop(lid, None)
            return True  # deleted: nothing to hold any more
        except MetadataError as exc:
            p.waiting[lid] = f"metadata unreadable: {exc}"
            return False
        try:
            recovered_end = self._settled.get(lid)
            if md.is_closed:
                pass
            elif not md.unbounded:
                # Recovered (closed) first: its final metadata says what this bookie owes,
                # whether or not it is listed now (an ensemble change may still add it).
                md = await self._recover(md)
            elif (
                self.bookie.config.unsafe_limbo_clears_at_first_resend
                and self.me in md.last_fragment[1]
            ):
                # UNSAFE (tests only): what the bookie lost assumed to lie below the first
                # add after its boot, which a writer's resend of an older entry does not
                # bound (issue #12, race 2).
                first_live = self.bookie.first_live.get(lid)
                recovered_end = None if first_live is None else first_live - 1
            elif takeover_needed(md, self.me, settled=recovered_end is not None):
                md, recovered_end = await self._take_over(md)
            if self.me not in md.bookies():
                p.waiting.pop(lid, None)
                return True
            target = repair_target(md, self.me, recovered_end=recovered_end)
            if target is None:
                p.waiting[lid] = "open ledger: its end is not settled yet"
                return False
            await self._copy_missing(md, target)
        except (BKError, OSError) as exc:
            p.waiting[lid] = f"{type(exc).__name__}: {exc}"
            log.warning("bookie %s: repair of ledger %s postponed: %s", self.me, lid, exc)
            return False
        except Exception as exc:  # a bug must not end the repair of every other ledger
            p.waiting[lid] = f"{type(exc).__name__}: {exc}"
            log.exception("bookie %s: repair of ledger %s failed; retrying", self.me, lid)
            return False
        p.waiting.pop(lid, None)
        return True

    async def _recover(self, md: LedgerMetadata) -> LedgerMetadata:
        assert self._client is not None
        await self._client.recover(md.ledger_id, md.password or b"")
        self.progress.recovered += 1
        return await self.bookie.read_metadata(md.ledger_id)

    async def _take_over(self, md: LedgerMetadata) -> tuple[LedgerMetadata, int]:
        """Take an open unbounded ledger over (a new term, recovery, the no-op); returns
        its metadata after the takeover and the recovered end. Its writer is displaced
        (InvalidTermError) and continues by taking over again, as after any takeover."""
        assert self._client is not None
        lid = md.ledger_id
        due, pause = self._takeover_backoff.get(lid, (0.0, self.retry_interval))
        if self.clock.monotonic() < due:
            raise LedgerRecoveryError(f"ledger {lid}: the last takeover failed; retrying later")
        try:
            start = await self._client.take_over(lid, md.password or b"")
        except BKError:
            # Each attempt raises the term and displaces the writer: back off.
            self._takeover_backoff[lid] = (self.clock.monotonic() + pause, min(pause * 2, 30.0))
            raise
        self._takeover_backoff.pop(lid, None)
        self._settled[lid] = start.last_entry_id
        self.progress.recovered += 1
        log.info(
            "bookie %s: took unbounded ledger %s over (term %s) to settle its end at %s",
            self.me,
            md.ledger_id,
            start.term,
            start.last_entry_id,
        )
        return start.md, start.last_entry_id

    async def _copy_missing(self, md: LedgerMetadata, last_entry: int) -> None:
        missing = [
            (eid, peers)
            for eid, peers in assigned_entries(md, self.me, last_entry)
            if not self.bookie.holds_readable(md.ledger_id, eid)
        ]
        if not missing:
            return
        digester = Digester(md.digest_type, md.password or b"")
        # Without the password a MAC cannot be checked; the header still must match.
        verify = md.password is not None or md.digest_type is not DigestType.MAC
        sem = asyncio.Semaphore(COPY_CONCURRENCY)
        key = md.master_key

        async def copy(eid: int, peers: list[str]) -> None:
            async with sem:
                body = await self._fetch(md, eid, peers, digester, verify, key)
                self.bookie.store_repaired(md.ledger_id, eid, body, key)
                self.progress.entries_copied += 1

        await asyncio.gather(*(copy(eid, peers) for eid, peers in missing))

    async def _fetch(
        self,
        md: LedgerMetadata,
        eid: int,
        peers: list[str],
        digester: Digester,
        verify: bool,
        key: bytes,
    ) -> bytes:
        assert self._client is not None
        lid = md.ledger_id
        answers = []
        for peer in peers:
            try:
                resp = await self._client.read(peer, lid, eid)
            except BKError as exc:
                answers.append(f"{peer}: {type(exc).__name__}")
                continue
            if resp.status != StatusCode.EOK:
                answers.append(f"{peer}: {status_name(resp.status)}")
                continue
            try:
                if verify:
                    digester.unpack(resp.body, lid, eid)
                else:
                    digester.unpack_header_only(resp.body, lid, eid)
            except DigestMismatchError:
                answers.append(f"{peer}: digest mismatch")
                continue
            return resp.body
        raise BookieIOError(
            f"entry {lid}:{eid} is missing here and no peer gave a good copy ({', '.join(answers)})"
        )
