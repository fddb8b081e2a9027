"""The in-process transport: bookies in this process, reached through the same frames as TCP.

Every request is encoded, passed through the fault injector and decoded by
the bookie; the reply travels back the same way. The bookie's work on a
request never belongs to the caller's task, so a request the client stopped
waiting for can still arrive (late) and a bookie never sees a request
cancelled halfway. Plain adds are answered by callback from the journal's
group commit, without a task per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from embedlog.errors import BookieUnavailableError
from embedlog.transport.base import Transport
from embedlog.transport.faults import FaultInjector, NetworkFaults
from embedlog.transport.server import RequestHandler, serve_frame
from embedlog.wire.messages import FrameError, Request, Response


class InProcessTransport(Transport):
    def __init__(
        self,
        lookup: Callable[[str], RequestHandler | None],
        faults: NetworkFaults | None = None,
    ) -> None:
        """``lookup(bookie_id)`` returns the serving bookie, or None if it is down."""
        self._lookup = lookup
        self.faults = faults or NetworkFaults()
        self._injector = FaultInjector(self.faults)
        self._serving: set[asyncio.Task[Response]] = set()

    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        return await self._injector.request(src, bookie_id, req, timeout, self._send)

    async def _send(self, bookie_id: str, req: Request) -> asyncio.Future[Response]:
        return self._start(bookie_id, req)

    def send_nowait(
        self, src: str, bookie_id: str, req: Request, timeout: float
    ) -> asyncio.Future[Response]:
        if self.faults.active:
            return super().send_nowait(src, bookie_id, req, timeout)
        loop = asyncio.get_running_loop()
        try:
            answer = self._start(bookie_id, req)
        except BookieUnavailableError as exc:
            failed: asyncio.Future[Response] = loop.create_future()
            failed.set_exception(exc)
            return failed
        self._injector.deadlines.add(answer, req, bookie_id, timeout)
        return answer

    def _start(self, bookie_id: str, req: Request) -> asyncio.Future[Response]:
        bookie = self._lookup(bookie_id)  # looked up at delivery time: after any delay
        if bookie is None:
            raise BookieUnavailableError(f"bookie {bookie_id} is not running")
        # A separate future: the caller may cancel it (it gave up waiting) without
        # cancelling the bookie's work on the request.
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        task = serve_frame(bookie, req.encode(), _Delivery(answer, bookie_id))
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        return answer

    async def close(self) -> None:
        await self._injector.close()
        for task in list(self._serving):
            task.cancel()


class _Delivery:
    """Completes the caller's future from the bookie's answer frame (an object, not a
    closure: see embedlog/bookie/adds.py _AddPlan)."""

    __slots__ = ("answer", "bookie_id")

    def __init__(self, answer: asyncio.Future[Response], bookie_id: str) -> None:
        self.answer = answer
        self.bookie_id = bookie_id

    def __call__(self, frame: bytes | None, gone: BaseException | None) -> None:
        answer = self.answer
        if answer.done():
            return
        if gone is not None:  # the bookie went away mid-request (crash, stop)
            answer.set_exception(
                BookieUnavailableError(f"bookie {self.bookie_id} went away: {gone!r}")
            )
        elif frame is not None:
            try:
                answer.set_result(Response.decode(frame))
            except FrameError as exc:  # a bookie bug; say so rather than time out
                answer.set_exception(BookieUnavailableError(f"bookie {self.bookie_id}: {exc}"))
        # else: an undecodable request gets no answer; the caller times out
