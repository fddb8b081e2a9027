"""Followers: readers tailing a stream (``takeover=False``) as ``UnboundedLedger.tail``
does, while the streams' workload (workload_unbounded.py) writes, takes over and trims.

Each follower tails one stream from id 0: reads of what it knows confirmed, long-poll
LAC reads (``follow.wait_and_read``), the metadata read again when a read fails, and a
jump over ids a trim dropped (remembered in ``Follower.skipped``). What it is handed
goes to the oracle as it comes (``StreamOracle.stream_read``); at the end the workload
checks each follower's sequence against the final stream (``followers_agree``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from embedlog.client import Client
from embedlog.errors import BKError, NoSuchLedgerError
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.oracle_unbounded import Follower
from embedlog.testing.workload import PASSWORD, StreamsShared, open_to_follow
from embedlog.testing.workload_unbounded_end import READ_BATCH, read_or_none
from embedlog.unbounded import follow, layout
from embedlog.wire.entry import Digester

# A follower still at work at the workload's limit whose last read or poll returned
# this recently retries reads the faults keep failing (each fails after its request
# timeout, 1 s, and a 0.2 s pause): it waits for the cluster, as a tail does.
RETRYING_WITHIN = 10.0


class Followers:
    """The streams' followers, composed into the streams' workload."""

    def __init__(self, shared: StreamsShared) -> None:
        self.ctx, self.cluster, self.oracle = shared.ctx, shared.cluster, shared.oracle
        self.ledgers = shared.ledgers
        self._writers_done = shared.writers_done
        self.seen: list[Follower] = []  # what each follower read
        # When each follower's task last had a read or a poll return (retrying).
        self._returned: dict[asyncio.Future[Any], float] = {}

    def retrying(self, task: asyncio.Future[Any], now: float) -> bool:
        """Whether ``task``, a follower still at work at the workload's limit, retries
        reads that keep failing (it waits for the cluster, as a tail does)."""
        returned = self._returned.get(task)
        return returned is not None and now - returned < RETRYING_WITHIN

    async def follow(self, j: int) -> None:
        """Tail one stream from 0 as ``UnboundedLedger.tail`` does, until the writers are
        done and it has caught up with what it last saw confirmed."""
        ctx, rng = self.ctx, self.ctx.rng
        name = f"f{j}"
        client = self.cluster.client(name)
        opened = await open_to_follow(
            ctx, rng, client, name, self.ledgers, (0.01, 0.2), "follow-failed"
        )
        if opened is None:
            return
        lid, handle = opened
        me = Follower(name, lid)
        self.seen.append(me)
        task = asyncio.current_task()
        assert task is not None
        md, lac = handle.metadata, handle.last_add_confirmed
        digester = Digester(md.digest_type, PASSWORD)
        next_id, quiet_polls = 0, 0
        while quiet_polls < 3:
            low = layout.first_entry(md)
            if next_id < low:
                me.skipped.append((next_id, low))
                ctx.trace("follower-skips", name, lid, next_id, low)
                next_id = low
            if next_id <= lac:
                last = min(lac, next_id + READ_BATCH - 1)
                got = await read_or_none(ctx, client, md, digester, next_id, last, name)
                self._returned[task] = ctx.clock.monotonic()
                if got is None:
                    fresh = await self._metadata(client, lid, md)
                    if fresh is None:
                        break
                    md = fresh
                    await asyncio.sleep(0.2)
                    continue
                entries = [(e.entry_id, e.data) for e in got]
                me.read.extend(entries)
                ctx.counts["follower.read"] += len(entries)
                self.oracle.stream_read(lid, entries, name, md.ack_quorum)
                next_id = last + 1
                continue
            if self._writers_done():
                quiet_polls += 1
            try:
                # As a tail waits: the new entries come along when the metadata's re-read
                # finds the version they were read by (follow.wait_and_read).
                seen, md, rows = await follow.wait_and_read(
                    client.ctx, md, digester, next_id - 1, follow.POLL_SLICE, READ_BATCH
                )
            except NoSuchLedgerError:
                ctx.trace("follower-ends", name, lid, "deleted")
                break
            except BKError as exc:  # the metadata read failed: poll again
                ctx.trace("follow-poll-failed", name, lid, type(exc).__name__)
                continue
            finally:  # returned, whatever it returned
                self._returned[task] = ctx.clock.monotonic()
            lac = max(lac, seen)
            if rows and layout.first_entry(md) <= next_id:
                entries = [(e.entry_id, e.data) for e in follow.visible(md, rows)]
                me.read.extend(entries)
                ctx.counts["follower.read"] += len(entries)
                ctx.counts["follower.brought"] += len(rows)
                self.oracle.stream_read(lid, entries, name, md.ack_quorum)
                next_id = rows[-1][0] + 1

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
