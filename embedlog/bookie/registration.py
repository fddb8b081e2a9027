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

It does not take the place of another: a registration held by another session (a second
process with this bookie id) is left alone and retried later, and a bookie whose cookie
in the metadata changed since it booted (the operator's cookie fix for a new incarnation
on new disks) stops registering. A read-only change whose registration write failed is
retried the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from embedlog.bookie.config import BookieConfig
from embedlog.errors import CookieError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore

log = logging.getLogger(__name__)


class Registrant(Protocol):
    """What a registration asks of its bookie (embedlog/bookie/bookie.py)."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def serving(self) -> bool:
        """Booted, and neither stopped nor crashed."""
        ...

    @property
    def readonly(self) -> bool: ...

    @property
    def config(self) -> BookieConfig: ...

    @property
    def metadata(self) -> MetadataClient: ...

    @property
    def session(self) -> MetadataStore:
        """The metadata session its registration lives as long as."""
        ...

    async def call_metadata(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, on a thread if the metadata store blocks."""
        ...


class Registration:
    def __init__(self, bookie: Registrant) -> None:
        self.bookie = bookie
        self.renewals = 0  # registrations made again (after an expiry, or a failed change)
        self.cookie: tuple[bytes, int] | None = None  # the metadata's cookie when it booted
        self.on_renewed: Callable[[], None] | None = None  # a bookie process reports it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._asked = 0  # expiries and failed changes seen: each asks for a registration

    def watch(self) -> None:
        """At boot, before the first registration (on the bookie's loop): from now on an
        expiry of its session brings a new registration."""
        self._loop = asyncio.get_running_loop()
        self.cookie = self.bookie.metadata.read_cookie(self.bookie.bookie_id)
        self.bookie.session.on_session_expired(self.lost)

    def register(self, *, readonly: bool) -> None:
        """Register as writable or read-only now; a write that fails is retried
        (``refresh``)."""
        bookie = self.bookie
        cfg = bookie.config
        try:
            bookie.metadata.register_bookie(
                bookie.session,
                bookie.bookie_id,
                {"address": cfg.advertised_address, "rack": cfg.rack},
                readonly=readonly,
            )
        except Exception as exc:
            state = "read-only" if readonly else "writable"
            log.warning(
                "bookie %s: could not register as %s (%s); retrying", bookie.bookie_id, state, exc
            )
            self.refresh()

    def lost(self) -> None:
        """The session expired (from any thread: kazoo calls it from its own)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the bookie is gone
            loop.call_soon_threadsafe(self.refresh)

    def refresh(self) -> None:
        """On the bookie's loop: make the registration match the bookie again, retrying
        until it does (after an expiry, or a read-only change whose write failed)."""
        if not self.bookie.serving:
            return  # a crash or a stop ended the session: nothing to keep
        self._asked += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._register_again())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _register_again(self) -> None:
        bookie = self.bookie
        cfg = bookie.config
        info: dict[str, object] = {"address": cfg.advertised_address, "rack": cfg.rack}
        failures = 0
        while bookie.serving:
            asked, readonly = self._asked, bookie.readonly
            try:
                await bookie.call_metadata(
                    functools.partial(
                        bookie.metadata.register_again,
                        bookie.session,
                        bookie.bookie_id,
                        info,
                        readonly=readonly,
                        cookie=self.cookie,
                    )
                )
            except CookieError as exc:
                log.error("bookie %s: %s", bookie.bookie_id, exc)
                return  # superseded: registering would steal the new incarnation's place
            except Exception as exc:
                # Once per outage: the metadata store says the rest (zk_outage.py).
                failures += 1
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "bookie %s: could not register again yet (%s); retrying every %gs",
                    bookie.bookie_id,
                    exc,
                    cfg.repair_retry_interval,
                )
                await asyncio.sleep(cfg.repair_retry_interval)
                continue
            # Another expiry (or a read-only change) since this began took this one away.
            if bookie.readonly == readonly and self._asked == asked:
                self.renewals += 1
                log.warning(
                    "bookie %s: registered again as %s",
                    bookie.bookie_id,
                    "read-only" if readonly else "available",
                )
                if self.on_renewed is not None:
                    self.on_renewed()
                return
