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
from typing import Any

from embedlog.client import Client
from embedlog.errors import (
    BKError,
    InvalidTermError,
    NoSuchLedgerInMetadataError,
)
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set_bookies
from embedlog.testing.oracle_fence import FenceRule
from embedlog.testing.oracle_fence_term import FenceAndTermRule
from embedlog.testing.oracle_quorum import AckQuorumRule, LafrRule
from embedlog.testing.oracle_unbounded import StreamOracle
from embedlog.testing.simcombos import (
    dirty_leftover,
    dirty_leftover_at,
    dirty_leftover_ready,
    displaced_wipe,
    displaced_wipe_rate,
    displaced_wipe_ready,
)
from embedlog.testing.simcontext import ClusterControl, SimContext
from embedlog.testing.simraces import AIM_RECOVERY_WAIT
from embedlog.testing.workload import (
    DIGEST,
    PASSWORD,
    Aims,
    StreamsShared,
    aimed_ledger,
    create_with_retries,
    judge_outcome,
    maybe_pause,
)
from embedlog.testing.workload_dedup import Producers
from embedlog.testing.workload_followers import Followers
from embedlog.testing.workload_streams import StreamOps
from embedlog.testing.workload_unbounded_end import (
    probe_acked,
    read_whole,
)
from embedlog.unbounded import layout
from embedlog.unbounded.ledger import UnboundedLedger
from embedlog.unbounded.writer import TermWriter
from embedlog.wire import record
from embedlog.wire.entry import FLAG_RECORD, Digester


