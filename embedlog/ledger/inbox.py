"""Adds handed from the caller's thread to the runtime loop, in order, in batches.

The blocking API's ``add_async`` runs on the caller's thread; the writer lives on
the loop. Waking the loop for every add (``call_soon_threadsafe``) costs a
self-pipe write and a callback each; the inbox wakes it once for whatever queued
up meanwhile, and hands each add's concurrent future to the writer to complete
directly. Each add arrives having taken room in the writer's ``AddBudget``
(``cost``: its payload bytes); one cancelled before the loop takes it gives it back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import deque
from typing import Any, Protocol

from embedlog.errors import ClientClosedError
from embedlog.ledger.admission import AddBudget
from embedlog.ledger.future import new_future

log = logging.getLogger(__name__)


class AddTarget(Protocol):
    """Who takes the adds on the loop: a writer, or a stream's ``StreamAppends``."""

    @property
    def budget(self) -> AddBudget: ...

    def add_to(
        self, future: concurrent.futures.Future[int], payload: bytes, *, cost: int = -1
    ) -> None: ...

    def send_now(self) -> None:
        """Send what the adds handed over so far queued, without waiting for the end of
        the loop turn (the inbox took everything it had)."""


class AddInbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[tuple[Any, bytes, concurrent.futures.Future[int], int, bytes | None]]
        self._queue = deque()
        self._scheduled = False

    def submit(
        self, writer: AddTarget, payload: bytes, cost: int = -1, msg_id: bytes | None = None
    ) -> concurrent.futures.Future[int]:
        """Queue ``payload`` for ``writer`` (from any thread); the future gives its entry id.
        ``cost``: the bytes taken from ``writer.budget`` for it (-1: none). ``msg_id``
        (a stream's ``StreamAppends`` only): the append's id for deduplication."""
        future: concurrent.futures.Future[int] = new_future()
        self._queue.append((writer, payload, future, cost, msg_id))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._take)
            except RuntimeError:  # the loop closed (its cluster stopped) under the caller
                self._scheduled = False
                self._fail_queued()
        return future

    def _fail_queued(self) -> None:
        # Never left pending: nothing would ever complete these futures.
        closed = ClientClosedError("the client's event loop is closed (its cluster stopped)")
        while self._queue:
            writer, _payload, future, cost, _msg_id = self._queue.popleft()
            if cost >= 0:
                writer.budget.release(1, cost)
            if future.set_running_or_notify_cancel():
                future.set_exception(closed)

    def _take(self) -> None:
        # Cleared before taking: an add queued after the last take sees False and wakes
        # the loop again (at worst one take finds the queue empty). Appends and pops of a
        # deque are atomic, so no lock is needed.
        self._scheduled = False
        queue = self._queue
        takers: dict[Any, None] = {}  # the writers that took adds, in order
        while queue:
            writer, payload, future, cost, msg_id = queue.popleft()
            # RUNNING from here on: the caller can no longer cancel it under the writer.
            # One cancelled before this point is simply not written.
            if future.set_running_or_notify_cancel():
                if msg_id is None:
                    writer.add_to(future, payload, cost=cost)
                else:
                    writer.add_to(future, payload, cost=cost, msg_id=msg_id)
            elif cost >= 0:
                writer.budget.release(1, cost)
            takers[writer] = None
        # The adds just taken are all there will be in this wake-up: their requests go out
        # now rather than at the end of the loop turn, which other callbacks may hold up
        # (one loop turn less between a blocking add and its journals' fsyncs). After the
        # queue is empty: a send that fails must not leave adds behind in it.
        for writer in takers:
            try:
                writer.send_now()
            except Exception:  # the writer's own turn-end send would meet it again
                log.exception("sending the adds just taken failed")
