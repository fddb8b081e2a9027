"""Decommissioning a bookie: move every fragment that lists it to other bookies, then retire it.

The bookie must be stopped first (as BookKeeper's ``decommissionbookie`` requires): a
running bookie is offered for new ensembles and keeps taking its writers' adds, so the
ledgers on it would never stop growing. Stopped, it is not registered, no new ledger is
placed on it, and the writers of open ledgers move off it by themselves.

For every ledger whose metadata lists the bookie (closed, open and unbounded ones):

* **sealed fragments** (every fragment of a closed ledger, all but the last of an open
  one): re-replication (``Replicator.repair_ledger``) replaces the bookie as it replaces a
  bookie that does not answer: one replacement chosen by the placement policy, every
  entry of the bookie's slots copied to it from the other replicas (digests checked),
  the copy verified by asking the replacement what it holds, and only then the swap, by
  compare-and-swap on the metadata. Copy and swap are not written twice: a decommission
  is a re-replication that starts from "this bookie must go" rather than from a check.
* **fragments with no entries** (past a closed ledger's end): only the ensemble is
  rewritten (``decommission_rules.swap_in_empty_fragments``), by compare-and-swap.
* **an open ledger's last fragment**: its writer owns it. Only the writer knows which
  entries it has in flight above the last add confirmed, so nobody else can tell where
  that fragment ends. The writer's next add to the stopped bookie fails, and its own
  ensemble change seals the fragment (a recovery, or the ledger's close, does too); from
  then on it is a sealed fragment like the others. We wait for that, up to
  ``wait_for_writers`` seconds, and then name the ledgers still waiting (docs/operations.md,
  "Decommissioning a bookie", says why we neither fence nor rewrite them).

When no ledger lists the bookie any more, its cookie, registration, id claim and status
are deleted from the metadata: its disks then fail the cookie check at boot, so it cannot
rejoin by accident.

Every change is a compare-and-swap or idempotent, so an interrupted run leaves the
cluster consistent (at worst a ledger marked under-replicated, and entries copied to a
bookie the metadata does not name yet), and running it again finishes the work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from attrs import define, field

from embedlog.auditor.checker import gather_limited
from embedlog.auditor.decommission_rules import (
    LedgerPlan,
    ledger_plan,
    swap_in_empty_fragments,
    unplaceable,
)
from embedlog.auditor.replication import LedgerRepair, Replicator
from embedlog.auditor.rules import assigned_entries, format_ids
from embedlog.errors import (
    BKError,
    MetadataVersionError,
    NoSuchLedgerInMetadataError,
    NotEnoughBookiesError,
)
from embedlog.ledger.placement import PlacementPolicy, RackAwarePlacement
from embedlog.metadata.client import AVAILABLE, CLAIMS, READONLY, STATUS, MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.store import NoNodeError
from embedlog.runtime import Runtime
from embedlog.transport.base import Transport

log = logging.getLogger(__name__)

Say = Callable[[str], None]
Progress = Callable[[int, int, str], None]  # (entries copied, entries to copy, note)

DEFAULT_WAIT_FOR_WRITERS = 120.0  # seconds the writers of open ledgers get to move off
_MAX_EMPTY_SWAPS = 10  # compare-and-swap attempts on one ledger whose metadata keeps changing
_SHOWN = 5  # waiting ledgers named in the progress message (every one in the result)


class DecommissionRefusedError(BKError):
    """The bookie cannot be decommissioned now; nothing was changed."""


@define
class DecommissionResult:
    bookie_id: str
    ledgers: dict[int, LedgerRepair] = field(factory=dict)  # re-replication of sealed parts
    moved: list[int] = field(factory=list)  # ledgers that no longer list the bookie
    failures: dict[int, list[str]] = field(factory=dict)  # ledgers that still do, and why
    entries_copied: int = 0  # to the bookies that took the decommissioned one's place
    retired: bool = False  # its cookie and registration are gone
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.retired

    def summary(self) -> str:
        done = (
            f"bookie {self.bookie_id}: {len(self.moved)} ledger(s) moved off it, "
            f"{self.entries_copied} entries copied, in {self.seconds:.2f}s"
        )
        if self.retired:
            return done + "; retired (cookie and registration removed)"
        return (
            done + f"; NOT retired: {len(self.failures)} ledger(s) still list it, each "
            "named with what to do; run again once that is done"
        )


class Decommissioner:
    """Moves a stopped bookie's fragments to other bookies, then retires it."""

    def __init__(
        self,
        metadata: MetadataClient,
        transport: Transport,
        runtime: Runtime,
        bookie_id: str,
        *,
        placement: PlacementPolicy | None = None,
        request_timeout: float = 5.0,
        concurrency: int = 32,
        wait_for_writers: float = DEFAULT_WAIT_FOR_WRITERS,
        poll_interval: float = 0.2,
        progress: Progress | None = None,
        say: Say | None = None,
    ) -> None:
        if wait_for_writers < 0:
            raise ValueError(f"wait_for_writers must be >= 0 seconds, got {wait_for_writers}")
        self.metadata = metadata
        self.runtime = runtime
        self.bookie_id = bookie_id
        self.placement = placement or RackAwarePlacement()
        self.concurrency = concurrency
        self.wait_for_writers = wait_for_writers
        self.poll_interval = poll_interval
        self.progress = progress or (lambda _done, _total, _note: None)
        self.say = say or (lambda _msg: None)
        # The bookie is stopped: asking it again later (the checker's recheck) tells nothing.
        self.replicator = Replicator(
            metadata,
            transport,
            runtime,
            placement=self.placement,
            request_timeout=request_timeout,
            concurrency=concurrency,
            name="decommission",
            progress=self.say,
            rechecks=0,
        )
        self._to_copy: dict[int, int] = {}  # ledger -> entries of the bookie's sealed slots
        self._copied = 0

    def run(self) -> DecommissionResult:
        return self.runtime.run(self.run_aio())

    async def run_aio(self) -> DecommissionResult:
        started = self.metadata.clock.monotonic()
        bid = self.bookie_id
        self._to_copy, self._copied = {}, 0
        await self._refuse_if_registered()
        affected = await self._scan()
        if not affected and not await self.metadata.call(self._records):
            raise DecommissionRefusedError(
                f"bookie {bid} is unknown to this cluster (no cookie, no registration, in no "
                "ledger): check the id with `embedlog bookie list` and `embedlog bookie status`"
            )
        await self._refuse_if_unplaceable(affected.values())
        result = DecommissionResult(bid)
        self.say(f"decommissioning {bid}: {len(affected)} ledger(s) list it")
        self._count(affected.values())
        self.progress(self._copied, self._total, "")
        await self._move(affected, result)
        if not result.failures:
            # A ledger created meanwhile by a client that still believed the bookie writable.
            late = await self._scan()
            if late:
                self._count(late.values())
                await self._move(late, result)
        if not result.failures:
            await self._retire()
            result.retired = True
            self.say(f"bookie {bid} retired: cookie, registration and id claim removed")
        result.entries_copied = self._copied
        result.seconds = self.metadata.clock.monotonic() - started
        log.info("decommission: %s", result.summary())
        return result

    # -- before anything changes -----------------------------------------------------------------

    async def _refuse_if_registered(self) -> None:
        info = await self.metadata.call(self._registration)
        if info is not None:
            state, address = info
            raise DecommissionRefusedError(
                f"bookie {self.bookie_id} is running (registered {state} at {address}): stop "
                "it first (SIGTERM); decommissioning copies its data from the other bookies "
                "while no new ledger can be placed on it"
            )

    def _registration(self) -> tuple[str, object] | None:
        for state, ids in (
            ("writable", self.metadata.writable_bookies()),
            ("read-only", self.metadata.readonly_bookies()),
        ):
            if self.bookie_id in ids:
                info = self.metadata.bookie_info(self.bookie_id) or {}
                return state, info.get("address", "an unknown address")
        return None

    def _records(self) -> bool:
        """Whether the metadata still holds any record of the bookie of its own."""
        bid = self.bookie_id
        if self.metadata.read_cookie(bid) is not None:
            return True
        return any(_exists(self.metadata, f"{base}/{bid}") for base in (CLAIMS, STATUS))

    async def _refuse_if_unplaceable(self, ledgers: Iterable[LedgerMetadata]) -> None:
        available = await self.metadata.call(self.metadata.bookie_infos)
        problems = [
            p
            for md in ledgers
            if (p := unplaceable(md, self.bookie_id, available, self.placement)) is not None
        ]
        if problems:
            more = f" (and {len(problems) - 1} more ledger(s))" if len(problems) > 1 else ""
            raise DecommissionRefusedError(
                f"cannot decommission {self.bookie_id}: {problems[0]}{more}; nothing was "
                "changed: start another bookie first"
            )

    async def _scan(self) -> dict[int, LedgerMetadata]:
        """Every ledger whose metadata lists the bookie."""
        ids = await self.metadata.call(lambda: sorted(self.metadata.list_ledgers()))

        async def read(lid: int) -> LedgerMetadata | None:
            try:
                return await self.metadata.call(self.metadata.read_ledger, lid)
            except NoSuchLedgerInMetadataError:
                return None

        mds = await gather_limited(self.concurrency, (read(lid) for lid in ids))
        return {md.ledger_id: md for md in mds if md is not None and self.bookie_id in md.bookies()}

    # -- moving ----------------------------------------------------------------------------------

    async def _move(self, pending: dict[int, LedgerMetadata], result: DecommissionResult) -> None:
        """Work on ``pending`` until none lists the bookie, or only ledgers that cannot be
        moved now are left (recorded in ``result.failures``)."""
        todo = set(pending)
        waiting_since: float | None = None
        while todo:
            waiting: dict[int, str] = {}
            for lid in sorted(todo):
                why = await self._move_ledger(lid, result)
                if why is None:
                    result.moved.append(lid)
                elif lid not in result.failures:
                    waiting[lid] = why
            todo = set(waiting)
            if not todo:
                return
            now = self.metadata.clock.monotonic()
            if waiting_since is None:
                waiting_since = now
                shown = sorted(waiting.items())[:_SHOWN]
                self.say(
                    f"waiting up to {self.wait_for_writers:g}s for {len(todo)} ledger(s) to "
                    f"move off {self.bookie_id}: "
                    + "; ".join(f"ledger {lid}: {why}" for lid, why in shown)
                    + ("; ..." if len(waiting) > _SHOWN else "")
                )
            elif now - waiting_since >= self.wait_for_writers:
                for lid, why in sorted(waiting.items()):
                    result.failures.setdefault(lid, []).append(
                        f"{why} after {self.wait_for_writers:g}s"
                    )
                return
            await asyncio.sleep(self.poll_interval)

    async def _move_ledger(self, lid: int, result: DecommissionResult) -> str | None:
        """One step for one ledger: None when it no longer lists the bookie, else what it
        waits for (a failure that waiting cannot mend goes to ``result.failures``)."""
        try:
            md = await self.metadata.call(self.metadata.read_ledger, lid)
        except NoSuchLedgerInMetadataError:
            return None
        plan = ledger_plan(md, self.bookie_id)
        if plan.done:
            return None
        if plan.recovering:
            return (
                "it is being recovered (or taken over), and is moved once that ends; "
                f"`embedlog ledger recover {lid}` finishes a recovery whose client is gone"
            )
        if plan.sealed:
            problems = await self._replace_in_sealed(md, result)
            if problems:
                result.failures[lid] = problems
                return "not moved"
        if plan.empty:
            problem = await self._replace_in_empty(lid, plan)
            if problem is not None:
                result.failures[lid] = [problem]
                return "not moved"
        try:
            md = await self.metadata.call(self.metadata.read_ledger, lid)
        except NoSuchLedgerInMetadataError:
            return None
        plan = ledger_plan(md, self.bookie_id)
        if plan.done:
            return None
        if plan.open_last and not (plan.sealed or plan.empty):
            return f"its writer has not moved its last fragment off {self.bookie_id} ({_how(md)})"
        return "its metadata changed while it was being moved"

    async def _replace_in_sealed(self, md: LedgerMetadata, result: DecommissionResult) -> list[str]:
        """Re-replication of the bookie's part of the sealed fragments (copy, verify, swap);
        what went wrong, or nothing."""
        bid = self.bookie_id
        lid = md.ledger_id
        self._count([md])
        check = await self.replicator.checker.check_ledger(lid)
        if check.metadata is None:  # deleted meanwhile
            return []
        # Whether it answers or not, the bookie is the one to replace, and never a source.
        check.held.pop(bid, None)
        check.missing.pop(bid, None)
        check.unavailable[bid] = "being decommissioned"
        repair = await self.replicator.repair_ledger(check)
        result.ledgers[lid] = repair
        new = repair.replaced.get(bid)
        if new is not None:
            self._copied += repair.copied.get(new, 0)
        self.progress(self._copied, self._total, f"ledger {lid}")
        if new is not None:
            return []
        problems = list(repair.failures) or ["its sealed fragments were not moved"]
        if repair.lost:
            problems.append(
                f"entries {format_ids(sorted(set(repair.lost)))} have no copy on any other bookie"
            )
        return problems

    async def _replace_in_empty(self, lid: int, plan: LedgerPlan) -> str | None:
        """Rewrite the fragments without entries that list the bookie; None when done, else
        why not."""
        bid = self.bookie_id
        for _ in range(_MAX_EMPTY_SWAPS):
            try:
                md = await self.metadata.call(self.metadata.read_ledger, lid)
            except NoSuchLedgerInMetadataError:
                return None
            firsts = ledger_plan(md, bid).empty
            if not firsts:
                return None
            available = await self.metadata.call(self.metadata.bookie_infos)
            exclude = {b for f in firsts for b in md.ensembles[f]}
            ensemble = md.ensembles[firsts[0]]
            try:
                new = self.placement.replace_bookie(
                    ensemble, ensemble.index(bid), md.write_quorum, available, exclude
                )
            except NotEnoughBookiesError as exc:
                return f"no bookie to take {bid}'s place in fragments without entries: {exc}"
            swapped = swap_in_empty_fragments(md, bid, new, firsts)
            if swapped is None:
                return None
            try:
                await self.metadata.call(self.metadata.write_ledger, swapped)
            except MetadataVersionError:
                continue  # a writer or a recovery changed it: read it again
            log.info("decommission: ledger %d: %s replaced by %s in empty fragments", lid, bid, new)
            return None
        return "its metadata kept changing; run again"

    def _count(self, ledgers: Iterable[LedgerMetadata]) -> None:
        """Entries of the bookie's sealed slots, for the progress bar's total."""
        for md in ledgers:
            self._to_copy[md.ledger_id] = max(
                self._to_copy.get(md.ledger_id, 0),
                len(assigned_entries(md).get(self.bookie_id, [])),
            )

    @property
    def _total(self) -> int:
        return max(self._copied, sum(self._to_copy.values()))

    # -- retiring --------------------------------------------------------------------------------

    async def _retire(self) -> None:
        await self._refuse_if_registered()  # started again meanwhile: it would hold data again
        await self.metadata.call(self._delete_records)

    def _delete_records(self) -> None:
        """The cookie first: without it, the bookie's disks fail the check at its next boot."""
        bid = self.bookie_id
        self.metadata.delete_cookie(bid)
        for base in (AVAILABLE, READONLY, CLAIMS, STATUS):
            try:
                self.metadata.store.delete(f"{base}/{bid}")
            except NoNodeError:
                pass


def _how(md: LedgerMetadata) -> str:
    """How an open ledger's last fragment gets sealed, for the operator."""
    if md.unbounded:
        return (
            "the stream's next append moves it; if its writer is gone, a new writer opening "
            "the stream (a takeover) seals it"
        )
    return (
        "the writer's next add moves it; if the writer is gone, "
        f"`embedlog ledger recover {md.ledger_id}` closes the ledger"
    )


def _exists(metadata: MetadataClient, path: str) -> bool:
    try:
        metadata.store.get(path)
    except NoNodeError:
        return False
    return True


def decommission_cluster(cluster: Any, bookie_id: str, **options: Any) -> DecommissionResult:
    """Decommission ``bookie_id`` of a LocalCluster (stop it first); see Decommissioner."""
    return Decommissioner(
        cluster.metadata, cluster.transport, cluster.runtime, bookie_id, **options
    ).run()
