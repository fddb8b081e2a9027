"""A ledger writer's ensemble change: replacing the bookies that failed.

A bookie that fails an add (timeout, unreachable, error) is replaced by a new fragment
from the first entry that may need it (``_fragment_start``), made durable by
compare-and-swap before anything is resent; one that cannot be replaced is retried
after a pause. A mixin of ``LedgerWriter`` (writer.py), which holds the state; the
unbounded ``TermWriter`` overrides its hooks (guaranteed write quorum, readying new
members of a fragment).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from embedlog.errors import (
    BKError,
    InvalidTermError,
    LedgerDeletedError,
    MetadataVersionError,
    NoSuchLedgerInMetadataError,
    NotEnoughBookiesError,
    TlsHandshakeError,
)
from embedlog.ledger.context import ClientContext
from embedlog.ledger.pending import PendingAdd, error_for_state
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.messages import NO_TERM

log = logging.getLogger(__name__)


class EnsembleChange:
    # The writer's state these methods share with it (writer.py sets it up).
    ctx: ClientContext
    md: LedgerMetadata
    term: int
    recovery: bool
    error: BKError | None
    pending: deque[PendingAdd]  # added, not yet acknowledged (in order)
    next_entry_id: int
    _failed: set[str]  # bookies awaiting replacement
    _retrying: set[str]  # bookies with no replacement, retried after a pause
    _unprepared: dict[str, int]
    _tls_refused: dict[str, TlsHandshakeError]
    _changing: asyncio.Task[None] | None
    _replacing: int
    _tasks: set[asyncio.Task[None]]

    if TYPE_CHECKING:

        def fail(self, error: BKError) -> None: ...

        def _send(self, p: PendingAdd, idx: int, bookie: str) -> None: ...

        def _send_queued(self) -> None: ...

        def _write_set(self, entry_id: int) -> list[int]: ...

        def _complete(self) -> None: ...

        def _needed_acks(self) -> int: ...

        def _held_back(self, p: PendingAdd) -> bool: ...

    def _bookie_failed(self, bookie: str) -> None:
        if self.error is not None or bookie in self._retrying:
            return
        if bookie not in self.md.last_fragment[1]:
            return  # already replaced; its entries were resent to the replacement
        self._failed.add(bookie)
        if self._changing is None:
            self._changing = asyncio.get_running_loop().create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failed and self.error is None:
                await self._replace_failed()
        except BKError as exc:
            self.fail(exc)
        except Exception as exc:  # a bug must not leave adds hanging forever
            log.exception("ensemble change of ledger %s failed", self.md.ledger_id)
            self.fail(NotEnoughBookiesError(f"ensemble change failed: {exc}"))
        finally:
            self._changing = None
            self._send_queued()

    async def _replace_failed(self) -> None:
        md = self.md
        ensemble = list(md.last_fragment[1])
        failed = {b for b in self._failed if b in ensemble}
        # The rest already left the ensemble; keeping them would spin _change_ensemble's
        # loop for ever without awaiting.
        self._failed.clear()
        first = max(self._fragment_start(), md.last_fragment[0])
        pinned = {b for b in failed if self._pinned(ensemble.index(b), first)}
        for b in pinned:
            self._retry_later(b)
        failed -= pinned
        if not failed:
            return
        self._replacing += 1
        try:
            await self._replace(md, ensemble, failed, first)
        finally:
            self._replacing -= 1
        # Not reached when the replacement raised: nothing completes on the old ensemble
        # then. The compare-and-swap may have been applied though its answer was lost (a
        # ZooKeeper ConnectionLoss), and then the metadata lists replacements for acks
        # that still count here. The writer fails (its callers learn an unknown outcome),
        # as BookKeeper's does.
        if self.error is None:
            self._resumed()

    async def _replace(
        self, md: LedgerMetadata, ensemble: list[str], failed: set[str], first: int
    ) -> None:
        """Replace ``failed`` bookies of ``ensemble`` by a fragment starting at ``first``."""
        available = await self.ctx.writable_bookies()
        replaced: dict[int, str] = {}
        for idx, b in enumerate(ensemble):
            if b in failed:
                try:
                    nb = self.ctx.placement.replace_bookie(
                        ensemble,
                        idx,
                        md.write_quorum,
                        available,
                        exclude=failed | self._avoid() | self._never_replacements(),
                    )
                except NotEnoughBookiesError:
                    continue
                ensemble[idx] = nb
                replaced[idx] = nb
        if replaced:
            # Readied before the metadata lists them: an entry already acknowledged moves
            # to its replacement with this change, and a replacement still holding an
            # older term's entry at its id would serve readers that payload.
            ready = await self.prepare_bookies(set(replaced.values()), first)
            for idx in [i for i, nb in replaced.items() if nb not in ready]:
                ensemble[idx] = md.last_fragment[1][idx]
                del replaced[idx]
        if replaced:
            new_md = md.with_ensemble(first, tuple(ensemble))
            if not self.recovery:
                try:
                    new_md = await self.ctx.meta(self.ctx.metadata.write_ledger, new_md)
                except MetadataVersionError:
                    try:
                        fresh = await self.ctx.meta(self.ctx.metadata.read_ledger, md.ledger_id)
                    except NoSuchLedgerInMetadataError:
                        raise LedgerDeletedError(
                            f"ensemble change: ledger {md.ledger_id} was deleted; create a "
                            "new one to go on"
                        ) from None
                    if fresh.state is not LedgerState.OPEN:
                        raise error_for_state(fresh, "ensemble change") from None
                    if fresh.term != self.term and self.term != NO_TERM:
                        raise InvalidTermError(
                            f"ledger {md.ledger_id}: term {fresh.term} took over from {self.term}"
                        ) from None
                    self.md = fresh
                    self._failed |= failed  # try again against the fresh metadata
                    return
            log.info(
                "ledger %s: ensemble change at entry %s: %s -> %s",
                md.ledger_id,
                first,
                list(md.last_fragment[1]),
                ensemble,
            )
            self.md = new_md
            self.ctx.metrics.ensemble_changes += 1
            # The replaced bookies' acks of entries from ``first`` on count no more (their
            # slots now belong to the replacements), also those that arrived during the
            # compare-and-swap: nothing completed meanwhile (see _complete).
            moved = [p for p in self._unconfirmed() if p.entry_id >= first and p.sent]
            for p in moved:
                ws = self._write_set(p.entry_id)
                for idx in replaced:
                    if idx in ws and not self.ctx.unsafe_ack_from_replaced_bookie:
                        p.unack(idx)
            for p in moved:
                ws = self._write_set(p.entry_id)
                for idx, bookie in replaced.items():
                    if idx in ws and bookie in ready and not p.has_ack(idx):
                        self._send(p, idx, bookie)
        for b in failed - set(replaced.values()) - {md.last_fragment[1][i] for i in replaced}:
            self._retry_later(b)

    # Hooks of the ensemble change, overridden by the unbounded writer, which follows the
    # guaranteed-write-quorum model: an entry stays tracked until its whole write set has it.

    def _resumed(self) -> None:
        """A replacement ended: count what was held back meanwhile."""
        self._complete()

    def _fragment_start(self) -> int:
        """Where a replacement fragment starts: the first entry not acknowledged (the
        LAC + 1), as in BookKeeper; everything below keeps the fragment it was written in."""
        return self.pending[0].entry_id if self.pending else self.next_entry_id

    def _unconfirmed(self) -> Iterable[PendingAdd]:
        """Entries whose bytes are kept because some bookie may still need them, in order."""
        return self.pending

    def _pinned(self, idx: int, first: int) -> bool:
        """Whether slot ``idx`` must not be replaced from ``first`` on yet: its ack counted
        for an entry already acknowledged to the caller at or above ``first``."""
        return False

    def _avoid(self) -> set[str]:
        """Bookies not to pick as replacements (those this writer is waiting to retry)."""
        return set(self._retrying)

    def _never_replacements(self) -> frozenset[str]:
        """Bookies never to pick as replacements, beyond the ensemble itself: none for
        bounded ledgers (see the unbounded writer)."""
        return frozenset()

    async def prepare_bookies(self, bookies: set[str], first: int) -> set[str]:
        """Ready new members of a fragment starting at ``first``; returns those that are.

        Nothing to do for bounded ledgers (unbounded ones clean stale entries, see
        ``embedlog/unbounded/writer.py``).
        """
        return bookies

    def _retry_later(self, bookie: str) -> None:
        """No replacement for ``bookie``: resend its missing entries after a pause."""
        if bookie in self._retrying:
            return
        self._retrying.add(bookie)

        async def retry() -> None:
            try:
                await asyncio.sleep(min(self.ctx.bookies.request_timeout, 0.5))
            finally:
                self._retrying.discard(bookie)
            if self.error is not None:
                return
            oldest = self.pending[0] if self.pending else None
            refused = self._refused_by_tls(oldest)
            if refused is not None:
                self.fail(refused)
                return
            if (
                oldest is not None
                and (
                    oldest.acked < self._needed_acks()
                    or (self._unprepared and self._held_back(oldest))
                )
                and time.monotonic() - oldest.created > self.ctx.add_entry_quorum_timeout
            ):
                self.fail(
                    NotEnoughBookiesError(
                        f"entry {self.md.ledger_id}:{oldest.entry_id} could not reach its ack "
                        f"quorum in {self.ctx.add_entry_quorum_timeout}s and no replacement "
                        "bookie is available"
                    )
                )
                return
            first, ensemble = self.md.last_fragment
            if bookie not in ensemble:
                return
            if bookie in self._unprepared:
                # The cut it missed, not this fragment's start: below that cut it may
                # already hold entries this term wrote back (the end of a takeover readies
                # bookies above its no-op), which are older terms' by their payload.
                try:
                    ready = await self.prepare_bookies({bookie}, self._unprepared[bookie])
                except BKError as exc:  # another term took over, or the key was refused
                    self.fail(exc)
                    return
                if bookie not in ready:  # (readied: prepare_bookies completed what waited)
                    self._retry_later(bookie)  # still not readied: its entries wait
                    return
            idx = ensemble.index(bookie)
            for p in self._unconfirmed():
                if (
                    p.sent
                    and p.entry_id >= first
                    and idx in self._write_set(p.entry_id)
                    and not p.has_ack(idx)
                ):
                    self._send(p, idx, bookie)

        task = asyncio.get_running_loop().create_task(retry())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refused_by_tls(self, p: PendingAdd | None) -> TlsHandshakeError | None:
        """The error to fail with if TLS refusals alone keep ``p`` from its ack quorum: a
        configuration error, which waiting out add_entry_quorum_timeout would not mend."""
        if p is None or not self._tls_refused or p.acked >= self._needed_acks():
            return None
        ensemble = self.md.ensemble_for(p.entry_id)
        slots = self._write_set(p.entry_id)
        refused = [
            self._tls_refused[ensemble[i]]
            for i in slots
            if not p.has_ack(i) and ensemble[i] in self._tls_refused
        ]
        if not refused or len(slots) - len(refused) >= self._needed_acks():
            return None
        return TlsHandshakeError(
            f"entry {self.md.ledger_id}:{p.entry_id} cannot reach its ack quorum and no "
            f"replacement bookie is available: {refused[0]}"
        )
