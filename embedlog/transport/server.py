"""The bookie side of any transport: one frame in, one frame out."""

from __future__ import annotations

import logging
from typing import Protocol

from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import FrameError, Request, Response

log = logging.getLogger(__name__)


class BookieGoneError(Exception):
    """Raised by a bookie that crashed or stopped mid-request: it gives no answer at all."""


class RequestHandler(Protocol):
    async def handle(self, req: Request) -> Response: ...


async def serve_frame(handler: RequestHandler, frame: bytes) -> bytes | None:
    """Decode, handle and encode. A frame that cannot be decoded gets no answer (it has no
    trustworthy transaction id); the caller's timeout turns that into an unknown outcome."""
    try:
        req = Request.decode(frame)
    except FrameError as exc:
        log.warning("dropping undecodable request frame: %s", exc)
        return None
    try:
        resp = await handler.handle(req)
    except BookieGoneError:
        raise  # no answer: the transport reports the bookie unavailable
    except Exception:  # a bookie must answer, not crash, on a request it chokes on
        log.exception("bookie failed handling %s", req.op.name)
        resp = Response.to(req, StatusCode.EIO)
    return resp.encode()
