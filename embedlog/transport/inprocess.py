"""The in-process transport: bookies in this process, reached through the same frames as TCP.

Every request is encoded, passed through the fault injector and decoded by
the bookie; the reply travels back the same way. The bookie's work on a
request never belongs to the caller's task, so a request the client stopped
waiting for can still arrive (late) and a bookie never sees a request
cancelled halfway. Plain adds are answered by callback from the journal's
group commit, without a task per request, and the writer's callback for the answer
(``send_nowait``'s ``then``) is called right there, not a loop turn later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from embedlog.errors import BookieUnavailableError
from embedlog.transport.base import Then, Transport
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
        return self._start(bookie_id, req)[0]

    def send_nowait(
        self, src: str, bookie_id: str, req: Request, timeout: float, then: Then | None = None
    ) -> asyncio.Future[Response]:
        if self.faults.active:
            return super().send_nowait(src, bookie_id, req, timeout, then)
        loop = asyncio.get_running_loop()
        try:
            answer, delivery = self._start(bookie_id, req)
        except BookieUnavailableError as exc:
            failed: asyncio.Future[Response] = loop.create_future()
            failed.set_exception(exc)
            if then is not None:
                failed.add_done_callback(then)
            return failed
        self._injector.deadlines.add(answer, req, bookie_id, timeout)
        if then is not None:
            # A done callback for whatever completes the answer other than the bookie's
            # answer made later (a deadline, an answer made during the send itself, as a
            # refusal is): a loop turn later, as the writer's callbacks always were.
            answer.add_done_callback(then)
            delivery.then = then
        return answer

    def _start(self, bookie_id: str, req: Request) -> tuple[asyncio.Future[Response], _Delivery]:
        bookie = self._lookup(bookie_id)  # looked up at delivery time: after any delay
        if bookie is None:
            raise BookieUnavailableError(f"bookie {bookie_id} is not running")
        # A separate future: the caller may cancel it (it gave up waiting) without
        # cancelling the bookie's work on the request.
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        delivery = _Delivery(answer, bookie_id)
        task = serve_frame(bookie, req.encode(), delivery)
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        return answer, delivery

    async def close(self) -> None:
        await self._injector.close()
        for task in list(self._serving):
            task.cancel()


class _Delivery:
    """Completes the caller's future from the bookie's answer frame (an object, not a
    closure: see embedlog/bookie/adds.py _AddPlan), and calls the caller's ``then`` with
    it at once: an add's answer is made on the loop by the journal's callback, and its
    writer counts it in the same turn instead of the next (one loop turn on the path of
    every acknowledgement, measured in docs/performance.md)."""

    __slots__ = ("answer", "bookie_id", "then")

    def __init__(self, answer: asyncio.Future[Response], bookie_id: str) -> None:
        self.answer = answer
        self.bookie_id = bookie_id
        # Set once the send has returned: an answer made during the send (a refusal)
        # goes through the done callback, never into the writer while it is sending.
        self.then: Then | None = None

    def __call__(self, frame: bytes | None, gone: BaseException | None) -> None:
        answer = self.answer
        if answer.done():
            return
        if gone is not None or frame is None:
            if gone is not None:
                # The bookie went away mid-request (a crash, a stop): its writers hear it
                # by their done callbacks, after the bookie's stop, not inside it.
                answer.set_exception(
                    BookieUnavailableError(f"bookie {self.bookie_id} went away: {gone!r}")
                )
            return  # else an undecodable request: no answer, the caller times out
        then = self.then
        if then is not None:
            answer.remove_done_callback(then)  # called below instead
        try:
            answer.set_result(Response.decode(frame))
        except FrameError as exc:  # a bookie bug; say so rather than time out
            answer.set_exception(BookieUnavailableError(f"bookie {self.bookie_id}: {exc}"))
        if then is not None:
            then(answer)
