"""The TCP transport: bookies behind real sockets, optionally TLS (see tls.py).

Frames are a u32 big-endian length followed by one frame of the shared codec
(embedlog.wire.messages). A client keeps one connection per bookie and
pipelines requests on it; the bookie handles each request as its own task, so
answers may come back in any order and the client matches them by txn. A frame
with txn 0 from a bookie is a notice about the connection itself (a refusal), and
the bookie closes the connection after it. What one connection may cost a bookie is
bounded (embedlog/transport/limits.py; docs/security.md, "Limits").

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
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from embedlog.errors import BookieUnavailableError, TlsHandshakeError
from embedlog.transport import tls_mismatch
from embedlog.transport.base import Transport
from embedlog.transport.faults import FaultInjector, NetworkFaults
from embedlog.transport.limits import (
    NOTICE_TXN,
    ConnectionLimits,
    close_reason,
    may_read,
    notice_reason,
    refusal,
)
from embedlog.transport.listener import accept_forever, listen
from embedlog.transport.server import FrameReply, RequestHandler, serve_frame
from embedlog.wire.messages import FrameError, Request, Response

log = logging.getLogger(__name__)

LENGTH = struct.Struct(">I")
# Far above any entry a client sends (the write cache itself defaults to 64 MiB) and far
# below what would let one bad length prefix make a peer allocate gigabytes.
MAX_FRAME = 64 * 1024 * 1024
ADDRESS_FILE = "address"
# After a TLS failure a client fails requests to that bookie at once for this long instead
# of reconnecting: a configuration error does not mend itself, and each attempt costs a
# handshake on both sides.
TLS_RETRY_AFTER = 5.0
# How long a refused connection is kept for its client to hear why and hang up, and how
# many are kept so at once (past that, a refused connection is closed without a word).
_REFUSAL_LINGER = 1.0
_MAX_REFUSING = 64

# bookie id -> "host:port" (None if unknown); may be a coroutine function, e.g. a metadata read.
Resolver = Callable[[str], "str | Awaitable[str | None] | None"]


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[v6]:port"`` too) -> (host, port); ValueError naming the address."""
    host, colon, port = address.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bookie address {address!r} is not host:port")
    return host, int(port)


class TlsRecordError(FrameError):
    """A TLS record where a frame was expected: the peer speaks TLS and this side does not."""


async def _read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    head = await reader.readexactly(LENGTH.size)
    return await reader.readexactly(_frame_length(head, limit))


def _frame_length(head: bytes, limit: int) -> int:
    """The length a frame's prefix announces; FrameError above ``limit`` (TlsRecordError
    when the prefix is the start of a TLS record)."""
    (n,) = LENGTH.unpack(head)
    if n > limit:
        if tls_mismatch.is_tls_record(head):  # as a length, far above any limit
            raise TlsRecordError("the peer speaks TLS on a connection without TLS")
        raise FrameError(f"frame of {n} bytes exceeds the {limit} byte limit")
    return n


def _frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


def tls_message(bookie_id: str, address: str, why: str) -> str:
    return (
        f"TLS with bookie {bookie_id} at {address} failed: {why}. This is a configuration "
        f"error: requests to this bookie fail at once for {TLS_RETRY_AFTER:g}s, then "
        "connect again"
    )


# -- server --------------------------------------------------------------------------------------


class _Served:
    """One client connection as its server sees it: what it costs and when it last acted."""

    __slots__ = (
        "frame_progress",
        "in_progress",
        "last_active",
        "loop",
        "peer",
        "room",
        "unsent",
        "writer",
    )

    def __init__(self, writer: asyncio.StreamWriter, peer: object) -> None:
        self.loop = asyncio.get_running_loop()
        now = self.loop.time()
        self.writer = writer
        self.peer = peer
        self.in_progress = 0  # requests handed to the bookie and not yet answered
        self.last_active = now
        self.frame_progress: float | None = None  # see limits.close_reason
        self.unsent = 0  # the write buffer when last looked at, to see the client take some
        self.room: asyncio.Future[None] | None = None  # the reader waits here for requests

    def answered(self) -> None:
        self.in_progress -= 1
        if self.in_progress == 0:
            self.last_active = self.loop.time()
        room = self.room
        if room is not None and not room.done():
            room.set_result(None)

    def close(self) -> None:
        self.writer.transport.abort()
        room = self.room
        if room is not None and not room.done():
            room.set_result(None)


