"""The transport interface: how a client's request reaches one bookie and its answer comes back.

A transport never turns a lost message into a negative answer: a request
that gets no reply raises BKTimeoutError, an unreachable bookie raises
BookieUnavailableError. Both mean "unknown" to the protocol.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
from collections.abc import Callable

from embedlog.wire.messages import Request, Response

_txn_ids = itertools.count(1)

# Called with a request's answer (its future, done) once there is one: the writer's
# AnswerFor (embedlog/ledger/answers.py).
Then = Callable[["asyncio.Future[Response]"], None]


def next_txn() -> int:
    return next(_txn_ids)


class Transport(abc.ABC):
    @abc.abstractmethod
    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        """Send ``req`` from client ``src`` to ``bookie_id``; wait at most ``timeout`` seconds."""

    def send_nowait(
        self, src: str, bookie_id: str, req: Request, timeout: float, then: Then | None = None
    ) -> asyncio.Future[Response]:
        """``request`` as a future, for callers that take callbacks (the writer's hot path).
        ``then`` is called with the future once it is done, as its done callback; a
        transport that has the answer on the loop may call it right there instead, a loop
        turn sooner (in-process).

        Transports override this to skip a coroutine and task per request.
        """
        fut = asyncio.ensure_future(self.request(src, bookie_id, req, timeout))
        if then is not None:
            fut.add_done_callback(then)
        return fut

    async def close(self) -> None:
        """Release connections."""
