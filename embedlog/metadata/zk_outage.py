"""How a ZooKeeper client rides out an outage: it reconnects often, and says so once.

kazoo's own defaults grow the pause between reconnect attempts towards a minute (and an
hour for retried calls), and log a warning per attempt. A bookie then came back 12-22 s
after ZooKeeper did, by which time its session (10 s) had expired and its registration
with it; a client started meanwhile found no address for it. Here the pause stops
growing at ``RECONNECT_DELAY_CAP`` (plus jitter: ``RECONNECT_BOUND`` at most), well inside
the session timeout, so a session outlives a ZooKeeper restart and a bookie stays
registered through it; and each client's outage is one warning line, not one per attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

RECONNECT_DELAY_CAP = 1.0  # seconds; kazoo's default is 60
RECONNECT_JITTER = 0.2  # kazoo multiplies each pause by a factor in [1 - j, 1 + j]
RECONNECT_BOUND = RECONNECT_DELAY_CAP * (1 + RECONNECT_JITTER)  # longest pause between tries

# kazoo waits (session timeout) / (servers listed) for a server's answer to a session
# handshake. A restarting ZooKeeper sometimes takes the connection and never answers it:
# across restarts on a loaded machine 3 reconnects of 64 each waited the whole 10 s and
# arrived to find the session expired (the registration with it); with the wait cut to a
# fifth of the session timeout, 0 of 80 (same load).
HANDSHAKE_SHARE = 5

# kazoo's warnings that come once per connection attempt (or per state change of one).
_PER_ATTEMPT = (
    "Connection dropped",
    "Connection time-out",
    "Transition to CONNECTING",
    "Cannot resolve",
    "Failed connecting to Zookeeper",
    "Session has expired",
)


class HandshakeShare(list):  # type: ignore[type-arg]
    """kazoo's list of (host, port), counted ``HANDSHAKE_SHARE`` times where kazoo divides
    the session timeout by it: that quotient is how long kazoo waits for a handshake's
    answer (and for a request to go out). Iterating it gives each server once, so a
    dropped connection is still retried after ``reconnect_retry``'s pause, not at once:
    listing each server five times bounded the wait as well, but then a client
    reconnected within milliseconds of any drop, and ``expire_session`` could no longer
    end a live client's session (the client took it back first)."""

    def __len__(self) -> int:
        return super().__len__() * HANDSHAKE_SHARE


def bound_handshake(client: KazooClient) -> KazooClient:
    """``client`` waiting at most a ``HANDSHAKE_SHARE``-th of its session timeout for
    the answer to a handshake, so that a session outlives a ZooKeeper restart whose
    server took a connection and never answered it."""
    client.hosts = HandshakeShare(client.hosts)
    return client


def reconnect_retry() -> KazooRetry:
    """kazoo's reconnect policy for every embedlog client: forever, never pausing longer
    than ``RECONNECT_BOUND``."""
    return KazooRetry(
        max_tries=-1,
        delay=0.1,
        backoff=2,
        max_jitter=RECONNECT_JITTER,
        max_delay=RECONNECT_DELAY_CAP,
    )


class _Outage:
    """One ZooKeeper ensemble's outage as this process's clients of it see it: it is said
    once (a bookie has two sessions, a client one per store), and over when all of the
    clients that lost it have it again."""

    def __init__(self) -> None:
        self.down: set[int] = set()  # the clients (id of their OutageLog) reconnecting
        self.since: float | None = None
        self.said = False
        self.expired = False


_OUTAGES: dict[str, _Outage] = {}
_LOCK = threading.Lock()


class OutageLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's logger for one client: its per-attempt warnings become one line per outage
    (``embedlog.metadata.zookeeper_store``'s logger says it, for all of the process's
    clients of those hosts), and a line at INFO when ZooKeeper answers again. Before the
    first connection it says nothing: a start that fails raises an error naming the last
    reason (``reason``) instead."""

    def __init__(self, hosts: str, patience: float) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.hosts = hosts
        self.patience = patience
        self.reason = ""  # the last failed attempt's reason ("Connection refused", ...)
        self._started = False  # connected once: from now on its outages are reported
        self._say = logging.getLogger("embedlog.metadata.zookeeper_store")

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level == logging.WARNING and isinstance(msg, str) and msg.startswith(_PER_ATTEMPT):
            self._attempt_failed(msg % args if args else msg)
            return
        if level == logging.INFO and isinstance(msg, str) and msg.startswith("Connecting to"):
            level = logging.DEBUG  # once per attempt, too
        super().log(level, msg, *args, **kwargs)

    def _outage(self) -> _Outage:
        return _OUTAGES.setdefault(self.hosts, _Outage())

    def _attempt_failed(self, what: str) -> None:
        if what.startswith(("Transition to CONNECTING", "Failed connecting")):
            return  # a state change, or the end of a stopped start: no reason of its own
        with _LOCK:
            outage = self._outage()
            if what.startswith("Session has expired"):
                outage.expired = True
                return
            self.reason = what.rpartition(": ")[2] or what
            if id(self) not in outage.down or outage.said:
                return
            outage.said = True
        self._say.warning(
            "ZooKeeper at %s is unreachable (%s); reconnecting at least every %gs, and "
            "metadata calls wait up to %gs for it",
            self.hosts,
            self.reason,
            RECONNECT_BOUND,
            self.patience,
        )

    def disconnected(self) -> None:
        with _LOCK:
            if not self._started:
                return
            outage = self._outage()
            outage.down.add(id(self))
            if outage.since is None:
                outage.since = time.monotonic()

    def connected(self) -> None:
        """kazoo connected (again): the outage ends once every client that lost it has it
        back, saying how long it was if it was said."""
        with _LOCK:
            self._started = True
            ended = self._leave()
        if ended is not None:
            since, expired = ended
            self._say.info(
                "ZooKeeper at %s answers again after %.1fs%s",
                self.hosts,
                time.monotonic() - since,
                " (a session had expired: its ephemeral nodes are gone)" if expired else "",
            )

    def closed(self) -> None:
        """The client is closed: it no longer waits for ZooKeeper."""
        with _LOCK:
            self._started = False
            self._leave()

    def _leave(self) -> tuple[float, bool] | None:
        """(start, session expired) of the outage this client's leaving ends, if it was said."""
        outage = self._outage()
        if id(self) not in outage.down:
            return None
        outage.down.discard(id(self))
        if outage.down:
            return None
        said, since, expired = outage.said, outage.since, outage.expired
        del _OUTAGES[self.hosts]
        return (since, expired) if said and since is not None else None


__all__ = [
    "HANDSHAKE_SHARE",
    "RECONNECT_BOUND",
    "RECONNECT_DELAY_CAP",
    "HandshakeShare",
    "OutageLog",
    "bound_handshake",
    "reconnect_retry",
]