async def _read_exactly(reader: asyncio.StreamReader, n: int, conn: _Served) -> bytes:
    """``n`` bytes; ``conn.frame_progress`` follows each piece that arrives."""
    data = await reader.read(n)
    if len(data) == n:
        return data
    parts, got = [data], len(data)
    loop = asyncio.get_running_loop()
    while got < n:
        if not data:
            raise asyncio.IncompleteReadError(b"".join(parts), n)
        conn.frame_progress = loop.time()
        data = await reader.read(n - got)
        parts.append(data)
        got += len(data)
    return b"".join(parts)


class BookieServer:
    """Serves one bookie (any ``handle(Request) -> Response``) on a TCP port, within
    ``limits`` (embedlog/transport/limits.py)."""

    def __init__(
        self,
        handler: RequestHandler,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        *,
        max_frame: int = MAX_FRAME,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.max_frame = max_frame
        self.limits = limits or ConnectionLimits()
        self._sock: socket.socket | None = None  # listening
        self._acceptor: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        # Connections by stage: accepted (a TLS handshake, say), served, refused.
        self._opening: set[asyncio.Task[None]] = set()
        self._readers: dict[_Served, asyncio.Task[None]] = {}
        self._refused: set[asyncio.Task[None]] = set()
        self._handling: set[asyncio.Task[Response]] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        """Connections accepted and not refused (TLS handshakes in progress too)."""
        return len(self._readers) + len(self._opening)

    def unsent_bytes(self) -> int:
        """Bytes of answers written and not yet taken by their clients, all connections."""
        return sum(c.writer.transport.get_write_buffer_size() for c in self._readers)

    async def start(self) -> None:
        try:
            self._sock = await listen(self.host, self.port)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {self.address}: {exc.strerror}") from exc
        self.port = int(self._sock.getsockname()[1])
        loop = asyncio.get_running_loop()
        self._acceptor = loop.create_task(accept_forever(self._sock, self._accepted))
        self._watchdog = loop.create_task(self._watch())

    async def close(self) -> None:
        """Stop listening and drop every connection: clients' in-flight requests fail as
        BookieUnavailableError at once rather than waiting for their timeouts."""
        sock, self._sock = self._sock, None
        for task in (self._acceptor, self._watchdog):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if sock is not None:
            sock.close()
        readers = list(self._readers.items())
        for conn, _task in readers:
            # Not cancelled: the abort ends each connection's task through its own
            # "client hung up" path, answers it was waiting to read included.
            conn.close()
        others = [*self._opening, *self._refused]  # in a handshake, or being refused
        for task in others:
            task.cancel()
        await asyncio.gather(*(t for _, t in readers), *others, return_exceptions=True)
        # Requests already handed to the bookie run to completion (a bookie never sees a
        # request cut in half); their answers have nowhere to go and are dropped.

    async def _watch(self) -> None:
        """Close the connections that are idle or stalled in the middle of a frame."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.limits.check_interval)
            now = loop.time()
            for conn in list(self._readers):
                unsent = conn.writer.transport.get_write_buffer_size()
                if unsent < conn.unsent:  # the client took some of its answers
                    conn.last_active = now
                conn.unsent = unsent
                why = close_reason(
                    self.limits,
                    now,
                    last_active=conn.last_active,
                    frame_progress=conn.frame_progress,
                    in_progress=conn.in_progress,
                )
                if why is not None:
                    log.info("closing connection from %s: %s", conn.peer, why)
                    conn.close()

    def _accepted(self, sock: socket.socket) -> None:
        """A new connection: served, refused with a notice, or (refusals piling up too)
        closed at once. Counted from here, so a TLS handshake counts as a connection."""
        if self._sock is None:  # accepted just as we closed
            sock.close()
            return
        refuse = self.connections >= self.limits.max_connections
        if refuse and len(self._refused) >= _MAX_REFUSING:
            sock.close()
            return
        task = asyncio.get_running_loop().create_task(self._connection(sock, refuse))
        (self._refused if refuse else self._opening).add(task)

    async def _connection(self, sock: socket.socket, refuse: bool) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            # A TLS handshake is a frame begun: it gets as long to finish.
            timeout = self.limits.partial_frame_timeout if self.ssl_context is not None else None
            try:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=self.ssl_context, ssl_handshake_timeout=timeout
                )
            except OSError as exc:  # a handshake that failed or took too long; a reset
                log.debug("connection to %s failed before its first frame: %s", self.address, exc)
                sock.close()
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            if refuse:
                await self._refuse(reader, writer)
            else:
                await self._serve(reader, writer, task)
        finally:
            self._opening.discard(task)
            self._refused.discard(task)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]
    ) -> None:
        loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        conn = _Served(writer, peer)
        self._readers[conn] = task
        self._opening.discard(task)
        limits = self.limits
        # Paused past the bound, resumed at a quarter of it (drain below waits for that).
        writer.transport.set_write_buffer_limits(high=limits.max_unsent_answer_bytes)
        answer = self._answer_to(conn)
        try:
            while True:
                while not may_read(
                    limits, writer.transport.get_write_buffer_size(), conn.in_progress
                ):
                    if writer.is_closing():
                        return
                    if conn.in_progress >= limits.max_requests_in_progress:
                        conn.room = loop.create_future()
                        await conn.room
                        conn.room = None
                    else:  # a client that reads its answers slowly: stop reading its requests
                        await writer.drain()
                frame = await self._next_frame(reader, conn)
                conn.in_progress += 1
                # Never awaited here: a slow request (a long-poll LAC read, an fsync) must
                # not hold up the ones behind it. Answers leave in completion order.
                t = serve_frame(self.handler, frame, answer)
                if t is not None:
                    self._handling.add(t)
                    t.add_done_callback(self._handling.discard)
                    # Its first step now, before the next request is read: a request that
                    # answers at once (a read) has its answer counted by may_read above.
                    await asyncio.sleep(0)
        except asyncio.IncompleteReadError:
            pass  # the client hung up
        except FrameError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
            if isinstance(exc, TlsRecordError):
                # A TLS client of this plaintext bookie: its handshake fails naming the cause.
                writer.write(tls_mismatch.PLAINTEXT_PORT_ALERT)
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            log.debug("connection from %s failed: %s", peer, exc)
        except Exception:
            # Here or nowhere: nobody awaits a connection's task.
            log.exception("connection from %s failed", peer)
        finally:
            self._readers.pop(conn, None)
            conn.close()

    async def _next_frame(self, reader: asyncio.StreamReader, conn: _Served) -> bytes:
        head = await reader.read(LENGTH.size)  # returns as soon as a frame begins
        if not head:
            raise asyncio.IncompleteReadError(b"", LENGTH.size)
        loop = asyncio.get_running_loop()
        conn.frame_progress = loop.time()
        if len(head) < LENGTH.size:
            head += await _read_exactly(reader, LENGTH.size - len(head), conn)
        n = _frame_length(head, self.max_frame)
        frame = await _read_exactly(reader, n, conn)
        conn.last_active, conn.frame_progress = conn.frame_progress, None
        return frame

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Tell the client why, then close: after its own hang-up, so that its requests
        already on the way do not turn our close into a reset that loses the notice."""
        peer = writer.get_extra_info("peername")
        # Once per burst: a flood of connections must not become a flood of log lines.
        log.log(
            logging.WARNING if len(self._refused) == 1 else logging.DEBUG,
            "refusing connection from %s: %d connections (bookie setting max_connections)",
            *(peer, self.connections),
        )
        try:
            writer.write(_frame(refusal(self.limits).encode()))
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(min(self.limits.partial_frame_timeout, _REFUSAL_LINGER)):
                while await reader.read(64 * 1024):
                    pass  # whatever the client sent before it heard
        except (TimeoutError, ConnectionError, ssl.SSLError, OSError):
            pass
        finally:
            writer.transport.abort()

    @staticmethod
    def _answer_to(conn: _Served) -> FrameReply:
        writer, peer = conn.writer, conn.peer

        def answer(frame: bytes | None, gone: BaseException | None) -> None:
            conn.answered()
            if gone is not None:
                conn.close()  # the bookie went away: so does its connection
                return
            if frame is None:
                # Garbage: the stream can no longer be trusted to be in step with its frames.
                log.warning("closing connection from %s: undecodable request frame", peer)
                conn.close()
                return
            if writer.is_closing():
                return  # the client went away or we are closing; the answer is lost
            writer.write(_frame(frame))  # one write per frame: frames never interleave

        return answer


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

    def bookie_stopped(self, bookie_id: str) -> None:
        server = self.servers.pop(bookie_id, None)
        if server is not None:
            self._run(server.close())

    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        return await self.client.request(src, bookie_id, req, timeout)

    async def close(self) -> None:
        servers, self.servers = list(self.servers.values()), {}
        await self.client.close()
        await asyncio.gather(*(s.close() for s in servers), return_exceptions=True)
