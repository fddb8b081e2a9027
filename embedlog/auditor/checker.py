"""BP-34 cluster metadata checker: do the bookies agree with the metadata?

For every closed ledger, and for the sealed fragments (all but the last) of
every open or recovering one, the checker

1. skips a ledger already marked under-replicated, reporting
   ``underreplicated_too_long`` when the mark is older than the threshold;
2. checks every fragment's ensemble against the placement policy
   (``placement``);
3. asks each bookie that the write sets assign entries for the entries it holds
   (LIST_ENTRIES, answered in the BP-34 availability encoding) and reports every
   assigned entry a bookie *answered* it lacks (``durability``);
4. treats a bookie that does not answer (timeout, unreachable, EUNKNOWN, EIO,
   an undecodable list) as unknown, never as missing data; such ledgers are
   checked again after ``recheck_delay`` seconds (``rechecks`` times), and a
   bookie still silent then is reported (``bookie_unavailable``), saying whether
   it is still registered (the cluster believes it is up) or not.

The BP leaves open ledgers alone because their last fragment is still being
written. Their other fragments are sealed (the writer moved on only once every
entry below the new fragment was acknowledged) and never change again, so they
are checked like a closed ledger's. An unbounded ledger is never closed: without
this, nothing would ever find a bookie that lost a sealed fragment of it. An
open ledger with a single fragment has nothing sealed and is skipped.

Before reporting a ledger, the checker looks at its under-replication mark again
(a marked ledger is being repaired: skip it) and re-reads its metadata; if a
fragment it checked changed meanwhile (an ensemble was rewritten, fragments
were trimmed), the ledger is analysed again instead of raising a false alarm.

The checker only reports; ``embedlog.auditor.replication`` repairs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from attrs import define, field

from embedlog.auditor.rules import (
    HOLDS_NOTHING,
    analysis_stands,
    bookies_to_ask,
    format_ids,
    fragment_ranges,
    missing_entries,
    underreplicated_too_long,
)
from embedlog.errors import (
    BKTimeoutError,
    BookieUnavailableError,
    NoSuchLedgerInMetadataError,
    status_name,
)
from embedlog.ledger.placement import PlacementPolicy, RackAwarePlacement
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.runtime import Runtime
from embedlog.transport.base import Transport, next_txn
from embedlog.wire.availability import AvailabilityOfEntries
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request

log = logging.getLogger(__name__)

T = TypeVar("T")

PLACEMENT = "placement"
DURABILITY = "durability"
UNDERREPLICATED_TOO_LONG = "underreplicated_too_long"
BOOKIE_UNAVAILABLE = "bookie_unavailable"
CATEGORIES = (PLACEMENT, DURABILITY, UNDERREPLICATED_TOO_LONG, BOOKIE_UNAVAILABLE)

DEFAULT_UNDERREPLICATED_THRESHOLD = 24 * 3600.0  # seconds a ledger may stay marked
_MAX_ANALYSES = 3  # re-analyses of one ledger whose metadata keeps changing under us

Progress = Callable[[int, int, int], None]  # (ledgers done, ledgers total, ledger id)


class Violation(NamedTuple):
    """One BP-34 violation: unpacks as ``(category, ledger_id, detail)``."""

    category: str
    ledger_id: int
    detail: str


@define
class LedgerCheck:
    """What the checker learnt about one ledger (the repair works from this)."""

    ledger_id: int
    # "checked" (a closed ledger, or an open one's sealed fragments) | "open" (open with
    # nothing sealed yet) | "underreplicated" | "deleted"
    outcome: str
    metadata: LedgerMetadata | None = None
    placement: list[str] = field(factory=list)
    held: dict[str, AvailabilityOfEntries] = field(factory=dict)  # bookies that answered
    missing: dict[str, list[int]] = field(factory=dict)  # bookie -> entries it lacks
    unavailable: dict[str, str] = field(factory=dict)  # bookie -> why its answer is unknown
    underreplicated_since: float | None = None
    too_long: bool = False

    @property
    def clean(self) -> bool:
        return not (self.placement or self.missing or self.unavailable or self.too_long)

    @property
    def sealed_only(self) -> bool:
        """The ledger is not closed: only its fragments before the last were checked."""
        return self.metadata is not None and not self.metadata.is_closed


@define
class Report:
    """The result of one checker run."""

    violations: list[Violation] = field(factory=list)
    ledgers: dict[int, LedgerCheck] = field(factory=dict)
    checked: int = 0  # ledgers analysed: closed ones, and open ones with sealed fragments
    checked_open: int = 0  # of those, open or recovering: sealed fragments only
    skipped_open: int = 0  # open or recovering with a single fragment: nothing sealed yet
    skipped_underreplicated: int = 0  # already marked: being repaired
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def counts(self) -> dict[str, int]:
        """Violations per category (every category present, 0 when none)."""
        out = dict.fromkeys(CATEGORIES, 0)
        for v in self.violations:
            out[v.category] += 1
        return out

    def by_category(self, category: str) -> list[Violation]:
        return [v for v in self.violations if v.category == category]

    def summary(self) -> str:
        counts = ", ".join(f"{c}={n}" for c, n in self.counts().items())
        return (
            f"{self.checked} ledger(s) checked ({self.checked_open} open: sealed fragments "
            f"only), {self.skipped_open} open with nothing sealed skipped, "
            f"{self.skipped_underreplicated} under-replicated skipped, in {self.seconds:.2f}s; "
            f"violations: {len(self.violations)} ({counts})"
        )


def violations_of(check: LedgerCheck, registered: set[str]) -> list[Violation]:
    """The violations one ledger's analysis amounts to."""
    lid = check.ledger_id
    out: list[Violation] = []
    if check.too_long:
        out.append(
            Violation(
                UNDERREPLICATED_TOO_LONG,
                lid,
                f"ledger {lid} has been marked under-replicated since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(check.underreplicated_since))}"
                " UTC and is still not repaired",
            )
        )
    out.extend(Violation(PLACEMENT, lid, f"ledger {lid}: {p}") for p in check.placement)
    md = check.metadata
    for bookie, ids in sorted(check.missing.items()):
        assigned = ""
        if md is not None and md.is_closed:
            assigned = f" (write quorum {md.write_quorum}, last entry {md.last_entry_id})"
        elif md is not None:
            sealed_end = md.last_fragment[0] - 1
            assigned = (
                f" (write quorum {md.write_quorum}; {md.state.value} ledger: its sealed "
                f"fragments, entries up to {sealed_end})"
            )
        noun = "entry" if len(ids) == 1 else "entries"
        out.append(
            Violation(
                DURABILITY,
                lid,
                f"ledger {lid}: bookie {bookie} lacks {len(ids)} {noun} its write sets "
                f"assign it: {format_ids(ids)}{assigned}",
            )
        )
    for bookie, why in sorted(check.unavailable.items()):
        state = (
            "still registered, so the cluster believes it is up"
            if bookie in registered
            else "not registered: down or gone"
        )
        out.append(
            Violation(
                BOOKIE_UNAVAILABLE,
                lid,
                f"ledger {lid}: bookie {bookie} of its ensemble did not answer ({why}); it is "
                f"{state}; its entries of this ledger could not be verified",
            )
        )
    return out


