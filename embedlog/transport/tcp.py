"""The TCP transport: bookies behind real sockets, optionally TLS (see tls.py).

Frames are a u32 big-endian length followed by one frame of the shared codec
(embedlog.wire.messages). A client keeps one connection per bookie and
pipelines requests on it; the bookie handles each request as its own task, so
answers may come back in any order and the client matches them by txn. A frame
with txn 0 from a bookie is a notice about the connection itself (a refusal), and
the bookie closes the connection after it. What one connection may cost a bookie is
bounded (embedlog/transport/tcp_server.py, limits.py; docs/security.md, "Limits").

Faults (``cluster.network``) go through the same FaultInjector as the
in-process transport, so a block, drop or delay means the same here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from embedlog.errors import BookieUnavailableError, TlsHandshakeError
from embedlog.transport import tls_mismatch
from embedlog.transport.base import Then, Transport
from embedlog.transport.faults import FaultInjector, NetworkFaults
from embedlog.transport.framing import LENGTH, MAX_FRAME, TlsRecordError, frame_length
from embedlog.transport.framing import frame as _frame
from embedlog.transport.limits import NOTICE_TXN, ConnectionLimits, notice_reason
from embedlog.transport.server import RequestHandler
from embedlog.transport.tcp_server import BookieServer
from embedlog.wire.messages import FrameError, Request, Response

log = logging.getLogger(__name__)

ADDRESS_FILE = "address"
# After a TLS failure a client fails requests to that bookie at once for this long instead
# of reconnecting: a configuration error does not mend itself, and each attempt costs a
# handshake on both sides.
TLS_RETRY_AFTER = 5.0

# bookie id -> "host:port" (None if unknown); may be a coroutine function, e.g. a metadata read.
Resolver = Callable[[str], "str | Awaitable[str | None] | None"]


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[v6]:port"`` too) -> (host, port); ValueError naming the address."""
    host, colon, port = address.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bookie address {address!r} is not host:port")
    return host, int(port)


async def _read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    head = await reader.readexactly(LENGTH.size)
    return await reader.readexactly(frame_length(head, limit))


def tls_message(bookie_id: str, address: str, why: str) -> str:
    return (
        f"TLS with bookie {bookie_id} at {address} failed: {why}. This is a configuration "
        f"error: requests to this bookie fail at once for {TLS_RETRY_AFTER:g}s, then "
        "connect again"
    )


# -- client --------------------------------------------------------------------------------------