class UnboundedWorkload:
    def __init__(self, ctx: SimContext, cluster: ClusterControl, aims: Aims) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.aims = aims
        self.oracle = StreamOracle(
            Digester(DIGEST).digest_len, ctx.trace, self.responsible, ctx.counts
        )
        self.ledgers: list[int] = []
        self._handles: list[UnboundedLedger] = []
        self._writing = 0  # streams still being written (followers stop when none are)
        self._quiet = asyncio.Event()
        self._held: dict[int, asyncio.Event] = {}  # streams a compound aim holds (hold)
        self._wipe_rate = displaced_wipe_rate(ctx)  # simcombos.py: the displaced wipe
        # Whether takeovers write the truncate no-op (off only under an unsafe switch):
        # with it, the new term owns the no-op's id and everything above.
        self._noop = not ctx.client_options.get("unsafe_takeover_without_noop", False)
        # The stream layer (retention, cursors, deletes: workload_streams.py), when asked.
        sc = ctx.scenario
        shared = StreamsShared(ctx, cluster, self.oracle, self.ledgers, self.writers_done)
        self.ops = StreamOps(shared) if sc.retention or max(sc.committers + sc.deletes) else None
        quorum = AckQuorumRule(self.oracle.payload_of, self.oracle.violate, ctx.counts)
        self.oracle.quorum = quorum
        self.oracle.fence_term = FenceAndTermRule(self.oracle.violate, ctx.counts)
        self.oracle.lafr = LafrRule(
            quorum, self._stored, self.oracle.payload_of, self.oracle.violate, ctx.counts
        )
        if self.ops is not None:
            self.oracle.rules = self.ops.rules
            self.oracle.dropped = self.ops.gone
        self.oracle.fence = FenceRule(ctx.truth.read_ledger, self.oracle.violate, ctx.counts)
        self.followers = Followers(shared)
        # Producers by msg_id (workload_dedup.py), when asked; then every append is a
        # record, as through the stream API: a writer finds its dedup window by their times.
        self.producers = (
            Producers(shared, self._handles, self.take_over) if max(sc.producers) else None
        )
        self.records = self.producers is not None

    # -- the Workload protocol -----------------------------------------------------------------

    def start(self) -> list[asyncio.Future[Any]]:
        ctx, rng = self.ctx, self.ctx.rng
        sc = ctx.scenario
        work: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(self.stream(i)) for i in range(rng.randint(*sc.ledgers))
        ]
        work += [asyncio.ensure_future(self.taker(j)) for j in range(rng.randint(*sc.takeovers))]
        work += [asyncio.ensure_future(self.trimmer(j)) for j in range(rng.randint(*sc.trims))]
        work += [
            asyncio.ensure_future(self.followers.follow(j))
            for j in range(rng.randint(*sc.followers))
        ]
        if self.ops is not None:
            work += self.ops.tasks()
        if self.producers is not None:
            work += self.producers.tasks()
        return work

    def stop(self) -> None:
        for h in self._handles:
            if h.writer is not None:
                h.writer.stop()

    def _stored(self, lid: int) -> LedgerMetadata | None:
        """The metadata as the store holds it now (None: deleted)."""
        try:
            return self.ctx.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return None

    def retrying(self, task: asyncio.Future[Any], now: float) -> bool:
        return self.followers.retrying(task, now)

    def writers_done(self) -> bool:
        """Whether every stream's writers (first terms and takeovers) are done."""
        return self._quiet.is_set()

    def responsible(self, lid: int, eid: int, bookie: str) -> bool:
        try:
            md = self.ctx.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return False  # deleted: nobody keeps its entries
        if eid < layout.first_entry(md):
            return False  # trimmed: gone by design
        return bookie in write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)

    # -- writers -------------------------------------------------------------------------------

    async def stream(self, i: int) -> None:
        """Create a stream and write its first term."""
        ctx, rng = self.ctx, self.ctx.rng
        name = f"c{i}"
        client = self.cluster.client(name)
        self._writing += 1
        try:
            await asyncio.sleep(rng.uniform(0, 0.05))
            settings: dict[str, Any] = {"fragment_max_entries": rng.choice((None, 6, 15))}
            if self.ops is not None:
                settings.update(self.ops.creation())
            fragment_max = settings["fragment_max_entries"]
            handle = await create_with_retries(
                ctx,
                name,
                lambda: client.create_unbounded_aio(
                    ctx.ensemble,
                    ctx.write_quorum,
                    ctx.ack_quorum,
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
            ctx.trace("created", name, handle.ledger_id, handle.metadata.fragments, fragment_max)
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
        ctx, rng = self.ctx, self.ctx.rng
        name = f"t{j}"
        client = self.cluster.client(name)
        self._writing += 1
        try:
            await asyncio.sleep(rng.uniform(0.02, 0.3) if rng.random() < 0.7 else rng.uniform(0, 2))
            aimed = await self.cluster.next_stream_write(AIM_RECOVERY_WAIT)
            if aimed is None:
                aimed = await aimed_ledger(ctx, self.aims, name)
            if self.ledgers:
                lid = aimed if aimed in self.ledgers else rng.choice(self.ledgers)
                if ctx.decide("takeover", name, lid):
                    await self.take_over_and_write(client, name, lid)
        finally:
            self._writing -= 1
            if not self._writing:
                self._quiet.set()

    async def take_over_and_write(self, client: Client, name: str, lid: int) -> None:
        rng = self.ctx.rng
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
        ctx = self.ctx
        held = self._held.get(lid)
        if held is not None and not holder and not held.is_set():
            ctx.trace("take-over-waits", name, lid)
            await held.wait()
        ctx.counts["takeover"] += 1
        ctx.trace("take-over", name, lid)
        try:
            handle = await client.open_unbounded_aio(lid, password=PASSWORD, takeover=True)
        except BKError as exc:
            ctx.counts[f"takeover.failed.{type(exc).__name__}"] += 1
            ctx.trace("take-over-failed", name, lid, type(exc).__name__, exc)
            return None
        self._handles.append(handle)
        last = handle.last_add_confirmed
        end = last if self._noop else last + 1
        ctx.counts["takeover.ok"] += 1
        ctx.trace(
            "took-over", name, lid, "term", handle.term, "last", last, handle.metadata.fragments
        )
        self.oracle.took_over(lid, handle.term, end, name)
        if self.ops is not None:
            self.ops.rules.took_over(lid, last if self._noop else None)
        return handle

    async def write_term(self, client: Client, name: str, handle: UnboundedLedger) -> bool:
        """Append in bursts through this term's writer; True when another term displaced it."""
        ctx, rng = self.ctx, self.ctx.rng
        writer = handle.writer
        assert writer is not None
        if handle not in self._handles:
            self._handles.append(handle)
        lid, term = handle.ledger_id, handle.term
        who = f"{name}@t{term}"
        futures: list[asyncio.Future[int]] = []
        n_adds = rng.randint(*ctx.scenario.entries)
        leftover_at = dirty_leftover_at(ctx, n_adds)
        combos: list[asyncio.Future[None]] = []
        if displaced_wipe_ready(ctx, self.cluster, writer, self._wipe_rate):
            await displaced_wipe(ctx, self.cluster, self, name, lid, writer)
        for seq in range(n_adds):
            if writer.error is not None:
                break
            if (
                leftover_at is not None
                and seq >= leftover_at
                and not combos
                and dirty_leftover_ready(ctx, self.cluster, writer)
            ):
                combos.append(
                    asyncio.ensure_future(
                        dirty_leftover(ctx, self.cluster, self, name, lid, writer)
                    )
                )
            payload = b"%d:%s:%d:%08x" % (lid, who.encode(), seq, rng.getrandbits(32))
            self._appended(who, payload)
            fut = self._add(writer, payload)
            fut.add_done_callback(functools.partial(self._add_done, who, lid, term, payload))
            futures.append(fut)
            ctx.counts["add"] += 1
            if rng.random() < 0.3:
                await asyncio.sleep(rng.expovariate(50.0))
            if self.ops is not None:
                await self.ops.pace()
            await maybe_pause(ctx, self.aims, who, lid)
        if futures:
            await asyncio.wait(futures)
        if combos:
            await asyncio.wait(combos)
        for combo in combos:
            judge_outcome(self.oracle, combo)
        ctx.counts["rollover"] += writer.rollovers
        return isinstance(writer.error, InvalidTermError)

    def append(self, handle: UnboundedLedger, name: str, payload: bytes) -> asyncio.Future[int]:
        """One append of ``name`` in ``handle``'s term, known to the oracle as
        ``write_term``'s are."""
        assert handle.writer is not None
        lid, term = handle.ledger_id, handle.term
        who = f"{name}@t{term}"
        payload = b"%d:%s:0:%s" % (lid, who.encode(), payload)
        self._appended(who, payload)
        fut = self._add(handle.writer, payload)
        fut.add_done_callback(functools.partial(self._add_done, who, lid, term, payload))
        self.ctx.counts["add"] += 1
        return fut

    def _add(self, writer: TermWriter, payload: bytes) -> asyncio.Future[int]:
        if self.records:
            return writer.add(
                record.encode(self.ctx.clock.time()) + payload, entry_flags=FLAG_RECORD
            )
        return writer.add(payload)

    def _appended(self, who: str, payload: bytes) -> None:
        self.oracle.append(who, payload)
        if self.ops is not None:
            self.ops.rules.appended(payload)

    def _add_done(
        self, who: str, lid: int, term: int, payload: bytes, f: asyncio.Future[int]
    ) -> None:
        if f.cancelled():
            return
        ctx = self.ctx
        exc = f.exception()
        if exc is not None:
            ctx.counts[f"add.failed.{type(exc).__name__}"] += 1
            ctx.trace("add-failed", who, lid, type(exc).__name__)
            return
        eid = f.result()
        ctx.trace("acked", who, lid, eid)
        ctx.counts["add.acked"] += 1
        self.oracle.stream_acknowledged(lid, eid, payload, term, who)
        try:
            md = ctx.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            md = None  # deleted: DeletedLedgerAcknowledgesNothing judges this one
        if md is not None and self.oracle.quorum is not None:
            self.oracle.quorum.acknowledged(lid, eid, payload, md, who)
        if self.ops is not None:
            self.ops.acknowledged(lid, eid, payload, who)

    # -- trims ---------------------------------------------------------------------------------

    async def trimmer(self, j: int) -> None:
        ctx, rng = self.ctx, self.ctx.rng
        name = f"trim{j}"
        client = self.cluster.client(name)
        await asyncio.sleep(rng.uniform(0.1, 1.5))
        if not self.ledgers:
            return
        lid = rng.choice(self.ledgers)
        acked = self.oracle.stream_acked.get(lid, {})
        before = rng.randint(0, max(acked, default=0) + 1)
        if not ctx.decide("trim", name, lid, before):
            return
        if self.ops is not None:
            self.ops.rules.trimmed_by_hand(lid)
        ctx.counts["trim"] += 1
        ctx.trace("trim", name, lid, before)
        try:
            handle = await client.open_unbounded_aio(lid, password=PASSWORD, takeover=False)
            await handle.trim_aio(before)
        except BKError as exc:
            ctx.counts[f"trim.failed.{type(exc).__name__}"] += 1
            ctx.trace("trim-failed", name, lid, type(exc).__name__)
            # A metadata error may come after the trim applied: the store says what it did.
            first = layout.first_entry(ctx.truth.read_ledger(lid))
            if first > 0:
                self.oracle.trimmed(lid, first)
            return
        first = layout.first_entry(ctx.truth.read_ledger(lid))
        ctx.trace("trimmed", name, lid, "first", first)
        if first > 0:
            ctx.counts["trim.dropped_fragments"] += 1
        self.oracle.trimmed(lid, first)

    # -- the end -------------------------------------------------------------------------------

    async def check_end(self) -> None:
        """Take every stream over once more and read it whole; compare with everything the
        history acknowledged and every follower saw."""
        ctx = self.ctx
        checker = self.cluster.client("checker")
        if self.ops is not None:
            # Retention trims as time passes: no writer may trim under the final reader.
            self.stop()
            await self.ops.finish_deletes(checker)
        for lid in list(self.ledgers):
            if self.ops is not None and self.ops.gone(lid):
                continue
            md = ctx.truth.read_ledger(lid)
            lost = ctx.budget.lossy_fragments(md)
            handle = None
            for attempt in range(1 if lost else 6):
                handle = await self.take_over(checker, "checker", lid)
                if handle is not None:
                    break
                await asyncio.sleep(1.0 + attempt)
            if handle is None:
                if lost:
                    ctx.budget.unrecoverable(lid)
                    ctx.counts["liveness_exempt"] += 1
                    ctx.trace("unrecoverable", lid, "lossy crashes in", lost)
                    continue
                self.oracle.violate(
                    "LedgerIsClosed", f"stream {lid} could not be taken over after healing"
                )
                continue
            if self.ops is not None and handle.writer is not None:
                handle.writer.stop()
            entries = await read_whole(ctx, self.oracle, checker, handle)
            if ctx.races is not None:
                await probe_acked(ctx, self.oracle, checker, lid)
            if entries is None:
                continue
            first = layout.first_entry(handle.metadata)
            ctx.counts["term_change"] += handle.term - 1
            self.oracle.final_stream(lid, entries, first, "checker", handle.metadata.ack_quorum)
            for f in self.followers.seen:
                if f.lid == lid:
                    self.oracle.followers_agree(f, entries)
