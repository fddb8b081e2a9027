"""The bookie side of any transport: one frame in, one frame out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from embedlog.transport.pause import FrameReply, PauseGate
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import FrameError, Request, Response

log = logging.getLogger(__name__)


class BookieGoneError(Exception):
    """Raised by a bookie that crashed or stopped mid-request: it gives no answer at all."""


class RequestHandler(Protocol):
    async def handle(self, req: Request) -> Response: ...


# What a handler's ``handle_nowait`` passes back: the answer or the exception ``handle``
# would have raised.
Reply = Callable[[Response | BaseException], None]


def handle_as_task(coro: Coroutine[Any, Any, Response], reply: Reply) -> asyncio.Task[Response]:
    """Run a handler coroutine as a task whose outcome goes to ``reply``."""
    task = asyncio.get_running_loop().create_task(coro)

    def done(t: asyncio.Task[Response]) -> None:
        if t.cancelled():
            reply(asyncio.CancelledError())
        else:
            reply(t.exception() or t.result())

    task.add_done_callback(done)
    return task


def serve_frame(
    handler: RequestHandler, frame: bytes, reply: FrameReply
) -> asyncio.Task[Response] | None:
    """Decode, handle, encode; the answer frame goes to ``reply``.

    A frame that cannot be decoded gets no answer (it has no trustworthy transaction
    id); the caller's timeout turns that into an unknown outcome. A handler error is
    answered with EIO: a bookie must answer, not crash, on a request it chokes on.
    Handlers with ``handle_nowait`` (bookies) serve plain adds, and the requests they
    can answer at once, without a task (and may answer before this returns); the task
    serving the request, if there is one, is returned for cancelling at shutdown.
    A paused bookie (its ``pause_gate``, embedlog/transport/pause.py) holds the frame
    instead, until it resumes.
    """
    gate: PauseGate | None = getattr(handler, "pause_gate", None)
    if gate is not None and gate.paused:
        gate.hold(frame, reply)
        return None
    try:
        req = Request.decode(frame)
    except FrameError as exc:
        log.warning("dropping undecodable request frame: %s", exc)
        reply(None, None)
        return None

    answered = _FrameAnswer(req, reply)
    handle_nowait = getattr(handler, "handle_nowait", None)
    if handle_nowait is not None:
        task: asyncio.Task[Response] | None = handle_nowait(req, answered)
        return task
    return handle_as_task(handler.handle(req), answered)  # type: ignore[arg-type]


def resume_serving(handler: RequestHandler, gate: PauseGate) -> None:
    """Resume a paused bookie: serve every request it held, in the order they came."""
    for frame, reply in gate.release():
        task = serve_frame(handler, frame, reply)
        if task is not None:
            gate.track(task)  # type: ignore[arg-type]


class _FrameAnswer:
    """Turns a handler's answer into the transport's frame reply (an object, not a
    closure: see embedlog/bookie/adds.py _AddPlan)."""

    __slots__ = ("reply", "req")

    def __init__(self, req: Request, reply: FrameReply) -> None:
        self.req = req
        self.reply = reply

    def __call__(self, result: Response | BaseException) -> None:
        if isinstance(result, Response):
            self.reply(result.encode(), None)
        elif isinstance(result, BookieGoneError | asyncio.CancelledError):
            self.reply(None, result)  # no answer: the transport reports the bookie unavailable
        else:
            log.error("bookie failed handling %s", self.req.op.name, exc_info=result)
            self.reply(Response.to(self.req, StatusCode.EIO).encode(), None)