class _Connection:
    """One client connection to one bookie: pipelined requests, answers matched by txn."""

    def __init__(
        self,
        bookie_id: str,
        address: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_frame: int,
        transport: TcpTransport,
    ) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self._reader = reader
        self._writer = writer
        self._max_frame = max_frame
        self._transport = transport
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self.closed = False
        # Whether a request went out and whether any answer came back: a connection closed
        # between the two is examined for a TLS mismatch (tls_mismatch.py).
        self._sent = self._answered = False
        self._tls_why: str | None = None  # the TLS misconfiguration that ended it, if any
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    def send(self, req: Request) -> asyncio.Future[Response]:
        if self.closed:
            raise BookieUnavailableError(f"connection to bookie {self.bookie_id} is closed")
        if req.txn in self._pending:
            # Never happens with next_txn(); two requests with one txn could not be told apart.
            raise ValueError(f"txn {req.txn} is already in flight to {self.bookie_id}")
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[req.txn] = answer
        # Whoever gives up on the answer (cancel) or gets it also forgets the txn.
        answer.add_done_callback(functools.partial(self._forget, req.txn))
        self._writer.write(_frame(req.encode()))
        self._sent = True
        return answer

    def writable(self) -> bool:
        """Whether a request can go out now without waiting for the socket: open, and its
        buffer not past the point where ``drain()`` would wait (the high-water mark)."""
        t = self._writer.transport
        return (
            not self.closed
            and not t.is_closing()
            and t.get_write_buffer_size() <= t.get_write_buffer_limits()[1]
        )

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            if not self._answered:
                # The read loop sees the same loss and may find a TLS refusal behind it.
                await asyncio.wait({self._reader_task}, timeout=2 * self._transport.connect_timeout)
                if self._tls_why is not None:
                    raise TlsHandshakeError(
                        tls_message(self.bookie_id, self.address, self._tls_why)
                    ) from None
            self._shutdown(f"write failed: {exc}")
            raise BookieUnavailableError(self._reason(f"write failed: {exc}")) from None

    def _forget(self, txn: int, fut: asyncio.Future[Response]) -> None:
        if self._pending.get(txn) is fut:
            del self._pending[txn]

    def _reason(self, why: str) -> str:
        return f"bookie {self.bookie_id} at {self.address}: {why}"

    async def _read_loop(self) -> None:
        why = "connection closed"
        tls_why: str | None = None  # set when the loss is a TLS misconfiguration
        try:
            while True:
                resp = Response.decode(await _read_frame(self._reader, self._max_frame))
                self._answered = True
                if resp.txn == NOTICE_TXN:  # about the connection itself: a refusal
                    why = notice_reason(resp) or why
                    log.warning("connection to %s", self._reason(why))
                    return
                fut = self._pending.pop(resp.txn, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
                # else: the answer to a request whose sender gave up
        except asyncio.IncompleteReadError:
            why = "the bookie closed the connection"
            tls_why = await self._closed_unanswered()
        except TlsRecordError:
            why = tls_why = tls_mismatch.PLAINTEXT_CLIENT
        except FrameError as exc:
            why = f"protocol error: {exc}"
            log.warning("closing connection to %s", self._reason(why))
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            why = f"connection lost: {exc}"
            if not self._answered:
                refusal = tls_mismatch.tls_refusal(exc, handshake=False)
                tls_why = refusal or await self._closed_unanswered()
        except asyncio.CancelledError:
            why = "the client closed the connection"
            raise
        finally:
            if tls_why is not None:
                self._tls_why = tls_why
                self._transport.refuse(self.bookie_id, self.address, tls_why)
            self._shutdown(why, tls_why)

    async def _closed_unanswered(self) -> str | None:
        """Why, if TLS says, the bookie closed this connection after requests went out and
        before any answer came back; None for any other loss (a crash, a restart)."""
        if self._answered or not self._sent:
            return None
        self.closed = True  # no more requests on it while we look
        host, port = parse_address(self.address)
        t = self._transport
        return await tls_mismatch.why_closed(host, port, t.ssl_context, t.connect_timeout)

    def _shutdown(self, why: str, tls_why: str | None = None) -> None:
        self.closed = True
        self._writer.transport.abort()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(
                    TlsHandshakeError(tls_message(self.bookie_id, self.address, tls_why))
                    if tls_why is not None
                    else BookieUnavailableError(self._reason(why))
                )

    async def ended(self) -> None:
        """Wait until the connection's read loop has ended (it has shut the connection)."""
        await asyncio.wait({self._reader_task})

    async def close(self) -> None:
        self._shutdown("the client closed the connection")
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader_task


class TcpTransport(Transport):
    """Client side: one lazily opened connection per bookie, reopened after a failure."""

    def __init__(
        self,
        resolve: Resolver,
        faults: NetworkFaults | None = None,
        ssl_context: ssl.SSLContext | None = None,
        *,
        connect_timeout: float = 10.0,
        max_frame: int = MAX_FRAME,
    ) -> None:
        self._resolve = resolve
        self.faults = faults or NetworkFaults()
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self._injector = FaultInjector(self.faults)
        self._conns: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        # bookie id -> (until when, the TLS error message) after a TLS failure with it.
        self._tls_refused: dict[str, tuple[float, str]] = {}
        self._closed = False

    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        return await self._injector.request(src, bookie_id, req, timeout, self._send)

    def send_nowait(
        self, src: str, bookie_id: str, req: Request, timeout: float, then: Then | None = None
    ) -> asyncio.Future[Response]:
        """Over an open connection with room in its buffer, the frame goes out here and
        the answer is the connection's own future: no task and coroutine per request (the
        writer's adds). Otherwise (connecting, a full buffer, faults) as ``request``."""
        conn = self._conns.get(bookie_id)
        if self.faults.active or conn is None or not conn.writable():
            return super().send_nowait(src, bookie_id, req, timeout, then)
        answer = conn.send(req)
        self._injector.deadlines.add(answer, req, bookie_id, timeout)
        if then is not None:
            answer.add_done_callback(then)
        return answer

    async def _send(self, bookie_id: str, req: Request) -> asyncio.Future[Response]:
        conn = await self._connection(bookie_id)
        answer = conn.send(req)
        try:
            await conn.drain()
        except BaseException:  # also a cancelled caller: nobody waits for this answer
            if not answer.cancel() and not answer.cancelled():
                answer.exception()  # failed with the connection: the error raised here says it
            raise
        return answer

    def refuse(self, bookie_id: str, address: str, why: str) -> None:
        """Fail requests to ``bookie_id`` with a TlsHandshakeError for TLS_RETRY_AFTER."""
        message = tls_message(bookie_id, address, why)
        self._tls_refused[bookie_id] = (time.monotonic() + TLS_RETRY_AFTER, message)
        log.warning("%s", message)

    def _check_refused(self, bookie_id: str) -> None:
        refused = self._tls_refused.get(bookie_id)
        if refused is not None:
            if time.monotonic() < refused[0]:
                raise TlsHandshakeError(refused[1])  # a new one: a raised error grows its traceback
            del self._tls_refused[bookie_id]

    async def _connection(self, bookie_id: str) -> _Connection:
        conn = self._conns.get(bookie_id)
        if conn is not None and not conn.closed:
            return conn
        if conn is not None:
            # It may be asking whether TLS closed it: its verdict is this request's too,
            # and it stays tracked (close() ends it) until it has one.
            await conn.ended()
        self._check_refused(bookie_id)
        lock = self._connecting.setdefault(bookie_id, asyncio.Lock())
        async with lock:  # one connect at a time per bookie; the others share its result
            conn = self._conns.get(bookie_id)
            if conn is not None and not conn.closed:
                return conn
            if self._closed:
                raise BookieUnavailableError("the transport is closed")
            self._check_refused(bookie_id)
            conn = await self._open(bookie_id)
            self._conns[bookie_id] = conn
            return conn

    async def _open(self, bookie_id: str) -> _Connection:
        found = self._resolve(bookie_id)
        address = await found if inspect.isawaitable(found) else found
        if not address:
            raise BookieUnavailableError(f"no address known for bookie {bookie_id}")
        try:
            host, port = parse_address(str(address))
        except ValueError as exc:
            raise BookieUnavailableError(f"bookie {bookie_id}: {exc}") from None
        ctx = self.ssl_context
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, port, ssl=ctx, server_hostname=host if ctx is not None else None
                ),
                self.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            refusal = tls_mismatch.tls_refusal(exc)
            if refusal is not None:
                self.refuse(bookie_id, str(address), refusal)
                raise TlsHandshakeError(tls_message(bookie_id, str(address), refusal)) from None
            why = str(exc) or type(exc).__name__
            if ctx is not None and isinstance(exc, ConnectionResetError | ssl.SSLError):
                why += (
                    " during the TLS handshake (a bookie without TLS, or one refusing this "
                    "client's certificate, may close it so)"
                )
            raise BookieUnavailableError(
                f"cannot connect to bookie {bookie_id} at {address}: {why}"
            ) from None
        sock = writer.get_extra_info("socket")
        if sock is not None:  # small frames (acks, LAC reads) must not wait for Nagle
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(bookie_id, str(address), reader, writer, self.max_frame, self)

    async def close(self) -> None:
        self._closed = True
        await self._injector.close()
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


