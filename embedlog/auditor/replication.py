"""Re-replication: repair what the BP-34 checker finds.

For each ledger whose check found something to repair (a closed ledger, or
the sealed fragments of an open one: whatever the checker checked):

1. mark it under-replicated in the metadata (naming the bookies concerned), so
   that the checker leaves it alone while it is being repaired and reports it
   if it stays marked too long;
2. for every bookie of its ensembles that did not answer: choose a replacement
   with the placement policy, copy every entry the write sets assign the old
   bookie to the replacement (read from a peer replica, written with the
   recovery flag so that a fenced ledger accepts it), verify that the replacement
   lists them all, and only then swap the bookie in those fragments by
   compare-and-swap on the metadata. An open
   ledger has a live writer: the swap keeps its state, term and last fragment,
   and on a version conflict (the writer started a fragment) it re-reads and
   swaps again in the fragments that are still as they were copied. A ledger
   being recovered is left marked for the next run (its recovery's closing
   compare-and-swap must not lose to ours);
3. for every bookie that answered but lacks entries: copy those entries to it
   from a peer replica;
4. check the ledger again; when it is clean, remove the mark.

Entries are copied as the bookies store them (header, digest, payload); a
CRC32C entry's digest is verified before it is copied, so corruption is not
spread. An entry that no answering bookie holds is reported as lost and the
ledger stays marked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from attrs import define, field

from embedlog.auditor.checker import LedgerCheck, MetadataChecker, Report
from embedlog.auditor.rules import (
    FragmentRange,
    assigned_entries,
    copy_sources,
    format_ids,
    fragment_ranges,
    may_swap_bookies,
    replacement_exclusions,
    swap_bookie,
)
from embedlog.errors import (
    BKTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    MetadataVersionError,
    NoSuchLedgerInMetadataError,
    NotEnoughBookiesError,
    status_name,
)
from embedlog.ledger.placement import PlacementPolicy, RackAwarePlacement
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.runtime import Runtime
from embedlog.transport.base import Transport, next_txn
from embedlog.wire.availability import AvailabilityOfEntries
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType, parse_header
from embedlog.wire.messages import AddFlags, OpCode, Request, Response

log = logging.getLogger(__name__)

Say = Callable[[str], None]

# Compare-and-swap attempts for one bookie swap; each lost one means the ledger's writer
# changed its metadata in between (a new fragment, a trim), so we re-read and try again.
MAX_SWAP_ATTEMPTS = 10


@define
class LedgerRepair:
    ledger_id: int
    copied: dict[str, int] = field(factory=dict)  # target bookie -> entries copied to it
    replaced: dict[str, str] = field(factory=dict)  # unavailable bookie -> its replacement
    lost: list[int] = field(factory=list)  # entries no answering bookie holds
    failures: list[str] = field(factory=list)  # what could not be done, and why
    repaired: bool = False  # a check after the repair found the ledger clean


@define
class ReplicationResult:
    report: Report  # the check the repair worked from
    ledgers: dict[int, LedgerRepair] = field(factory=dict)
    unmarked: list[int] = field(factory=list)  # marked ledgers found clean and unmarked
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(r.repaired for r in self.ledgers.values())

    @property
    def entries_copied(self) -> int:
        return sum(n for r in self.ledgers.values() for n in r.copied.values())

    def summary(self) -> str:
        fixed = sum(1 for r in self.ledgers.values() if r.repaired)
        return (
            f"{len(self.ledgers)} ledger(s) needed repair, {fixed} repaired, "
            f"{self.entries_copied} entries copied, "
            f"{sum(len(r.replaced) for r in self.ledgers.values())} bookie(s) replaced, "
            f"{len(self.unmarked)} stale mark(s) removed, in {self.seconds:.2f}s"
        )


class Replicator:
    """Checks the cluster (including ledgers already marked) and repairs what it finds."""

    def __init__(
        self,
        metadata: MetadataClient,
        transport: Transport,
        runtime: Runtime,
        *,
        placement: PlacementPolicy | None = None,
        request_timeout: float = 5.0,
        concurrency: int = 32,
        replace_unavailable: bool = True,
        name: str = "replicator",
        progress: Say | None = None,
        **checker_options: Any,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.metadata = metadata
        self.transport = transport
        self.runtime = runtime
        self.placement = placement or RackAwarePlacement()
        self.request_timeout = request_timeout
        self.concurrency = concurrency
        self.replace_unavailable = replace_unavailable
        self.name = name
        self.say = progress or (lambda _msg: None)
        self.checker = MetadataChecker(
            metadata,
            transport,
            runtime,
            placement=self.placement,
            request_timeout=request_timeout,
            include_underreplicated=True,
            name=name,
            **checker_options,
        )

    def run(self, ledger_ids: Iterable[int] | None = None) -> ReplicationResult:
        ids = None if ledger_ids is None else list(ledger_ids)
        return self.runtime.run(self.run_aio(ids))

    async def run_aio(self, ledger_ids: list[int] | None = None) -> ReplicationResult:
        started = self.metadata.clock.monotonic()
        report = await self.checker.run_aio(ledger_ids)
        result = ReplicationResult(report)
        todo = [
            c
            for c in report.ledgers.values()
            if c.outcome == "checked" and (c.missing or c.unavailable)
        ]
        marked = await self.metadata.call(self.metadata.underreplicated)
        for c in report.ledgers.values():
            if c.outcome in ("checked", "open") and _replicated(c) and c.ledger_id in marked:
                # Marked, yet every bookie holds what it should: someone repaired it (or, for
                # an open ledger, its sealed fragments were trimmed away).
                await self.metadata.call(self.metadata.clear_underreplicated, c.ledger_id)
                result.unmarked.append(c.ledger_id)
        self.say(f"{len(todo)} ledger(s) to repair")
        for n, check in enumerate(sorted(todo, key=lambda c: c.ledger_id), 1):
            self.say(f"ledger {check.ledger_id} ({n}/{len(todo)}): repairing")
            repair = await self.repair_ledger(check)
            result.ledgers[check.ledger_id] = repair
            state = "repaired" if repair.repaired else "NOT repaired: " + "; ".join(repair.failures)
            self.say(f"ledger {check.ledger_id}: {state}")
        result.seconds = self.metadata.clock.monotonic() - started
        log.info("replicator: %s", result.summary())
        return result

    # -- one ledger ----------------------------------------------------------------------------

    async def repair_ledger(self, check: LedgerCheck) -> LedgerRepair:
        md = check.metadata
        assert md is not None
        lid = md.ledger_id
        repair = LedgerRepair(lid)
        concerned = sorted(set(check.missing) | set(check.unavailable))
        await self.metadata.call(self.metadata.mark_underreplicated, lid, concerned)
        held: dict[str, AvailabilityOfEntries] = dict(check.held)

        if self.replace_unavailable:
            for old in sorted(check.unavailable):
                md = await self._replace(md, old, held, repair)

        for target, ids in sorted(check.missing.items()):
            copied = await self._copy(md, target, ids, held, repair)
            repair.copied[target] = repair.copied.get(target, 0) + copied

        after = await self.checker.check_ledger(lid)
        # Placement is the checker's to report; replication restores copies only.
        # "open": nothing sealed is left to hold (trimmed away meanwhile).
        if after.outcome in ("checked", "open", "deleted") and _replicated(after):
            await self.metadata.call(self.metadata.clear_underreplicated, lid)
            repair.repaired = True
        else:
            still = [f"{b} lacks {format_ids(ids)}" for b, ids in sorted(after.missing.items())]
            still += [f"{b} does not answer" for b in sorted(after.unavailable)]
            if still:
                repair.failures.append("after repair: " + ", ".join(still))
        return repair

    async def _replace(
        self,
        md: LedgerMetadata,
        old: str,
        held: dict[str, AvailabilityOfEntries],
        repair: LedgerRepair,
    ) -> LedgerMetadata:
        """Copy ``old``'s entries of the checked fragments to a new bookie, then swap it into
        those fragments by compare-and-swap."""
        if not may_swap_bookies(md):
            repair.failures.append(
                f"{old} not replaced: the ledger is being recovered; run again once it is done"
            )
            return md
        ranges = [r for r in fragment_ranges(md) if old in r[2]]
        if not ranges:  # swapped out by an earlier step of this repair
            return md
        available = await self.metadata.call(self.metadata.bookie_infos)
        ensemble = ranges[0][2]
        exclude = replacement_exclusions(ranges)
        try:
            new = self.placement.replace_bookie(
                list(ensemble), ensemble.index(old), md.write_quorum, available, exclude
            )
        except NotEnoughBookiesError as exc:
            repair.failures.append(f"no bookie to replace {old}: {exc}")
            return md
        ids = assigned_entries(md).get(old, [])
        self.say(f"ledger {md.ledger_id}: replacing {old} with {new} ({len(ids)} entries)")
        held_without_old = {b: h for b, h in held.items() if b != old}
        copied = await self._copy(md, new, ids, held_without_old, repair)
        repair.copied[new] = repair.copied.get(new, 0) + copied
        if copied < len(ids):
            repair.failures.append(
                f"{old} not replaced: only {copied} of its {len(ids)} entries reached {new}"
            )
            return md
        if not await self._arrived(md.ledger_id, old, new, ids, repair):
            return md
        updated = await self._swap(md, old, new, ranges, repair)
        if updated is None:
            return md
        repair.replaced[old] = new
        held[new] = AvailabilityOfEntries.from_entry_ids(ids)
        log.info("replicator: ledger %d: %s replaced by %s", md.ledger_id, old, new)
        return updated

    async def _arrived(
        self, lid: int, old: str, new: str, ids: list[int], repair: LedgerRepair
    ) -> bool:
        """Whether ``new`` lists every one of ``ids``: each add answered EOK, and the copy is
        verified once more, by what the bookie lists it holds, before the metadata names ``new``."""
        if not ids:
            return True
        held, why = await self.checker.list_entries(new, lid)
        lacking = [] if held is None else [e for e in ids if not held.contains(e)]
        if held is None or lacking:
            problem = f"it lacks {format_ids(lacking)}" if held is not None else why
            repair.failures.append(
                f"{old} not replaced: the copy on {new} did not verify ({problem})"
            )
            return False
        return True

    async def _swap(
        self,
        md: LedgerMetadata,
        old: str,
        new: str,
        ranges: list[FragmentRange],
        repair: LedgerRepair,
    ) -> LedgerMetadata | None:
        """The metadata with ``new`` in ``old``'s place in ``ranges``, written by CAS; None
        (and a failure noted) when it cannot be written."""
        why = "its metadata kept changing"
        for _ in range(MAX_SWAP_ATTEMPTS):
            swapped = swap_bookie(md, old, new, ranges)
            if swapped is None:
                why = "the fragments copied for were trimmed or rewritten meanwhile"
                break
            try:
                return await self.metadata.call(self.metadata.write_ledger, swapped)
            except MetadataVersionError:
                pass
            try:
                md = await self.metadata.call(self.metadata.read_ledger, md.ledger_id)
            except NoSuchLedgerInMetadataError:
                why = "the ledger was deleted"
                break
            if not may_swap_bookies(md):
                why = "the ledger went into recovery meanwhile"
                break
        repair.failures.append(f"{old} not replaced: {why}; run again")
        return None

    async def _copy(
        self,
        md: LedgerMetadata,
        target: str,
        ids: list[int],
        held: dict[str, AvailabilityOfEntries],
        repair: LedgerRepair,
    ) -> int:
        """Copy ``ids`` to ``target`` from peers; returns how many arrived."""
        sem = asyncio.Semaphore(self.concurrency)
        master_key = md.master_key
        errors: list[str] = []
        done = 0
        step = max(1000, len(ids) // 10)

        async def one(eid: int) -> bool:
            nonlocal done
            async with sem:
                ok = await self._copy_entry(md, eid, target, held, master_key, repair, errors)
            done += 1
            if done % step == 0:
                self.say(f"ledger {md.ledger_id}: {done}/{len(ids)} entries copied to {target}")
            return ok

        results = await asyncio.gather(*(one(e) for e in ids))
        if errors:
            shown = "; ".join(errors[:3]) + (
                f"; ... ({len(errors) - 3} more)" if len(errors) > 3 else ""
            )
            repair.failures.append(f"copying to {target}: {shown}")
        return sum(results)

    async def _copy_entry(
        self,
        md: LedgerMetadata,
        eid: int,
        target: str,
        held: dict[str, AvailabilityOfEntries],
        master_key: bytes,
        repair: LedgerRepair,
        errors: list[str],
    ) -> bool:
        lid = md.ledger_id
        sources = copy_sources(md, eid, target, held)
        if not sources:
            repair.lost.append(eid)
            errors.append(f"entry {eid}: no answering bookie holds it (lost)")
            return False
        why: list[str] = []
        for src in sources:
            data = await self._read(src, lid, eid, md.digest_type, why)
            if data is None:
                continue
            req = Request(
                OpCode.ADD,
                next_txn(),
                lid,
                eid,
                AddFlags.RECOVERY,
                master_key=master_key,
                body=data,
            )
            resp, why_not = await self._ask(target, req)
            if resp is None:
                errors.append(f"entry {eid}: {target} did not take it ({why_not})")
            return resp is not None
        errors.append(f"entry {eid}: no replica could be read ({'; '.join(why)})")
        return False

    async def _ask(self, bookie: str, req: Request) -> tuple[Response | None, str]:
        """``bookie``'s EOK answer to ``req``, or None and why there is none."""
        try:
            resp = await self.transport.request(self.name, bookie, req, self.request_timeout)
        except (BKTimeoutError, BookieUnavailableError) as exc:
            return None, str(exc)
        if resp.status != StatusCode.EOK:
            return None, f"answered {status_name(resp.status)}"
        return resp, ""

    async def _read(
        self, src: str, lid: int, eid: int, digest: DigestType, why: list[str]
    ) -> bytes | None:
        resp, why_not = await self._ask(src, Request(OpCode.READ, next_txn(), lid, eid))
        if resp is None:
            why.append(f"{src}: {why_not}")
            return None
        try:
            check_entry(resp.body, lid, eid, digest)
        except (ValueError, DigestMismatchError) as exc:
            why.append(f"{src}: {exc}")
            return None
        return resp.body


