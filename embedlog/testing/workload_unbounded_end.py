"""The end of a streams' history: reading a stream whole after the final takeover, and
the race scenarios' probe of every bookie of every acknowledged entry's write set
(``UnboundedWorkload.check_end`` calls them), and the reads the workload's followers
make too."""

from __future__ import annotations

from typing import Any

from embedlog.client import Client
from embedlog.errors import BKError, NoSuchEntryError
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_unbounded import StreamOracle
from embedlog.testing.simcontext import SimContext
from embedlog.testing.workload import PASSWORD, probe
from embedlog.unbounded import follow, layout
from embedlog.unbounded.ledger import UnboundedLedger
from embedlog.wire.entry import Digester

READ_BATCH = 16  # entries one read asks for


async def read_or_none(
    ctx: SimContext,
    client: Client,
    md: LedgerMetadata,
    digester: Digester,
    first: int,
    last: int,
    name: str,
) -> list[Any] | None:
    """Entries ``first``..``last`` as ``client`` reads them, None when the read failed."""
    try:
        return await follow.read_visible(client.ctx, md, digester, first, last)
    except NoSuchEntryError as exc:
        # Trimmed since this metadata was read: the next metadata says how far.
        ctx.trace("read-trimmed", name, md.ledger_id, first, last, exc)
        return None
    except BKError as exc:
        ctx.counts[f"read.failed.{type(exc).__name__}"] += 1
        ctx.trace("read-failed", name, md.ledger_id, first, last, type(exc).__name__)
        return None


async def probe_acked(ctx: SimContext, oracle: StreamOracle, checker: Client, lid: int) -> None:
    """The end probe (``workload.probe``) of a stream's acknowledged entries at or above
    its trim point."""
    md = ctx.truth.read_ledger(lid)
    first = layout.first_entry(md)
    await probe(ctx, checker, md, sorted(e for e in oracle.stream_acked.get(lid, {}) if e >= first))


async def read_whole(
    ctx: SimContext, oracle: StreamOracle, checker: Client, handle: UnboundedLedger
) -> list[tuple[int, bytes]] | None:
    lid = handle.ledger_id
    md, last = handle.metadata, handle.last_add_confirmed
    first = layout.first_entry(md)
    digester = Digester(md.digest_type, PASSWORD)
    entries: list[tuple[int, bytes]] = []
    for start in range(first, last + 1, READ_BATCH):
        got = await read_or_none(
            ctx, checker, md, digester, start, min(last, start + READ_BATCH - 1), "checker"
        )
        if got is None:
            oracle.violate(
                "AllAckedValuesAreReadable",
                f"the checker could not read {lid}:{start}.. after taking it over",
            )
            return None
        entries.extend((e.entry_id, e.data) for e in got)
    if first > 0:
        # Below the trim point a read must fail as trimmed, never return a payload.
        try:
            got = await follow.read_visible(checker.ctx, md, digester, first - 1, first - 1)
        except NoSuchEntryError:
            ctx.counts["trimmed_read_refused"] += 1
        else:
            oracle.violate(
                "AllAckedValuesAreReadable",
                f"a read of trimmed {lid}:{first - 1} returned {[e.data for e in got]}",
            )
    return entries
