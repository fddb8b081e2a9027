"""A serving bookie's registration, kept through metadata session expiries.

A bookie registers itself as available (or read-only) with an ephemeral node of its
metadata session: clients place new ensembles, and the auditor looks for bookies, among
the registered ones. A ZooKeeper session expires when the bookie cannot reach ZooKeeper
for the session timeout (a long pause, a network cut), and its nodes go with it, while
the bookie goes on serving. The client then connects with a new session, and the store
says so (``MetadataStore.on_session_expired``); the bookie registers again, retrying
every ``repair_retry_interval`` until it is registered or stops. Without that, a bookie
whose session once expired was offered for no new ensemble until its next restart, and
enough of them left streams that could not be taken over (simulator, seed 9858 of
``unbounded-nojournal-races``). BookKeeper's bookies register again the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import TYPE_CHECKING

from embedlog.bookie.base import BookieState

if TYPE_CHECKING:
    from embedlog.bookie.bookie import Bookie

log = logging.getLogger(__name__)


class Registration:
    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        self.renewals = 0  # registrations made again after an expiry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def watch(self) -> None:
        """Once registered at boot (on the bookie's loop): from now on an expiry of its
        session brings a new registration."""
        self._loop = asyncio.get_running_loop()
        self.bookie.session.on_session_expired(self.lost)

    def lost(self) -> None:
        """The session expired (from any thread: kazoo calls it from its own)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the bookie is gone
            loop.call_soon_threadsafe(self._renew)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _renew(self) -> None:
        if self.bookie.state is not BookieState.SERVING:
            return  # a crash or a stop ended the session: nothing to keep
        if self._task is not None and not self._task.done():
            return  # already at it
        self._task = asyncio.get_running_loop().create_task(self._register_again())

    async def _register_again(self) -> None:
        bookie = self.bookie
        cfg = bookie.config
        info: dict[str, object] = {"address": cfg.advertised_address, "rack": cfg.rack}
        while bookie.state is BookieState.SERVING:
            readonly = bookie.readonly
            try:
                await bookie._blocking_meta(
                    functools.partial(
                        bookie.metadata.register_bookie,
                        bookie.session,
                        bookie.bookie_id,
                        info,
                        readonly=readonly,
                    )
                )
            except Exception as exc:
                log.warning(
                    "bookie %s: its metadata session expired and it could not register "
                    "again yet (%s); retrying in %gs",
                    bookie.bookie_id,
                    exc,
                    cfg.repair_retry_interval,
                )
                await asyncio.sleep(cfg.repair_retry_interval)
                continue
            if bookie.readonly == readonly:
                self.renewals += 1
                log.warning(
                    "bookie %s: its metadata session expired; registered again as %s",
                    bookie.bookie_id,
                    "read-only" if readonly else "available",
                )
                return
            # It went read-only (or writable) while this registered: once more, as it is now.