def check_entry(body: bytes, ledger_id: int, entry_id: int, digest: DigestType) -> None:
    """Raise unless ``body`` is entry ``ledger_id:entry_id`` (and, for CRC32C, intact).

    A MAC digest needs the ledger password, which the replicator does not have: only
    the header is checked then (the reader verifies the MAC).
    """
    if digest is DigestType.MAC:
        header = parse_header(body)
        if header.ledger_id != ledger_id or header.entry_id != entry_id:
            raise DigestMismatchError(
                f"asked for entry {ledger_id}:{entry_id}, got {header.ledger_id}:{header.entry_id}"
            )
        return
    Digester(digest).unpack(body, ledger_id, entry_id)


def _replicated(check: LedgerCheck) -> bool:
    """Every bookie answered and holds every entry its write sets assign it."""
    return not check.missing and not check.unavailable


def check_cluster(cluster: Any, **options: Any) -> Report:
    """Run the BP-34 checker on a LocalCluster with ``options`` (see MetadataChecker)."""
    return MetadataChecker(cluster.metadata, cluster.transport, cluster.runtime, **options).run()


def replicate_cluster(cluster: Any, **options: Any) -> ReplicationResult:
    """Check a LocalCluster and repair what the check finds (see Replicator)."""
    return Replicator(cluster.metadata, cluster.transport, cluster.runtime, **options).run()
