"""A quiet writer's explicit LAC: WRITE_LAC to the last fragment once adds stop.

An entry carries the LAC of when it was queued, so the last acknowledged entry becomes
visible to readers only with the next one. When the writer has completed nothing for
``explicit_lac_interval`` seconds, ``ExplicitLac`` tells the last fragment's bookies the
LAC instead (BookKeeper's explicit LAC); the stream writer also sends it at once through
``send`` (its prompt LACs, embedlog/unbounded/writer.py) and records that in ``sent``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from embedlog.errors import BKError
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.messages import OpCode


class LacSource(Protocol):
    """What the timer reads of the writer's adds (the add pipeline has it)."""

    md: LedgerMetadata
    lac: int
    error: BKError | None


class ExplicitLac:
    def __init__(
        self,
        ctx: ClientContext,
        adds: LacSource,
        term: int,
        key: bytes,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        lafr: Callable[[], int],
        *,
        enabled: bool,
    ) -> None:
        self.ctx = ctx
        self.adds = adds
        self.term = term
        self.key = key
        self.spawn = spawn
        # The LAFR the writer's adds carry (a stream's; -1 for a bounded ledger): sent
        # with the LAC, so that a takeover after the writer went quiet reads forward from
        # where the writer's entries reached every bookie, not from where its last add said.
        self.lafr = lafr
        self.enabled = enabled  # not for a recovery's write-back
        self.sent = -1  # the highest LAC sent explicitly
        self.timer: asyncio.TimerHandle | None = None
        self.last_completion = 0.0

    def completed(self, now: float) -> None:
        """Adds completed at ``now``: the idle timer counts from here."""
        self.last_completion = now
        interval = self.ctx.explicit_lac_interval
        if interval <= 0 or not self.enabled or self.timer is not None:
            return
        self.timer = asyncio.get_running_loop().call_later(interval, self._due)

    def cancel(self) -> None:
        """No more idle LACs (the writer failed or stopped); ``completed`` schedules none
        either while the cancelled timer is kept."""
        if self.timer is not None:
            self.timer.cancel()

    def cancel_and_forget(self) -> None:
        """The writer closes: cancel the timer and drop it."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _due(self) -> None:
        self.timer = None
        adds = self.adds
        if adds.error is not None or adds.lac <= self.sent:
            return
        idle = self.ctx.clock.monotonic() - self.last_completion
        interval = self.ctx.explicit_lac_interval
        if idle < interval:
            self.timer = asyncio.get_running_loop().call_later(interval - idle, self._due)
            return
        lac = adds.lac
        self.sent = lac
        for bookie in adds.md.last_fragment[1]:
            self.spawn(self.send(bookie, lac))

    async def send(self, bookie: str, lac: int) -> None:
        """WRITE_LAC ``lac`` to ``bookie``, best effort."""
        try:
            await self.ctx.bookies.call(
                bookie,
                OpCode.WRITE_LAC,
                self.adds.md.ledger_id,
                lac,
                term=self.term,
                master_key=self.key,
                lafr=self.lafr(),
            )
        except UNKNOWN_OUTCOMES:
            pass  # best effort: the LAC also travels with the next entry