# -- LocalCluster over TCP -----------------------------------------------------------------------


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def pick_port(host: str = "127.0.0.1", avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A port free now, chosen below the kernel's ephemeral range when possible.

    A bookie keeps its port for life, also while it is down; a port from the ephemeral
    range could meanwhile become the local end of some outgoing connection and stop the
    bookie from listening again.
    """
    low, _high = _ephemeral_range()
    if low > 11000:
        for _ in range(100):
            port = random.randrange(10000, low)
            if port not in avoid and _can_bind(host, port):
                return port
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port
    raise OSError(f"no free port found on {host}")


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def stable_address(bookie_dir: Path, host: str = "127.0.0.1") -> str:
    """The bookie's address, chosen once and kept in ``bookie_dir/address``.

    It must not change across restarts: the bookie's cookie records it. The file lives
    beside journal/, ledgers/ and index/, so wiping those disks keeps it.
    """
    path = bookie_dir / ADDRESS_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    # Siblings that are down do not hold their ports: do not hand one out twice.
    avoid = set()
    for other in bookie_dir.parent.glob(f"*/{ADDRESS_FILE}"):
        with contextlib.suppress(OSError, ValueError):
            avoid.add(parse_address(other.read_text().strip())[1])
    address = f"{host}:{pick_port(host, avoid)}"
    bookie_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(ADDRESS_FILE + ".tmp")
    tmp.write_text(address + "\n")
    os.replace(tmp, path)
    return address


class TcpCluster(Transport):
    """LocalCluster's transport for ``transport="tcp"``: a BookieServer per running bookie,
    and a TcpTransport for the cluster's own clients.

    LocalCluster calls ``bookie_started``/``bookie_stopped`` from its (non-loop) thread.
    """

    def __init__(
        self,
        address_of: Callable[[str], str],
        run: Callable[[Coroutine[Any, Any, None]], None],
        faults: NetworkFaults | None = None,
        *,
        client_ssl: ssl.SSLContext | None = None,
        tls_ca: Path | None = None,
    ) -> None:
        self._address_of = address_of
        self._run = run
        self.tls_ca = tls_ca  # the CA certificate other processes must trust (TLS clusters)
        # Addresses of every bookie started in this run; a stopped bookie's stays, so a
        # request to it is refused (BookieUnavailableError) like any dead bookie's.
        self._addresses: dict[str, str] = {}
        self.client = TcpTransport(self._addresses.get, faults, client_ssl)
        self.faults = self.client.faults
        self.servers: dict[str, BookieServer] = {}

    def address(self, bookie_id: str) -> str | None:
        return self._addresses.get(bookie_id)

    def bookie_started(
        self, bookie_id: str, bookie: RequestHandler, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """Serve ``bookie`` on its address, with TLS if ``ssl_context`` is given."""
        address = self._address_of(bookie_id)
        host, port = parse_address(address)
        config = getattr(bookie, "config", None)  # a Bookie's: its connection limits
        limits = ConnectionLimits.of(config) if config is not None else None
        server = BookieServer(bookie, host, port, ssl_context, limits=limits)
        try:
            self._run(server.start())
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"bookie {bookie_id} cannot listen on its address {address} (kept in its "
                f"data directory, as its cookie records it): {exc.strerror}",
            ) from exc
        self.servers[bookie_id] = server
        self._addresses[bookie_id] = address

    def serving_elsewhere(self, bookie_id: str, address: str) -> None:
        """``bookie_id`` is served by another process at ``address`` (processes=True)."""
        self._addresses[bookie_id] = address

    def bookie_stopped(self, bookie_id: str) -> None:
        server = self.servers.pop(bookie_id, None)
        if server is not None:
            self._run(server.close())

    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        return await self.client.request(src, bookie_id, req, timeout)

    def send_nowait(
        self, src: str, bookie_id: str, req: Request, timeout: float, then: Then | None = None
    ) -> asyncio.Future[Response]:
        return self.client.send_nowait(src, bookie_id, req, timeout, then)

    async def close(self) -> None:
        servers, self.servers = list(self.servers.values()), {}
        await self.client.close()
        await asyncio.gather(*(s.close() for s in servers), return_exceptions=True)
