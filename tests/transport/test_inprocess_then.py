"""The in-process transport calls the writer's ``then`` with an answer in the same loop
turn the bookie makes it (not a turn later through a done callback), and exactly once,
whatever completes the answer: the bookie's later answer, an answer made during the send,
a deadline, or the bookie going away."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from embedlog.errors import BKTimeoutError, BookieUnavailableError
from embedlog.transport.inprocess import InProcessTransport
from embedlog.transport.server import BookieGoneError
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, Response


class HeldBookie:
    """Answers nothing during the send; the test answers later through ``replies``
    (as the journal's callback does), or at once when ``at_once`` is set (a refusal)."""

    def __init__(self, at_once: bool = False) -> None:
        self.at_once = at_once
        self.replies: list[tuple[Request, Any]] = []

    def handle_nowait(self, req: Request, reply: Any) -> None:
        if self.at_once:
            reply(Response.to(req, StatusCode.EFENCED))
        else:
            self.replies.append((req, reply))

    async def handle(self, req: Request) -> Response:  # pragma: no cover - not reached
        raise AssertionError("adds are served without a task")


def add() -> Request:
    return Request(OpCode.ADD, 7, 3, 0, 0, 0, 0, b"key", b"body")


class Then:
    def __init__(self) -> None:
        self.calls: list[asyncio.Future[Response]] = []

    def __call__(self, fut: asyncio.Future[Response]) -> None:
        self.calls.append(fut)


def run(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_an_answer_made_later_reaches_then_in_the_same_turn_and_once():
    bookie, then = HeldBookie(), Then()

    async def scenario() -> None:
        transport = InProcessTransport(lambda _b: bookie)  # type: ignore[arg-type, return-value]
        fut = transport.send_nowait("c", "b1", add(), 30.0, then)
        assert not then.calls
        req, reply = bookie.replies.pop()
        reply(Response.to(req, StatusCode.EOK, entry_id=0))
        # No loop turn has passed: the writer's callback ran inside the answer.
        assert then.calls == [fut] and fut.result().status == StatusCode.EOK
        for _ in range(3):
            await asyncio.sleep(0)
        assert then.calls == [fut]  # not a second time from a done callback
        await transport.close()

    run(scenario)


def test_an_answer_made_during_the_send_reaches_then_a_turn_later():
    bookie, then = HeldBookie(at_once=True), Then()

    async def scenario() -> None:
        transport = InProcessTransport(lambda _b: bookie)  # type: ignore[arg-type, return-value]
        fut = transport.send_nowait("c", "b1", add(), 30.0, then)
        # Never into the writer while it is still sending.
        assert fut.done() and not then.calls
        await asyncio.sleep(0)
        assert then.calls == [fut] and fut.result().status == StatusCode.EFENCED
        await asyncio.sleep(0)
        assert len(then.calls) == 1
        await transport.close()

    run(scenario)


@pytest.mark.parametrize("how", ["deadline", "gone", "down"])
def test_other_outcomes_reach_then_once_by_the_done_callback(how):
    bookie, then = HeldBookie(), Then()

    async def scenario() -> None:
        transport = InProcessTransport(
            lambda _b: None if how == "down" else bookie  # type: ignore[arg-type, return-value]
        )
        fut = transport.send_nowait("c", "b1", add(), 0.01, then)
        if how == "gone":
            req, reply = bookie.replies.pop()
            reply(BookieGoneError("stopping"))
            assert not then.calls  # after the bookie's stop, not inside it
        while not then.calls:
            await asyncio.sleep(0.005)
        if how == "deadline":
            with pytest.raises(BKTimeoutError):
                fut.result()
            req, reply = bookie.replies.pop()
            reply(Response.to(req, StatusCode.EOK, entry_id=0))  # too late: ignored
        else:
            with pytest.raises(BookieUnavailableError):
                fut.result()
        await asyncio.sleep(0.02)
        assert then.calls == [fut]
        await transport.close()

    run(scenario)
