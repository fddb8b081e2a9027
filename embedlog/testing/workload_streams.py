"""The stream layer's workload: retention, consumers committing cursors, deletes.

On top of the streams' workload (``workload_unbounded``), in the scenarios that ask for
it (``Scenario.retention``, ``committers``, ``deletes``):

* each stream is created with a ``Retention`` (entries, bytes and age limits drawn per
  stream, small fragments so that rollovers and trims come often), a fifth of them with
  ``retention_overrides_cursors=True``;
* consumers (``takeover=False`` handles) commit cursors at ids at or below the LAC they
  learnt, often a new cursor at the first kept entry (a consumer starting from the
  oldest entry), sometimes moving one back with ``force=True`` or deleting it;
* a deleter deletes a stream (``Client.delete_ledger_aio``) while its writers append and
  its consumers commit, and they go on doing so.

Every commit, cursor delete and delete is told to the oracle (``oracle_streams``) with
when it was invoked and how it returned; the oracle sees every compare-and-swap of a
stream's metadata as the store applies it (``FaultyMetadataStore.on_write``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from embedlog.client import Client
from embedlog.errors import BKError, NoSuchLedgerInMetadataError
from embedlog.metadata import streams
from embedlog.metadata.client import LEDGERS
from embedlog.testing.oracle_streams import StreamRules
from embedlog.testing.simloop import seeded
from embedlog.testing.workload import StreamsShared, open_to_follow
from embedlog.unbounded import layout
from embedlog.unbounded.ledger import UnboundedLedger
from embedlog.unbounded.retention import Retention

SHARED_CURSORS = ("a", "b")  # names several consumers commit to at once
MAX_COMMITS = 300  # rounds of one consumer
# Seconds a consumer goes on committing once the writers are done: the longest age
# retention is drawn with (2 s) and its ticks, and a few more. Beyond it the stream is
# still, and each second costs the simulation as much as one of writing.
QUIET_TAIL = 5.0


class StreamOps:
    def __init__(self, shared: StreamsShared) -> None:
        ctx, cluster, oracle = shared.ctx, shared.cluster, shared.oracle
        self.ctx, self.cluster, self.oracle = ctx, cluster, oracle
        self.ledgers = shared.ledgers
        self.writers_done = shared.writers_done
        # A stream of its own: the other scenarios' histories do not draw these.
        self.rng = seeded(ctx.seed, "streams")
        self.rules = StreamRules(
            ctx.clock.monotonic, oracle.violate, oracle.stream_acked, ctx.counts
        )
        self._deleting: set[int] = set()  # a delete_ledger was invoked
        self._acks: dict[int, asyncio.Event] = {}  # set at each acknowledgement of a stream
        self._changes: dict[int, asyncio.Event] = {}  # set at each change of its metadata
        self._first: dict[int, int] = {}  # each stream's first kept entry, as last seen
        self._reads: dict[int, asyncio.Event] = {}  # set when retention reads its cursors
        cluster.watch_metadata(self._written, self._read)

    # -- creation ------------------------------------------------------------------------------

    def creation(self) -> dict[str, Any]:
        """The retention settings of a new stream (``create_unbounded_aio`` keywords)."""
        rng = self.rng
        if not self.ctx.scenario.retention:
            return {}
        # Payloads are 20-30 bytes; a fragment rolls over at a quarter of each limit unless
        # fragment_max_entries says otherwise. Each rollover waits until its fragment is on
        # every bookie of its write sets, which a lost add delays by a request timeout: too
        # small a fragment and the writer crawls.
        entries = rng.choice((None, 5, 10, 20))
        size = rng.choice((None, None, 400, 1000))
        age = rng.choice((None, None, 0.5, 2.0))
        if entries is None and size is None and age is None:
            entries = 10
        return {
            "retention": Retention(entries, size, age),
            "retention_overrides_cursors": rng.random() < 0.2,
            "fragment_max_entries": rng.choice((None, 3, 4, 6)),
        }

    def created(self, handle: UnboundedLedger, settings: dict[str, Any]) -> None:
        self.rules.created(
            handle.ledger_id,
            settings.get("retention"),
            settings.get("retention_overrides_cursors", False),
        )

    def _written(self, op: str, path: str) -> None:
        """A write the store applied: a stream's metadata may have a new first fragment."""
        if op != "set" or not path.startswith(LEDGERS + "/"):
            return
        lid = int(path.rsplit("/", 1)[1])
        try:
            md = self.ctx.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return
        first = layout.first_entry(md)
        if first != self._first.get(lid, 0):
            self._first[lid] = first
            self.ctx.trace("first-kept", lid, first)
        self.rules.first_kept(lid, first)
        changed = self._changes.pop(lid, None)
        if changed is not None:
            changed.set()

    def _read(self, op: str, path: str) -> None:
        """A read the store served: a trim decision reading a stream's cursors wakes the
        consumers aimed at it."""
        if op == "children" and path.startswith(streams.CURSORS + "/"):
            read = self._reads.pop(int(path.rsplit("/", 1)[1]), None)
            if read is not None:
                read.set()

    # -- what the rest of the workload asks ----------------------------------------------------

    def acknowledged(self, lid: int, eid: int, payload: bytes, who: str) -> None:
        self.rules.acknowledged(lid, eid, payload, who)
        ack = self._acks.get(lid)
        if ack is not None:
            ack.set()

    async def pace(self) -> None:
        """Between two appends: a term writes for a second or two, so that consumers
        commit, retention trims and deletes strike while it writes."""
        await asyncio.sleep(self.rng.expovariate(1 / 0.04))

    def gone(self, lid: int) -> bool:
        """Whether ``lid`` was deleted: a delete was invoked and the store holds no ledger
        (its end-of-history checks do not apply)."""
        if lid not in self._deleting:
            return False
        try:
            self.ctx.truth.read_ledger(lid)
        except NoSuchLedgerInMetadataError:
            return True
        return False

    def tasks(self) -> list[asyncio.Future[Any]]:
        rng, sc = self.rng, self.ctx.scenario
        work: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(self.committer(j)) for j in range(rng.randint(*sc.committers))
        ]
        work += [asyncio.ensure_future(self.deleter(j)) for j in range(rng.randint(*sc.deletes))]
        return work

    # -- consumers -----------------------------------------------------------------------------

    async def committer(self, j: int) -> None:
        ctx, rng = self.ctx, self.rng
        name = f"k{j}"
        client = self.cluster.client(name)
        opened = await open_to_follow(
            ctx, rng, client, name, self.ledgers, (0.05, 0.6), "consumer-open-failed"
        )
        if opened is None:
            return
        lid, handle = opened
        fresh = 0
        # While the writers write, then a few rounds more, for at most QUIET_TAIL seconds
        # (retention trims as time passes; its ages are 2 s at most); at most MAX_COMMITS
        # rounds.
        after = rng.randint(5, 30)
        quiet_since: float | None = None
        for _ in range(MAX_COMMITS):
            if self.writers_done():
                now = ctx.clock.monotonic()
                if quiet_since is None:
                    quiet_since = now
                after -= 1
                if after < 0 or now - quiet_since > QUIET_TAIL:
                    break
            await asyncio.sleep(rng.expovariate(1 / 0.15))
            try:  # learn the LAC, as a tail does
                await handle.wait_past(handle.last_add_confirmed, 0.0)
            except BKError as exc:
                ctx.trace("consumer-poll-failed", name, lid, type(exc).__name__)
            lac, low = handle.last_add_confirmed, max(-1, layout.first_entry(handle.metadata) - 1)
            pick = rng.random()
            if pick < 0.3:  # a new consumer, starting from the oldest entry kept
                fresh += 1
                cursor, at = f"{name}-{fresh}", min(lac, low + rng.randint(0, 2))
                aim = rng.random()
                if aim < 0.7:
                    # Aimed: right after a trim decision read the cursors (into the window
                    # between that read and the trim), or after the stream's metadata
                    # changed (a rollover, after which the writer applies retention).
                    events = self._reads if aim < 0.5 else self._changes
                    event = events.setdefault(lid, asyncio.Event())
                    try:
                        await asyncio.wait_for(event.wait(), 3.0)
                    except TimeoutError:
                        if events.get(lid) is event:
                            del events[lid]
                    else:
                        # A trim decision's next step follows its read within a round trip.
                        await asyncio.sleep(0.0 if aim < 0.5 else rng.uniform(0.0, 0.01))
            else:
                cursor = rng.choice(SHARED_CURSORS)
                at = lac if pick < 0.6 else rng.randint(min(low, lac), lac)
            if pick > 0.93:
                await self._delete_cursor(client, name, lid, cursor)
            else:
                await self._commit(handle, name, cursor, at, force=rng.random() < 0.1)

    async def _commit(
        self, handle: UnboundedLedger, name: str, cursor: str, at: int, *, force: bool
    ) -> None:
        ctx, lid = self.ctx, handle.ledger_id
        op = self.rules.commit_started(lid, cursor, at, force)
        ctx.trace("commit", name, lid, cursor, at, "force" if force else "")
        ctx.counts["cursor.commit"] += 1
        try:
            await handle.commit_aio(cursor, at, force=force)
        except (BKError, ValueError) as exc:  # a rewind, a deleted stream, a metadata error
            ctx.counts[f"cursor.commit_failed.{type(exc).__name__}"] += 1
            ctx.trace("commit-failed", name, lid, cursor, at, type(exc).__name__)
            self.rules.commit_returned(op, ok=False)
            return
        ctx.counts["cursor.committed"] += 1
        ctx.trace("committed", name, lid, cursor, at)
        self.rules.commit_returned(op, ok=True)

    async def _delete_cursor(self, client: Client, name: str, lid: int, cursor: str) -> None:
        ctx = self.ctx
        op = self.rules.commit_started(lid, cursor, None, False)
        ctx.trace("delete-cursor", name, lid, cursor)
        ctx.counts["cursor.delete"] += 1
        ok = True
        try:  # what UnboundedLedger.delete_cursor does, on the loop
            await client.ctx.meta(streams.delete_cursor, client.ctx.metadata.store, lid, cursor)
        except BKError as exc:
            ok = False
            ctx.trace("delete-cursor-failed", name, lid, cursor, type(exc).__name__)
        self.rules.commit_returned(op, ok=ok)

    # -- deletes -------------------------------------------------------------------------------

    async def finish_deletes(self, client: Client) -> None:
        """After healing: a delete that never returned is run again until it does, as its
        operator would (a stream whose delete began cannot be taken over)."""
        ctx = self.ctx
        for lid in sorted(self._deleting):
            if self.rules.deleted(lid):
                continue
            for attempt in range(5):
                try:
                    await client.delete_ledger_aio(lid)
                except NoSuchLedgerInMetadataError:
                    # An earlier attempt dropped the ledger's node: this one removed
                    # what that left of the stream before saying so.
                    ctx.trace("delete-gone", "checker", lid)
                    self.rules.delete_returned(lid)
                    break
                except BKError as exc:
                    ctx.trace("delete-failed", "checker", lid, type(exc).__name__)
                    await asyncio.sleep(1.0 + attempt)
                    continue
                ctx.counts["delete.finished"] += 1
                ctx.trace("deleted", "checker", lid)
                self.rules.delete_returned(lid)
                break
            else:
                self.oracle.violate(
                    "LedgerIsClosed", f"delete_ledger({lid}) could not finish after healing"
                )
        self.rules.check_end(ctx.truth.store)

    async def deleter(self, j: int) -> None:
        ctx, rng = self.ctx, self.rng
        name = f"del{j}"
        await asyncio.sleep(rng.uniform(0.1, 1.0))
        if not self.ledgers:
            return
        lid = rng.choice(self.ledgers)
        # Aimed at a writer at work: the delete starts right after an acknowledgement, so
        # that the writer's next appends come after it returned.
        ack = self._acks[lid] = asyncio.Event()
        try:
            await asyncio.wait_for(ack.wait(), 2.0)
        except TimeoutError:
            pass
        if not ctx.decide("delete", name, lid):
            return
        client = self.cluster.client(name)
        self._deleting.add(lid)
        ctx.counts["delete"] += 1
        for _attempt in range(5):
            ctx.trace("delete", name, lid)
            try:
                await client.delete_ledger_aio(lid)
            except NoSuchLedgerInMetadataError:
                # An earlier attempt dropped the ledger's node, then failed: this one
                # removed what that left of the stream before saying so.
                ctx.counts["delete.gone"] += 1
                ctx.trace("delete-gone", name, lid)
                self.rules.delete_returned(lid)
                return
            except BKError as exc:
                ctx.counts[f"delete.failed.{type(exc).__name__}"] += 1
                ctx.trace("delete-failed", name, lid, type(exc).__name__)
                await asyncio.sleep(rng.uniform(0.1, 0.5))
                continue
            ctx.counts["delete.ok"] += 1
            ctx.trace("deleted", name, lid)
            self.rules.delete_returned(lid)
            return
