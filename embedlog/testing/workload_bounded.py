"""The bounded ledgers' workload: pipelining writers, concurrent recoveries, the read-back.

1 to 3 writers (``LedgerWriter``) each create a bounded ledger and pipeline adds in
bursts (batched adds included), half of them closing their ledger at the end; 0 to 3
recoveries by other clients (``Client.open_ledger_aio(recover=True)``), mostly while the
writers still write, each reading the recovered ledger back; in ``bounded-tailing``,
readers following a ledger as it is written (``recover=False``: the LAC the bookies
report, then the last entry once it is closed). At the end a checker client recovers
every ledger and reads it back.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from embedlog.client import Client
from embedlog.errors import BKError, NoSuchLedgerInMetadataError, ReadPastLastConfirmedError
from embedlog.ledger.writer import LedgerWriter
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.metadata.striping import write_set_bookies
from embedlog.testing.oracle import Oracle
from embedlog.testing.oracle_fence import FenceRule
from embedlog.testing.oracle_fence_term import FenceAndTermRule
from embedlog.testing.oracle_quorum import AckQuorumRule
from embedlog.testing.simcombos import quiet_writer_wiped_reboot, wiped_reboot_at
from embedlog.testing.simcontext import ClusterControl, SimContext
from embedlog.testing.simloop import seeded
from embedlog.testing.workload import (
    DIGEST,
    PASSWORD,
    Aims,
    aimed_ledger,
    create_with_retries,
    maybe_pause,
    probe,
)
from embedlog.wire.entry import Digester

# A tailing reader polls about every TAIL_GAP seconds (exponential), at most TAIL_POLLS
# times, and stops TAIL_IDLE polls after the last writer is done.
TAIL_GAP = 0.05
TAIL_POLLS = 400
TAIL_IDLE = 5


class BoundedWorkload:
    def __init__(self, ctx: SimContext, cluster: ClusterControl, aims: Aims) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.aims = aims
        self.oracle = Oracle(Digester(DIGEST).digest_len, ctx.trace, self.responsible)
        self.oracle.quorum = AckQuorumRule(self.oracle.payload_of, self.oracle.violate, ctx.counts)
        self.oracle.fence_term = FenceAndTermRule(self.oracle.violate, ctx.counts)
        self.oracle.fence = FenceRule(ctx.truth.read_ledger, self.oracle.violate, ctx.counts)
        self.ledgers: list[int] = []
        self._writers: list[LedgerWriter] = []
        self._writing = 0  # writers not yet done
        # The tailing readers' draws, a stream of their own (other scenarios draw none).
        self._tail_rng = seeded(ctx.seed, "tailers")

    def start(self) -> list[asyncio.Future[Any]]:
        ctx, rng = self.ctx, self.ctx.rng
        n_ledgers = rng.randint(*ctx.scenario.ledgers)
        work: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(self.writer(i)) for i in range(n_ledgers)
        ]
        work += [
            asyncio.ensure_future(self.recoverer(j))
            for j in range(rng.randint(*ctx.scenario.recoveries))
        ]
        if ctx.scenario.tailers != (0, 0):
            tailers = self._tail_rng.randint(*ctx.scenario.tailers)
            work += [asyncio.ensure_future(self.tailer(j)) for j in range(tailers)]
        return work

    def stop(self) -> None:
        for w in self._writers:
            w.stop()

    def retrying(self, task: asyncio.Future[Any], now: float) -> bool:
        return False  # no reader tails a bounded ledger here

    def responsible(self, lid: int, eid: int, bookie: str) -> bool:
        try:
            md = self.ctx.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return True  # never deleted in these scenarios: a negative is a violation
        if md.is_closed and eid > md.last_entry_id:
            return False
        return bookie in write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)

    async def writer(self, i: int) -> None:
        self._writing += 1
        try:
            await self._write(i)
        finally:
            self._writing -= 1

    async def _write(self, i: int) -> None:
        ctx, rng = self.ctx, self.ctx.rng
        name = f"w{i}"
        client = self.cluster.client(name)
        await asyncio.sleep(rng.uniform(0, 0.05))
        md = await create_with_retries(
            ctx,
            name,
            lambda: client.new_ledger_metadata(
                ctx.ensemble,
                ctx.write_quorum,
                ctx.ack_quorum,
                digest=DIGEST,
                password=PASSWORD,
                custom_metadata=None,
            ),
        )
        if md is None:
            return
        lid = md.ledger_id
        self.ledgers.append(lid)
        ctx.trace("created", name, lid, md.fragments)
        writer = LedgerWriter(client.ctx, md, PASSWORD)
        self._writers.append(writer)
        futures: list[asyncio.Future[int]] = []
        n_adds = rng.randint(*ctx.scenario.entries)
        quiet_at = wiped_reboot_at(ctx, n_adds)
        for i in range(n_adds):
            if writer.error is not None:
                break
            eid = writer.next_entry_id
            payload = b"%d:%d:%08x" % (lid, eid, rng.getrandbits(32))
            fut = writer.add(payload)
            fut.add_done_callback(functools.partial(self._add_done, name, lid, eid, payload))
            futures.append(fut)
            ctx.counts["add"] += 1
            if rng.random() < 0.3:
                await asyncio.sleep(rng.expovariate(100.0))
            await maybe_pause(ctx, self.aims, name, lid)
            if i == quiet_at:
                await quiet_writer_wiped_reboot(ctx, self.cluster, self.oracle, name, lid, writer)
        if futures:
            await asyncio.wait(futures)
        if writer.error is None and rng.random() < 0.5:
            try:
                closed = await writer.close()
            except BKError as exc:
                ctx.counts[f"writer.close_failed.{type(exc).__name__}"] += 1
                ctx.trace("close-failed", name, lid, type(exc).__name__)
            else:
                ctx.counts["writer.close"] += 1
                ctx.trace("closed", name, lid, closed.last_entry_id)
                self.oracle.ledger_closed(lid, closed.last_entry_id, name)
        if len(writer.md.fragments) > 1:
            ctx.counts["ensemble_change"] += len(writer.md.fragments) - 1

    def _add_done(
        self, name: str, lid: int, eid: int, payload: bytes, f: asyncio.Future[int]
    ) -> None:
        if f.cancelled():
            return
        ctx = self.ctx
        exc = f.exception()
        if exc is not None:
            ctx.counts[f"add.failed.{type(exc).__name__}"] += 1
            ctx.trace("add-failed", name, lid, eid, type(exc).__name__)
            return
        got = f.result()
        ctx.trace("acked", name, lid, got)
        if got != eid:
            self.oracle.violate(
                "NoOutOfOrderEntries", f"{name}'s add of entry {lid}:{eid} was acked as {got}"
            )
        ctx.counts["add.acked"] += 1
        self.oracle.acknowledged(lid, got, payload)
        assert self.oracle.quorum is not None
        self.oracle.quorum.acknowledged(lid, got, payload, ctx.truth.read_ledger(lid), name)

    async def tailer(self, j: int) -> None:
        """A reader following a ledger as it is written, without recovering it
        (``open_ledger_aio(recover=False)``): it asks for the entry after the last it
        read, which past the LAC it knows makes the handle ask the bookies (and the
        metadata, which may say the ledger was closed meanwhile) again. Every entry it is
        handed must be committed with the payload its writer sent
        (``ReadersSeeOnlyCommitted``): a reader of an open ledger sees no entry a
        recovery may still leave out."""
        ctx, rng = self.ctx, self._tail_rng
        name = f"f{j}"
        client = self.cluster.client(name)
        await asyncio.sleep(rng.uniform(0.02, 0.3))
        if not self.ledgers:
            return
        lid = rng.choice(self.ledgers)
        try:
            rh = await client.open_ledger_aio(lid, password=PASSWORD, recover=False)
        except BKError as exc:
            ctx.counts[f"tail.open_failed.{type(exc).__name__}"] += 1
            return
        ctx.trace("tail", name, lid, rh.last_add_confirmed)
        following, idle = 0, 0
        for _ in range(TAIL_POLLS):
            md = rh.metadata
            if md.is_closed and following > md.last_entry_id:
                ctx.counts["tail.read_to_close"] += 1
                return
            if not self._writing:
                idle += 1
                if idle > TAIL_IDLE:
                    return
            await asyncio.sleep(rng.expovariate(1 / TAIL_GAP))
            last = min(max(following, rh.last_add_confirmed), following + 15)
            try:
                got = await rh.read_aio(following, last)
            except ReadPastLastConfirmedError:
                ctx.counts["tail.caught_up"] += 1
                continue
            except BKError as exc:
                ctx.counts[f"tail.read_failed.{type(exc).__name__}"] += 1
                ctx.trace("tail-read-failed", name, lid, following, last, type(exc).__name__)
                continue
            assert self.oracle.quorum is not None
            for entry in got:
                ctx.counts["tail.read"] += 1
                self.oracle.quorum.read(lid, entry.entry_id, entry.data, ctx.ack_quorum, name)
            following = last + 1

    async def recoverer(self, j: int) -> None:
        ctx, rng = self.ctx, self.ctx.rng
        name = f"r{j}"
        client = self.cluster.client(name)
        # Mostly while the writers still write: that is where recovery races them.
        await asyncio.sleep(rng.uniform(0.01, 0.15) if rng.random() < 0.8 else rng.uniform(0, 2))
        aimed = await aimed_ledger(ctx, self.aims, name)
        if not self.ledgers:
            return
        lid = aimed if aimed in self.ledgers else rng.choice(self.ledgers)
        if not ctx.decide("recovery", name, lid):
            return
        for _attempt in range(3):
            ctx.counts["recovery"] += 1
            ctx.trace("recover", name, lid)
            if await self._recover_and_read(client, lid, name, final=False):
                return
            await asyncio.sleep(rng.uniform(0.1, 1.0))

    async def _recover_and_read(self, client: Client, lid: int, name: str, *, final: bool) -> bool:
        ctx = self.ctx
        try:
            rh = await client.open_ledger_aio(lid, password=PASSWORD, recover=True)
        except BKError as exc:
            ctx.counts[f"recovery.failed.{type(exc).__name__}"] += 1
            ctx.trace("recover-failed", name, lid, type(exc).__name__, exc)
            return False
        md = rh.metadata
        if md.state is not LedgerState.CLOSED:
            self.oracle.violate("LedgerIsClosed", f"{name} recovered {lid} but it is {md.state}")
            return False
        last = md.last_entry_id
        ctx.counts["recovery.ok"] += 1
        ctx.trace("recovered", name, lid, last, md.fragments)
        self.oracle.ledger_closed(lid, last, name)
        entries: dict[int, bytes] = {}
        first = 0
        while first <= last:
            upto = min(last, first + 15)
            try:
                got = await rh.read_aio(first, upto)
            except BKError as exc:
                ctx.counts[f"read.failed.{type(exc).__name__}"] += 1
                ctx.trace("read-failed", name, lid, first, upto, type(exc).__name__)
                if final:
                    return False
                break
            entries.update((e.entry_id, e.data) for e in got)
            first = upto + 1
        else:
            self.oracle.read_back(lid, entries, last, name)
        return True

    async def check_end(self) -> None:
        """Recover every ledger and read it back (liveness waived where AQ bookies of one
        ensemble crashed without the journal: an acknowledged entry may be gone)."""
        ctx = self.ctx
        checker = self.cluster.client("checker")
        for lid in list(self.ledgers):
            md = ctx.truth.read_ledger(lid)
            lost = ctx.budget.lossy_fragments(md)
            for attempt in range(1 if lost else 6):
                if await self._recover_and_read(checker, lid, "checker", final=True):
                    break
                await asyncio.sleep(1.0 + attempt)
            else:
                if lost:
                    ctx.budget.unrecoverable(lid)
                    ctx.counts["liveness_exempt"] += 1
                    ctx.trace("unrecoverable", lid, "lossy crashes in", lost)
                    continue
                self.oracle.violate(
                    "LedgerIsClosed",
                    f"ledger {lid} could not be recovered and read back after healing",
                )
        if ctx.races is not None:
            for lid in list(self.ledgers):
                await self._probe(checker, lid)

    async def _probe(self, checker: Client, lid: int) -> None:
        """The end probe (``workload.probe``) of every entry of a closed ledger, a
        recovery's write-backs included."""
        md = self.ctx.truth.read_ledger(lid)
        if md.is_closed:  # else left unrecoverable (liveness waived): nothing is sure
            await probe(self.ctx, checker, md, range(md.last_entry_id + 1))
