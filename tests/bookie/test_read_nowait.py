"""Reads, READ_BATCH, WRITE_LAC and LIST_ENTRIES are answered on the transport's turn,
without a task, unless the answer must wait for a journal record: a fence or term the
read sets, or one another request set that is not durable yet (test_state_durability.py
attacks that rule on both paths). The harness runs every bookie test through both
``handle`` and the frames path, so the answers themselves are compared there; these
tests pin which requests take which path."""

from __future__ import annotations

import asyncio
from typing import Any

from harness import KEY, Harness

from embedlog.transport.server import serve_frame
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import NO_TERM, OpCode, ReadFlags, Request, Response, pack_read_ask

LONG = 3600.0


def served_at_once(h: Harness, req: Request) -> tuple[Any, list[Response]]:
    """Serve ``req`` as a transport does; what serve_frame returned (the task serving it,
    if any) and the answers that came before it returned."""
    answers: list[Response] = []

    def reply(frame: bytes | None, gone: BaseException | None) -> None:
        assert frame is not None and gone is None
        answers.append(Response.decode(frame))

    async def serve() -> tuple[Any, list[Response]]:
        task = serve_frame(h.bookie, req.encode(), reply)
        now = list(answers)
        if task is not None:
            await task
        return task, now

    task, now = h.run(serve())
    assert len(answers) == 1
    return task, now


def booted(tmp_path: Any) -> Harness:
    h = Harness(tmp_path, flush_interval=LONG)
    h.boot()
    assert h.add(1, 0, b"first").status == StatusCode.EOK
    return h


def test_plain_reads_and_requests_that_wait_for_nothing_are_answered_at_once(tmp_path):
    h = booted(tmp_path)
    try:
        asks = [
            (Request(OpCode.READ, 1, 1, 0, master_key=KEY), StatusCode.EOK),
            (Request(OpCode.READ, 2, 1, 5, master_key=KEY), StatusCode.ENOENTRY),
            (Request(OpCode.READ, 3, 9, 0, master_key=KEY), StatusCode.ENOLEDGER),
            (Request(OpCode.READ, 4, 1, -1, master_key=KEY), StatusCode.EOK),
            (
                Request(OpCode.READ_BATCH, 5, 1, 0, body=pack_read_ask(4, 1, 1 << 20)),
                StatusCode.EOK,
            ),
            (Request(OpCode.WRITE_LAC, 6, 1, 0, term=NO_TERM, master_key=KEY), StatusCode.EOK),
            (Request(OpCode.LIST_ENTRIES, 7, 1, -1, master_key=KEY), StatusCode.EOK),
        ]
        for req, status in asks:
            task, now = served_at_once(h, req)
            assert task is None, req.op
            assert [a.status for a in now] == [status], req
    finally:
        h.close()


def test_a_read_that_sets_a_fence_waits_for_its_record_in_a_task(tmp_path):
    h = booted(tmp_path)
    try:
        fence = Request(OpCode.READ, 1, 1, -1, flags=ReadFlags.FENCE, master_key=KEY)
        task, now = served_at_once(h, fence)
        assert task is not None and now == []  # answered only once the fence is durable
        assert task.result().status == StatusCode.EOK
        # The fence is durable now: the next fencing read relies on it at once.
        again = Request(
            OpCode.READ, 2, 1, 5, flags=ReadFlags.FENCE | ReadFlags.RECOVERY, master_key=KEY
        )
        task, now = served_at_once(h, again)
        assert task is None and [a.status for a in now] == [StatusCode.ENOENTRY]
    finally:
        h.close()


def test_a_read_relying_on_a_fence_still_on_its_way_to_disk_waits_in_a_task(tmp_path):
    h = booted(tmp_path)
    replies: list[Response] = []

    def reply(frame: bytes | None, gone: BaseException | None) -> None:
        assert frame is not None
        replies.append(Response.decode(frame))

    async def race() -> None:
        fence = Request(OpCode.READ, 1, 1, -1, flags=ReadFlags.FENCE, master_key=KEY)
        first = serve_frame(h.bookie, fence.encode(), reply)
        recovery = Request(
            OpCode.READ, 2, 1, 5, flags=ReadFlags.FENCE | ReadFlags.RECOVERY, master_key=KEY
        )
        second = serve_frame(h.bookie, recovery.encode(), reply)
        assert first is not None and second is not None and replies == []
        await asyncio.gather(first, second)

    try:
        h.run(race())
        assert sorted(r.status for r in replies) == [StatusCode.EOK, StatusCode.ENOENTRY]
    finally:
        h.close()


def test_a_request_answered_at_once_that_hits_a_bug_is_answered_eio(tmp_path):
    """Not a disk error (those make the bookie read-only): a bug. As from a task, the
    answer is EIO, and nothing escapes into the transport, which would drop the
    connection and every answer still due on it."""
    h = booted(tmp_path)

    def bug(*_args: Any, **_kw: Any) -> Any:
        raise RuntimeError("a bug in the storage")

    try:
        h.bookie.storage.get = bug
        h.bookie.storage.get_run = bug
        for req in [
            Request(OpCode.READ, 1, 1, 0, master_key=KEY),
            Request(OpCode.READ_BATCH, 2, 1, 0, body=pack_read_ask(4, 1, 1 << 20)),
        ]:
            task, now = served_at_once(h, req)
            assert task is None and [a.status for a in now] == [StatusCode.EIO], req.op
    finally:
        h.close()
