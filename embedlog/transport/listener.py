"""A listening socket whose accept loop outlasts running out of file descriptors.

asyncio's own accept loop (3.11), when accept() fails with EMFILE, reports the error and
schedules itself again once for each connection it would have accepted in that round:
with the process out of descriptors, a storm of error reports and timers on the loop the
bookies share. Here the first failure is logged, and accepting pauses for a second.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger(__name__)

# accept() failing for want of a resource the process gets back when connections close.
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_RETRY = 1.0  # seconds
_BACKLOG = 128


async def listen(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port`` (its first address)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As asyncio's servers: a restarted bookie takes its port back at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def accept_forever(sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
    """Hand every connection ``sock`` accepts to ``accepted`` until cancelled."""
    loop = asyncio.get_running_loop()
    short = False  # of descriptors (or memory) at the last attempt
    while True:
        try:
            conn, _peer = await loop.sock_accept(sock)
        except ConnectionAbortedError:
            continue  # the client gave up before we took it
        except OSError as exc:
            if exc.errno not in _RESOURCE_ERRNOS:
                raise
            if not short:
                log.warning(
                    "%s: cannot accept connections: %s; trying again every %gs",
                    *(sock.getsockname(), exc, ACCEPT_RETRY),
                )
            short = True
            await asyncio.sleep(ACCEPT_RETRY)
            continue
        if short:
            log.warning("%s: accepting connections again", sock.getsockname())
            short = False
        accepted(conn)
