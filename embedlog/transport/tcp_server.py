"""The bookie side of the TCP transport: one server per bookie, and what a connection
may cost it (embedlog/transport/limits.py; docs/security.md, "Limits").

The server accepts connections itself (embedlog/transport/listener.py), counts them
from their accept, and for each reads frames while the connection's unsent answers and
requests in progress are within bounds, handing each request to the bookie without
waiting for it: answers leave in completion order. A watchdog closes connections that
are idle or stalled in the middle of a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from embedlog.transport import tls_mismatch
from embedlog.transport.framing import LENGTH, MAX_FRAME, TlsRecordError, frame_length
from embedlog.transport.framing import frame as _frame
from embedlog.transport.limits import ConnectionLimits, close_reason, may_read, refusal
from embedlog.transport.listener import accept_forever, listen
from embedlog.transport.server import FrameReply, RequestHandler, serve_frame
from embedlog.wire.messages import FrameError, Response

log = logging.getLogger(__name__)

# How long a refused connection is kept for its client to hear why and hang up, and how
# many are kept so at once (past that, a refused connection is closed without a word).
_REFUSAL_LINGER = 1.0
_MAX_REFUSING = 64


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
                    # Its first step now, before the next request is read: a request whose
                    # task answers at once has its answer counted by may_read above.
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
        frame = await _read_exactly(reader, frame_length(head, self.max_frame), conn)
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
