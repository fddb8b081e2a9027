"""Producers: appends by ``msg_id``, each retried through takeovers until acknowledged.

What docs/unbounded.md promises ("Idempotent appends", "Across takeovers"): an append
whose outcome was unknown (InvalidTermError after another client took the stream over,
the writer failing) retried with the same msg_id through the stream's writer of the
moment returns the id of the entry the first attempt left, if the takeover recovered
it, and appends it once if not. A producer here sends its messages one at a time
(``UnboundedLedger.append_aio`` with a msg_id) through the stream's writer of the moment
(sharing it with the workload's appends), or through a takeover of its own, and each
new writer must first read the window's ids back from the stream. The oracle
(``StreamOracle``) registers every message once, whatever the number of attempts: the
final stream must hold each at most once (``AppendedOncePerMsgId``), and an
acknowledged one at the id acknowledged.

Only the ``unbounded-dedup`` scenario has producers; there every append of the
workload is a record (``UnboundedWorkload.records``), as every append through the
stream API is, since a stream's writer finds where its window starts by the records'
times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from embedlog.client import Client
from embedlog.errors import BKError
from embedlog.testing.workload import StreamsShared
from embedlog.unbounded.ledger import UnboundedLedger

# Attempts of one message before the producer gives it up (its outcome stays unknown:
# the oracle then asks only that it is not stored twice).
ATTEMPTS = 6
# How long a producer waits for a stream to exist before it gives up producing.
STREAM_WAIT = 5.0

TakeOver = Callable[[Client, str, int], Awaitable[UnboundedLedger | None]]


class Producers:
    """The scenario's producers, composed into the streams' workload."""

    def __init__(
        self, shared: StreamsShared, handles: list[UnboundedLedger], take_over: TakeOver
    ) -> None:
        self.ctx, self.cluster, self.oracle = shared.ctx, shared.cluster, shared.oracle
        self._ledgers = shared.ledgers
        self._handles = handles  # every writer handle of the workload, oldest first
        self._take_over = take_over
        # Producers stop with the streams' writers: a history that went on would only
        # see the nemesis wear the cluster down (disks failing, bookies read-only).
        self._done = shared.writers_done

    def _writer_of(self, lid: int) -> UnboundedLedger | None:
        """The newest handle of ``lid`` whose writer has not failed: the stream's writer of
        the moment, as far as this process knows."""
        for handle in reversed(self._handles):
            w = handle.writer
            if handle.ledger_id == lid and w is not None and w.error is None:
                return handle
        return None

    def tasks(self) -> list[asyncio.Future[Any]]:
        ctx = self.ctx
        count = ctx.rng.randint(*ctx.scenario.producers)
        return [asyncio.ensure_future(self.produce(j)) for j in range(count)]

    async def produce(self, j: int) -> None:
        ctx, rng = self.ctx, self.ctx.rng
        name = f"p{j}"
        client = self.cluster.client(name)
        deadline = ctx.clock.monotonic() + STREAM_WAIT
        while not self._ledgers:
            if ctx.clock.monotonic() > deadline:
                return
            await asyncio.sleep(0.05)
        lid = rng.choice(self._ledgers)
        for i in range(rng.randint(3, 10)):
            if self._done():
                return
            await self._message(client, name, lid, i)
            await asyncio.sleep(rng.uniform(0.0, 0.3))

    async def _message(self, client: Client, name: str, lid: int, i: int) -> None:
        """One message, attempt after attempt through the stream's writer of the moment
        (the workload's writers share theirs, as an application's threads share one
        handle), or through a takeover of the producer's own when none is left or, now
        and then, after a failed attempt."""
        ctx, rng = self.ctx, self.ctx.rng
        msg_id = f"{name}-{i}".encode()
        payload = b"%d:%s:%d:%08x" % (lid, name.encode(), i, rng.getrandbits(32))
        who = f"{name}#{i}"  # a writer of one message for the oracle: its order is its own
        self.oracle.append_by_msg_id(who, payload)
        for attempt in range(ATTEMPTS):
            if attempt and self._done():
                # Its outcome stays unknown: the oracle asks only that it is stored once.
                ctx.counts["dedup.unknown_at_end"] += 1
                return
            handle = self._writer_of(lid)
            if handle is None or (attempt and rng.random() < 0.2):
                handle = await self._take_over(client, name, lid)
                if handle is None:
                    await asyncio.sleep(rng.uniform(0.2, 1.0))
                    continue
            try:
                eid = await handle.append_aio(payload, msg_id=msg_id)
            except BKError as exc:  # unknown outcome: it may be stored; retry by its id
                ctx.counts[f"dedup.retried.{type(exc).__name__}"] += 1
                ctx.trace("dedup-retry", who, lid, handle.term, type(exc).__name__)
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                continue
            ctx.trace("dedup-acked", who, lid, handle.term, eid, attempt)
            ctx.counts["dedup.acked"] += 1
            if attempt:
                ctx.counts["dedup.acked_after_retry"] += 1
                if self.oracle.before_term(lid, handle.term, eid):
                    # The id of an entry an earlier term made: an earlier attempt's, which
                    # the takeover recovered and the new writer read back.
                    ctx.counts["dedup.found_recovered"] += 1
            self.oracle.stream_acknowledged(lid, eid, payload, handle.term, who)
            return
        ctx.counts["dedup.given_up"] += 1
