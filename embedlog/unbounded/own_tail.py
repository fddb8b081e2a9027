"""What a writer's own tail waits for: its LAC to move, which the writer knows without a
request; and, while nothing comes, that the stream is still its to write.

A writer learns that it was displaced (another client took the stream over) or that
the stream was deleted from its next append. A tail of a writer's handle that appends
nothing would wait for ever on the old term's LAC; so while it waits it reads the
stream's metadata, at most once per ``CHECK_EVERY``, and ends with the error that says
what happened (LedgerDeletedError, or InvalidTermError naming the new term and how to
follow it).
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

from embedlog.errors import InvalidTermError
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.unbounded import follow
from embedlog.unbounded.writer import check_still_ours

CHECK_EVERY = follow.POLL_SLICE  # seconds between metadata reads of an idle tail


class OwnWriter(Protocol):
    """What the wait needs of the handle's writer (``TermWriter``)."""

    @property
    def lac(self) -> int: ...

    @property
    def term(self) -> int: ...

    @property
    def error(self) -> BaseException | None: ...

    @property
    def progress(self) -> asyncio.Event: ...


class OwnTailWait:
    """One writer handle's waits for its own LAC (on the loop)."""

    def __init__(self, ctx: ClientContext, ledger_id: int) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._checked = -math.inf

    async def wait_past(self, writer: OwnWriter, previous: int, wait: float) -> None:
        """Wait up to ``wait`` seconds for the writer's LAC to pass ``previous``."""
        clock = self._ctx.clock
        deadline = clock.monotonic() + wait
        while writer.lac <= previous:
            if writer.error is not None:
                raise self._ended(writer, writer.error)
            left = deadline - clock.monotonic()
            if left > 0:
                writer.progress.clear()
                try:
                    await asyncio.wait_for(writer.progress.wait(), left)
                    continue
                except TimeoutError:
                    pass
            await self._still_ours(writer)
            return

    async def _still_ours(self, writer: OwnWriter) -> None:
        now = self._ctx.clock.monotonic()
        if now - self._checked < CHECK_EVERY:
            return
        self._checked = now
        try:
            md = await follow.current_metadata(self._ctx, self._ledger_id)  # deleted: raises
        except UNKNOWN_OUTCOMES:
            return  # the metadata store did not answer: the next idle wait asks again
        try:
            check_still_ours(md, writer.term)  # the writer's own rule, after a lost CAS
        except InvalidTermError:
            raise self._displaced(writer.term, md.term) from None

    def _ended(self, writer: OwnWriter, error: BaseException) -> BaseException:
        if isinstance(error, InvalidTermError):
            return self._displaced(writer.term, None)
        return error

    def _displaced(self, term: int, now: int | None) -> InvalidTermError:
        which = f"term {now}" if now is not None else "a later term"
        return InvalidTermError(
            f"ledger {self._ledger_id}: this handle wrote in term {term}, and another client "
            f"took the stream over ({which}); its tail knows entries of its own term only. "
            "Follow the stream with open_unbounded(..., takeover=False)"
        )


__all__ = ["CHECK_EVERY", "OwnTailWait", "OwnWriter"]