class MetadataChecker:
    """BP-34 checker over every ledger (or the ones given to ``run``): closed ones whole,
    open ones up to their last fragment."""

    def __init__(
        self,
        metadata: MetadataClient,
        transport: Transport,
        runtime: Runtime,
        *,
        placement: PlacementPolicy | None = None,
        underreplicated_threshold: float = DEFAULT_UNDERREPLICATED_THRESHOLD,
        clock: Callable[[], float] | None = None,
        request_timeout: float = 5.0,
        recheck_delay: float = 1.0,
        rechecks: int = 1,
        concurrency: int = 16,
        include_underreplicated: bool = False,
        name: str = "auditor",
        progress: Progress | None = None,
    ) -> None:
        if underreplicated_threshold < 0:
            raise ValueError(
                f"underreplicated_threshold must be >= 0 seconds, got {underreplicated_threshold}"
            )
        if request_timeout <= 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout}")
        if recheck_delay < 0 or rechecks < 0:
            raise ValueError("recheck_delay and rechecks must be >= 0")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.metadata = metadata
        self.transport = transport
        self.runtime = runtime
        # Rack-aware by default: with every bookie on one rack it only asks for distinct
        # bookies, and with racks configured it checks that write sets span them.
        self.placement = placement or RackAwarePlacement()
        self.threshold = underreplicated_threshold
        # Wall time for the marks' age (None: the metadata client's clock, embedlog/clock.py).
        self.clock = clock if clock is not None else metadata.clock.time
        self.request_timeout = request_timeout
        self.recheck_delay = recheck_delay
        self.rechecks = rechecks
        self.concurrency = concurrency
        # The replicator analyses marked ledgers too (the BP's checker skips them).
        self.include_underreplicated = include_underreplicated
        self.name = name
        self.progress = progress
        # Registered bookies and their racks, read once per pass over the ledgers.
        self._infos: dict[str, dict[str, object]] | None = None

    # -- entry points --------------------------------------------------------------------------

    def run(self, ledger_ids: Iterable[int] | None = None) -> Report:
        """Check every ledger (or ``ledger_ids``); blocks until done."""
        ids = None if ledger_ids is None else list(ledger_ids)
        return self.runtime.run(self.run_aio(ids))

    async def run_aio(self, ledger_ids: list[int] | None = None) -> Report:
        started = self.metadata.clock.monotonic()
        if ledger_ids is None:
            ledger_ids = await self.metadata.call(lambda: sorted(self.metadata.list_ledgers()))
        report = Report()
        total = len(ledger_ids)
        done = 0
        sem = asyncio.Semaphore(self.concurrency)

        async def one(lid: int) -> None:
            nonlocal done
            async with sem:
                report.ledgers[lid] = await self.check_ledger(lid)
            done += 1
            if self.progress is not None:
                self.progress(done, total, lid)

        self._infos = await self.metadata.call(self._bookie_infos)
        try:
            await asyncio.gather(*(one(lid) for lid in ledger_ids))
        finally:
            self._infos = None

        # BP-34: ledgers with silent bookies are checked again later, and only then reported.
        for _ in range(self.rechecks):
            faulty = [lid for lid, c in report.ledgers.items() if c.unavailable]
            if not faulty:
                break
            log.info(
                "auditor: %d ledger(s) had bookies not answering; checking them again in %.1fs",
                len(faulty),
                self.recheck_delay,
            )
            await asyncio.sleep(self.recheck_delay)
            again = await gather_limited(
                self.concurrency, (self.check_ledger(lid) for lid in faulty)
            )
            for lid, check in zip(faulty, again, strict=True):
                report.ledgers[lid] = check

        registered = set(await self.metadata.call(self._registered))
        for lid in sorted(report.ledgers):
            check = report.ledgers[lid]
            if check.outcome == "checked":
                report.checked += 1
                report.checked_open += int(check.sealed_only)
            elif check.outcome == "open":
                report.skipped_open += 1
            elif check.outcome == "underreplicated":
                report.skipped_underreplicated += 1
            for v in violations_of(check, registered):
                log.warning("auditor: %s violation: %s", v.category, v.detail)
                report.violations.append(v)
        report.seconds = self.metadata.clock.monotonic() - started
        log.info("auditor: %s", report.summary())
        return report

    # -- one ledger ----------------------------------------------------------------------------

    async def check_ledger(self, ledger_id: int) -> LedgerCheck:
        marked = await self._marked(ledger_id)
        if marked is not None:
            return marked
        try:
            md = await self.metadata.call(self.metadata.read_ledger, ledger_id)
        except NoSuchLedgerInMetadataError:
            return LedgerCheck(ledger_id, "deleted")
        check = LedgerCheck(ledger_id, "open", md)
        for _ in range(_MAX_ANALYSES):
            if not md.is_closed and not fragment_ranges(md):
                return LedgerCheck(ledger_id, "open", md)
            check = await self._analyse(md)
            if check.clean:
                return check
            # Before reporting: a ledger marked meanwhile is being repaired; fragments that
            # changed meanwhile (an ensemble rewritten, a trim) are analysed again, not
            # reported. An open ledger's writer adding fragments changes neither.
            marked = await self._marked(ledger_id, md)
            if marked is not None:
                return marked
            try:
                latest = await self.metadata.call(self.metadata.read_ledger, ledger_id)
            except NoSuchLedgerInMetadataError:
                return LedgerCheck(ledger_id, "deleted")
            if latest.version == md.version or analysis_stands(md, latest):
                return check
            log.info("auditor: ledger %d changed while being checked; checking again", ledger_id)
            md = latest
        return check

    async def _marked(self, ledger_id: int, md: LedgerMetadata | None = None) -> LedgerCheck | None:
        """The outcome for a ledger marked under-replicated (being repaired: not analysed),
        or None when it is not marked. The replicator analyses marked ledgers too."""
        if self.include_underreplicated:
            return None
        mark = await self.metadata.call(self._mark, ledger_id)
        if mark is None:
            return None
        since = float(mark.get("since", 0.0))
        return LedgerCheck(
            ledger_id,
            "underreplicated",
            md,
            underreplicated_since=since,
            too_long=underreplicated_too_long(since, self.clock(), self.threshold),
        )

    async def _analyse(self, md: LedgerMetadata) -> LedgerCheck:
        check = LedgerCheck(md.ledger_id, "checked", md)
        infos = self._infos
        if infos is None:
            infos = await self.metadata.call(self._bookie_infos)
        check.placement = placement_problems(self.placement, md, infos)
        bookies = bookies_to_ask(md)
        answers = await asyncio.gather(*(self.list_entries(b, md.ledger_id) for b in bookies))
        for bookie, (held, why) in zip(bookies, answers, strict=True):
            if held is not None:
                check.held[bookie] = held
            else:
                check.unavailable[bookie] = why
        check.missing = missing_entries(md, check.held)
        return check

    async def list_entries(
        self, bookie: str, ledger_id: int
    ) -> tuple[AvailabilityOfEntries | None, str]:
        """(what ``bookie`` holds of ``ledger_id``, "") or (None, why it is unknown)."""
        req = Request(OpCode.LIST_ENTRIES, next_txn(), ledger_id)
        try:
            resp = await self.transport.request(self.name, bookie, req, self.request_timeout)
        except BKTimeoutError:
            return None, f"no answer in {self.request_timeout:g}s"
        except BookieUnavailableError as exc:
            return None, f"unreachable: {exc}"
        if resp.status == StatusCode.EOK:
            try:
                return AvailabilityOfEntries.decode(resp.body), ""
            except ValueError as exc:
                return None, f"undecodable entry list: {exc}"
        if resp.status == HOLDS_NOTHING:
            return AvailabilityOfEntries(()), ""
        return None, f"answered {status_name(resp.status)}"

    # -- metadata ------------------------------------------------------------------------------

    def _mark(self, ledger_id: int) -> dict[str, Any] | None:
        return self.metadata.underreplicated().get(ledger_id)

    def _registered(self) -> list[str]:
        return self.metadata.writable_bookies() + self.metadata.readonly_bookies()

    def _bookie_infos(self) -> dict[str, dict[str, object]]:
        return self.metadata.bookie_infos(readonly=True)


def placement_problems(
    policy: PlacementPolicy, md: LedgerMetadata, infos: dict[str, dict[str, object]]
) -> list[str]:
    """Placement violations of each checked fragment (``fragment_ranges``: not an open
    ledger's last one, whose ensemble its writer may still change).

    A fragment with a bookie that is not registered is not judged: its rack is
    unknown (that bookie's silence is reported as ``bookie_unavailable``).
    """
    problems: list[str] = []
    for first, _last, ensemble in fragment_ranges(md):
        if any(b not in infos for b in ensemble):
            continue
        for p in policy.violations(list(ensemble), md.write_quorum, infos):
            problems.append(f"fragment starting at entry {first}: {p}")
    return problems


async def gather_limited(n: int, aws: Iterable[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` with at most ``n`` awaitables running at once."""
    sem = asyncio.Semaphore(n)

    async def one(aw: Awaitable[T]) -> T:
        async with sem:
            return await aw

    return await asyncio.gather(*(one(a) for a in aws))
