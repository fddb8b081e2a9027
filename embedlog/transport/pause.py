"""A paused bookie: it takes no request until resumed, and forgets none.

What a client sees of a bookie process stopped with SIGSTOP: connections stay up,
requests get no answer (the client's timeout makes them unknown outcomes), and once
the process continues it serves every request it was sent, in order, answering late.
Both transports hand every request frame to ``serve_frame``, which asks the bookie's
gate first, so pausing works the same in-process and over TCP.

A request the bookie was already working on when it was paused is finished and
answered (as if the pause had come just after it). The bookie's own background work
(flushes, BP-46 repair) goes on; only answering stops.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

# What a transport learns about one request frame: the answer frame, None for "no answer
# ever" (an undecodable frame), or the exception that means the bookie went away. Defined
# here, below server.py (which serves frames through a gate), since a gate holds replies.
FrameReply = Callable[[bytes | None, BaseException | None], None]


class PauseGate:
    __slots__ = ("_held", "_serving", "paused")

    def __init__(self) -> None:
        self.paused = False
        self._held: deque[tuple[bytes, FrameReply]] = deque()
        self._serving: set[asyncio.Task[object]] = set()

    def hold(self, frame: bytes, reply: FrameReply) -> None:
        self._held.append((frame, reply))

    @property
    def held(self) -> int:
        """Requests waiting for the bookie to resume."""
        return len(self._held)

    def pause(self) -> None:
        self.paused = True

    def release(self) -> list[tuple[bytes, FrameReply]]:
        """Unpause; the held requests, in the order they arrived, for the caller to serve
        (``embedlog.transport.server.resume_serving``)."""
        self.paused = False
        held, self._held = list(self._held), deque()
        return held

    def track(self, task: asyncio.Task[object]) -> None:
        """A task serving a released request: cancelled if the bookie goes away."""
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    def drop(self, gone: BaseException) -> None:
        """The bookie stopped or crashed while paused: no held request will be answered."""
        self.paused = False
        held, self._held = self._held, deque()
        for _frame, reply in held:
            reply(None, gone)
        for task in list(self._serving):
            task.cancel()
