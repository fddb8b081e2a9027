"""The unbounded streams' workload: terms, takeovers, trims and followers, all at once.

Per seed, 1 or 2 unbounded ledgers (``Client.create_unbounded_aio``), some with a small
``fragment_max_entries`` so that writers roll over to fresh ensembles. Each ledger's
first writer pipelines appends in bursts; other clients take the stream over at random
times (``open_unbounded_aio(takeover=True)``: a new term, recovery, the truncate no-op)
and keep appending in their term, while the displaced writer sees InvalidTermError and
sometimes takes the stream back. Trimmers drop the fragments below a point (``trim_aio``);
followers (``takeover=False``) tail the stream as ``UnboundedLedger.tail`` does (long-poll
LAC reads, metadata re-read, reads of what is confirmed, jumps over trimmed ids).

At the end (network healed, every bookie back) a checker client takes every stream over
once more and reads it whole; the oracle (``oracle_unbounded``) compares that with every
acknowledgement of every term, every follower's sequence and every writer's appends.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from embedlog.client import Client
from embedlog.errors import (
    BKError,
    InvalidTermError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NoSuchLedgerInMetadataError,
)
from embedlog.ledger.quorum import write_set_bookies
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_quorum import AckQuorumRule, LafrRule
from embedlog.testing.oracle_unbounded import Follower, StreamOracle
from embedlog.testing.simcombos import dirty_leftover, dirty_leftover_at, dirty_leftover_ready
from embedlog.testing.workload import (
    DIGEST,
    PASSWORD,
    aimed_ledger,
    create_with_retries,
    maybe_pause,
)
from embedlog.testing.workload_streams import StreamOps
from embedlog.testing.workload_unbounded_end import READ_BATCH, probe, read_whole
from embedlog.unbounded import follow, layout
from embedlog.unbounded.ledger import UnboundedLedger
from embedlog.wire.entry import Digester

if TYPE_CHECKING:
    from embedlog.testing.sim import Simulation


class UnboundedWorkload:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.oracle = StreamOracle(
            Digester(DIGEST).digest_len, sim.trace, self.responsible, sim.counts
        )
        self.ledgers: list[int] = []
        self._handles: list[UnboundedLedger] = []
        self._followers: list[Follower] = []
        self._writing = 0  # streams still being written (followers stop when none are)
        self._quiet = asyncio.Event()
        self._held: dict[int, asyncio.Event] = {}  # streams a compound aim holds (hold)
        # Whether takeovers write the truncate no-op (off only under an unsafe switch):
        # with it, the new term owns the no-op's id and everything above.
        self._noop = not sim.client_options.get("unsafe_takeover_without_noop", False)
        # The stream layer (retention, cursors, deletes: workload_streams.py), when asked.
        sc = sim.scenario
        self.ops = StreamOps(self) if sc.retention or max(sc.committers + sc.deletes) else None
        quorum = AckQuorumRule(self.oracle.payload_of, self.oracle.violate, sim.counts)
        self.oracle.quorum = quorum
        self.oracle.lafr = LafrRule(
            quorum, self._stored, self.oracle.payload_of, self.oracle.violate, sim.counts
        )
        if self.ops is not None:
            self.oracle.rules = self.ops.rules
            self.oracle.dropped = self.ops.gone

    # -- the Workload protocol -----------------------------------------------------------------

    def start(self) -> list[asyncio.Future[Any]]:
        sim, rng = self.sim, self.sim.rng
        sc = sim.scenario
        work: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(self.stream(i)) for i in range(rng.randint(*sc.ledgers))
        ]
        work += [asyncio.ensure_future(self.taker(j)) for j in range(rng.randint(*sc.takeovers))]
        work += [asyncio.ensure_future(self.trimmer(j)) for j in range(rng.randint(*sc.trims))]
        work += [asyncio.ensure_future(self.follower(j)) for j in range(rng.randint(*sc.followers))]
        if self.ops is not None:
            work += self.ops.tasks()
        return work

    def stop(self) -> None:
        for h in self._handles:
            if h.writer is not None:
                h.writer.stop()

    def _stored(self, lid: int) -> LedgerMetadata | None:
        """The metadata as the store holds it now (None: deleted)."""
        try:
            return self.sim.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return None

    def writers_done(self) -> bool:
        """Whether every stream's writers (first terms and takeovers) are done."""
        return self._quiet.is_set()

    def responsible(self, lid: int, eid: int, bookie: str) -> bool:
        try:
            md = self.sim.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return False  # deleted: nobody keeps its entries
        if eid < layout.first_entry(md):
            return False  # trimmed: gone by design
        return bookie in write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)

    # -- writers -------------------------------------------------------------------------------

    async def stream(self, i: int) -> None:
        """Create a stream and write its first term."""
        sim, rng = self.sim, self.sim.rng
        name = f"c{i}"
        client = sim.client(name)
        self._writing += 1
        try:
            await asyncio.sleep(rng.uniform(0, 0.05))
            settings: dict[str, Any] = {"fragment_max_entries": rng.choice((None, 6, 15))}
            if self.ops is not None:
                settings.update(self.ops.creation())
            fragment_max = settings["fragment_max_entries"]
            handle = await create_with_retries(
                sim,
                name,
                lambda: client.create_unbounded_aio(
                    sim.ensemble,
                    sim.write_quorum,
                    sim.ack_quorum,
                    password=PASSWORD,
                    digest=DIGEST,
                    **settings,
                ),
            )
            if handle is None:
                return
            if self.ops is not None:
                self.ops.created(handle, settings)
            self.ledgers.append(handle.ledger_id)
            sim.trace("created", name, handle.ledger_id, handle.metadata.fragments, fragment_max)
            displaced = await self.write_term(client, name, handle)
            if displaced and rng.random() < 0.5:
                # The displaced writer takes its stream back (a fight, as with leader
                # election gone wrong): a new term of its own.
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                await self.take_over_and_write(client, name, handle.ledger_id)
        finally:
            self._writing -= 1
            if not self._writing:
                self._quiet.set()

    async def taker(self, j: int) -> None:
        sim, rng = self.sim, self.sim.rng
        name = f"t{j}"
        client = sim.client(name)
        self._writing += 1
        try:
            await asyncio.sleep(rng.uniform(0.02, 0.3) if rng.random() < 0.7 else rng.uniform(0, 2))
            aimed = await aimed_ledger(sim, name)
            if self.ledgers:
                lid = aimed if aimed in self.ledgers else rng.choice(self.ledgers)
                if sim.decide("takeover", name, lid):
                    await self.take_over_and_write(client, name, lid)
        finally:
            self._writing -= 1
            if not self._writing:
                self._quiet.set()

    async def take_over_and_write(self, client: Client, name: str, lid: int) -> None:
        rng = self.sim.rng
        for _attempt in range(3):
            handle = await self.take_over(client, name, lid)
            if handle is not None:
                await self.write_term(client, name, handle)
                return
            await asyncio.sleep(rng.uniform(0.1, 1.0))

    def hold(self, lid: int) -> asyncio.Event:
        """Keep other takeovers of ``lid`` waiting until the event returned is set (a
        compound aim's takeover runs alone: simcombos.py)."""
        done = self._held[lid] = asyncio.Event()
        return done

    async def take_over(
        self, client: Client, name: str, lid: int, *, holder: bool = False
    ) -> UnboundedLedger | None:
        sim = self.sim
        held = self._held.get(lid)
        if held is not None and not holder and not held.is_set():
            sim.trace("take-over-waits", name, lid)
            await held.wait()
        sim.counts["takeover"] += 1
        sim.trace("take-over", name, lid)
        try:
            handle = await client.open_unbounded_aio(lid, password=PASSWORD, takeover=True)
        except BKError as exc:
            sim.counts[f"takeover.failed.{type(exc).__name__}"] += 1
            sim.trace("take-over-failed", name, lid, type(exc).__name__, exc)
            return None
        self._handles.append(handle)
        last = handle.last_add_confirmed
        end = last if self._noop else last + 1
        sim.counts["takeover.ok"] += 1
        sim.trace(
            "took-over", name, lid, "term", handle.term, "last", last, handle.metadata.fragments
        )
        self.oracle.took_over(lid, handle.term, end, name)
        if self.ops is not None:
            self.ops.rules.took_over(lid, last if self._noop else None)
        return handle

    async def write_term(self, client: Client, name: str, handle: UnboundedLedger) -> bool:
        """Append in bursts through this term's writer; True when another term displaced it."""
        sim, rng = self.sim, self.sim.rng
        writer = handle.writer
        assert writer is not None
        if handle not in self._handles:
            self._handles.append(handle)
        lid, term = handle.ledger_id, handle.term
        who = f"{name}@t{term}"
        futures: list[asyncio.Future[int]] = []
        n_adds = rng.randint(*sim.scenario.entries)
        leftover_at = dirty_leftover_at(sim, n_adds)
        combos: list[asyncio.Future[None]] = []
        for seq in range(n_adds):
            if writer.error is not None:
                break
            if (
                leftover_at is not None
                and seq >= leftover_at
                and not combos
                and dirty_leftover_ready(sim, writer)
            ):
                combos.append(asyncio.ensure_future(dirty_leftover(self, name, lid, writer)))
            payload = b"%d:%s:%d:%08x" % (lid, who.encode(), seq, rng.getrandbits(32))
            self._appended(who, payload)
            fut = writer.add(payload)
            fut.add_done_callback(functools.partial(self._add_done, who, lid, term, payload))
            futures.append(fut)
            sim.counts["add"] += 1
            if rng.random() < 0.3:
                await asyncio.sleep(rng.expovariate(50.0))
            if self.ops is not None:
                await self.ops.pace()
            await maybe_pause(sim, who, lid)
        if futures:
            await asyncio.wait(futures)
        if combos:
            await asyncio.wait(combos)
        for combo in combos:
            sim.oracle_outcome(combo)
        sim.counts["rollover"] += writer.rollovers
        return isinstance(writer.error, InvalidTermError)

    def append(self, handle: UnboundedLedger, name: str, payload: bytes) -> asyncio.Future[int]:
        """One append of ``name`` in ``handle``'s term, known to the oracle as
        ``write_term``'s are."""
        assert handle.writer is not None
        lid, term = handle.ledger_id, handle.term
        who = f"{name}@t{term}"
        payload = b"%d:%s:0:%s" % (lid, who.encode(), payload)
        self._appended(who, payload)
        fut = handle.writer.add(payload)
        fut.add_done_callback(functools.partial(self._add_done, who, lid, term, payload))
        self.sim.counts["add"] += 1
        return fut

    def _appended(self, who: str, payload: bytes) -> None:
        self.oracle.append(who, payload)
        if self.ops is not None:
            self.ops.rules.appended(payload)

    def _add_done(
        self, who: str, lid: int, term: int, payload: bytes, f: asyncio.Future[int]
    ) -> None:
        if f.cancelled():
            return
        sim = self.sim
        exc = f.exception()
        if exc is not None:
            sim.counts[f"add.failed.{type(exc).__name__}"] += 1
            sim.trace("add-failed", who, lid, type(exc).__name__)
            return
        eid = f.result()
        sim.trace("acked", who, lid, eid)
        sim.counts["add.acked"] += 1
        self.oracle.stream_acknowledged(lid, eid, payload, term, who)
        try:
            md = sim.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            md = None  # deleted: DeletedLedgerAcknowledgesNothing judges this one
        if md is not None and self.oracle.quorum is not None:
            self.oracle.quorum.acknowledged(lid, eid, payload, md, who)
        if self.ops is not None:
            self.ops.acknowledged(lid, eid, payload, who)

    # -- trims ---------------------------------------------------------------------------------

    async def trimmer(self, j: int) -> None:
        sim, rng = self.sim, self.sim.rng
        name = f"trim{j}"
        client = sim.client(name)
        await asyncio.sleep(rng.uniform(0.1, 1.5))
        if not self.ledgers:
            return
        lid = rng.choice(self.ledgers)
        acked = self.oracle.stream_acked.get(lid, {})
        before = rng.randint(0, max(acked, default=0) + 1)
        if not sim.decide("trim", name, lid, before):
            return
        if self.ops is not None:
            self.ops.rules.trimmed_by_hand(lid)
        sim.counts["trim"] += 1
        sim.trace("trim", name, lid, before)
        try:
            handle = await client.open_unbounded_aio(lid, password=PASSWORD, takeover=False)
            await handle.trim_aio(before)
        except BKError as exc:
            sim.counts[f"trim.failed.{type(exc).__name__}"] += 1
            sim.trace("trim-failed", name, lid, type(exc).__name__)
            # A metadata error may come after the trim applied: the store says what it did.
            first = layout.first_entry(sim.truth.read_ledger(lid))
            if first > 0:
                self.oracle.trimmed(lid, first)
            return
        first = layout.first_entry(sim.truth.read_ledger(lid))
        sim.trace("trimmed", name, lid, "first", first)
        if first > 0:
            sim.counts["trim.dropped_fragments"] += 1
        self.oracle.trimmed(lid, first)

    # -- followers -----------------------------------------------------------------------------

    async def follower(self, j: int) -> None:
        """Tail one stream from 0 as ``UnboundedLedger.tail`` does, until the writers are
        done and it has caught up with what it last saw confirmed."""
        sim, rng = self.sim, self.sim.rng
        name = f"f{j}"
        client = sim.client(name)
        await asyncio.sleep(rng.uniform(0.01, 0.2))
        if not self.ledgers:
            return
        lid = rng.choice(self.ledgers)
        try:
            handle = await client.open_unbounded_aio(lid, password=PASSWORD, takeover=False)
        except BKError as exc:
            sim.trace("follow-failed", name, lid, type(exc).__name__)
            return
        me = Follower(name, lid)
        self._followers.append(me)
        md, lac = handle.metadata, handle.last_add_confirmed
        digester = Digester(md.digest_type, PASSWORD)
        next_id, quiet_polls = 0, 0
        while quiet_polls < 3:
            low = layout.first_entry(md)
            if next_id < low:
                me.skipped.append((next_id, low))
                sim.trace("follower-skips", name, lid, next_id, low)
                next_id = low
            if next_id <= lac:
                last = min(lac, next_id + READ_BATCH - 1)
                got = await self.read(client, md, digester, next_id, last, name)
                if got is None:
                    fresh = await self._metadata(client, lid, md)
                    if fresh is None:
                        break
                    md = fresh
                    await asyncio.sleep(0.2)
                    continue
                entries = [(e.entry_id, e.data) for e in got]
                me.read.extend(entries)
                sim.counts["follower.read"] += len(entries)
                self.oracle.stream_read(lid, entries, name)
                next_id = last + 1
                continue
            if self._quiet.is_set():
                quiet_polls += 1
            try:
                seen, md = await follow.wait_for_lac(client.ctx, md, next_id - 1, follow.POLL_SLICE)
            except NoSuchLedgerError:
                sim.trace("follower-ends", name, lid, "deleted")
                break
            except BKError as exc:  # the metadata read failed: poll again
                sim.trace("follow-poll-failed", name, lid, type(exc).__name__)
                continue
            lac = max(lac, seen)

    async def read(
        self,
        client: Client,
        md: LedgerMetadata,
        digester: Digester,
        first: int,
        last: int,
        name: str,
    ) -> list[Any] | None:
        try:
            return await follow.read_visible(client.ctx, md, digester, first, last)
        except NoSuchEntryError as exc:
            # Trimmed since this metadata was read: the next metadata says how far.
            self.sim.trace("read-trimmed", name, md.ledger_id, first, last, exc)
            return None
        except BKError as exc:
            self.sim.counts[f"read.failed.{type(exc).__name__}"] += 1
            self.sim.trace("read-failed", name, md.ledger_id, first, last, type(exc).__name__)
            return None

    async def _metadata(
        self, client: Client, lid: int, md: LedgerMetadata
    ) -> LedgerMetadata | None:
        """The metadata as stored now (``md`` when the read failed; None: deleted)."""
        try:
            return await client.ctx.meta(client.ctx.metadata.read_ledger, lid)
        except NoSuchLedgerError:
            return None
        except BKError:
            return md

    # -- the end -------------------------------------------------------------------------------

    async def check_end(self) -> None:
        """Take every stream over once more and read it whole; compare with everything the
        history acknowledged and every follower saw."""
        sim = self.sim
        checker = sim.client("checker")
        if self.ops is not None:
            # Retention trims as time passes: no writer may trim under the final reader.
            self.stop()
            await self.ops.finish_deletes(checker)
        for lid in list(self.ledgers):
            if self.ops is not None and self.ops.gone(lid):
                continue
            md = sim.truth.read_ledger(lid)
            lost = sim.budget.lossy_fragments(md)
            handle = None
            for attempt in range(1 if lost else 6):
                handle = await self.take_over(checker, "checker", lid)
                if handle is not None:
                    break
                await asyncio.sleep(1.0 + attempt)
            if handle is None:
                if lost:
                    sim.budget.unrecoverable(lid)
                    sim.counts["liveness_exempt"] += 1
                    sim.trace("unrecoverable", lid, "lossy crashes in", lost)
                    continue
                self.oracle.violate(
                    "LedgerIsClosed", f"stream {lid} could not be taken over after healing"
                )
                continue
            if self.ops is not None and handle.writer is not None:
                handle.writer.stop()
            entries = await read_whole(self, checker, handle)
            if sim.races is not None:
                await probe(self, checker, lid)
            if entries is None:
                continue
            first = layout.first_entry(handle.metadata)
            sim.counts["term_change"] += handle.term - 1
            self.oracle.final_stream(lid, entries, first, "checker")
            for f in self._followers:
                if f.lid == lid:
                    self.oracle.followers_agree(f, entries)
