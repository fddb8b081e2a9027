"""The in-process transport: bookies in this process, reached through the same frames as TCP.

Every request is encoded, passed through the fault injector and decoded by
the bookie; the reply travels back the same way. Delivery runs as its own
task, so a request the client stopped waiting for can still arrive (late)
and a bookie never sees a request cancelled halfway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from embedlog.errors import BKTimeoutError, BookieUnavailableError
from embedlog.transport.base import Transport
from embedlog.transport.faults import NetworkFaults
from embedlog.transport.server import RequestHandler, serve_frame
from embedlog.wire.messages import Request, Response


class InProcessTransport(Transport):
    def __init__(
        self,
        lookup: Callable[[str], RequestHandler | None],
        faults: NetworkFaults | None = None,
    ) -> None:
        """``lookup(bookie_id)`` returns the serving bookie, or None if it is down."""
        self._lookup = lookup
        self.faults = faults or NetworkFaults()
        self._inflight: set[asyncio.Task[None]] = set()

    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[bytes] = loop.create_future()
        # An answer that arrives after the caller gave up is nobody's business.
        reply.add_done_callback(lambda f: f.cancelled() or f.exception())
        frame = req.encode()
        faults = self.faults
        if faults.is_blocked(src, bookie_id) or faults.take_drop(src, bookie_id, req.kind):
            pass  # lost on the way: nobody will ever answer
        else:
            task = loop.create_task(self._deliver(src, bookie_id, frame, reply))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        try:
            answer = await asyncio.wait_for(asyncio.shield(reply), timeout)
        except TimeoutError:
            raise BKTimeoutError(
                f"{req.kind} {req.ledger_id}:{req.entry_id} to {bookie_id}: no answer in {timeout}s"
            ) from None
        return Response.decode(answer)

    async def _deliver(
        self, src: str, bookie_id: str, frame: bytes, reply: asyncio.Future[bytes]
    ) -> None:
        delay = self.faults.delay_for(src, bookie_id)
        if delay:
            await asyncio.sleep(delay)
        bookie = self._lookup(bookie_id)
        if bookie is None:
            if not reply.done():
                reply.set_exception(BookieUnavailableError(f"bookie {bookie_id} is not running"))
            return
        try:
            answer = await serve_frame(bookie, frame)
        except Exception as exc:  # the bookie went away mid-request (crash)
            if not reply.done():
                reply.set_exception(
                    BookieUnavailableError(f"bookie {bookie_id} went away: {exc}")
                )
            return
        if answer is None or self.faults.is_blocked(src, bookie_id):
            return  # reply lost
        if not reply.done():
            reply.set_result(answer)

    async def close(self) -> None:
        for task in list(self._inflight):
            task.cancel()
