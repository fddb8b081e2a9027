"""Recovery and takeover requests still running after their decision (stragglers): a
failure they meet later is retrieved where it is decided, never left to asyncio's "Task
exception was never retrieved" (tests/escaped_errors.py fails the suite on that)."""

from __future__ import annotations

import asyncio
import gc
import time
from types import SimpleNamespace

import pytest

from embedlog.errors import InvalidTermError, LedgerRecoveryError
from embedlog.ledger.quorum import Decision
from embedlog.ledger.recovery import read_forward, recovery_read, until_covered
from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request, Response

LID = 5
ENSEMBLE = ("b1", "b2", "b3")
DIGEST = Digester(DigestType.CRC32C)


def unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the loops' exception handler reported (after collecting dropped tasks)."""
    gc.collect()
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


class FakeBookies:
    """``ctx.bookies``: each bookie answers at once with what ``answer(bookie, entry)`` says."""

    def __init__(self, answer):
        self.answer = answer

    async def call(self, bookie, op, lid, eid, **kw):
        await asyncio.sleep(0)
        status = self.answer(bookie, eid)
        body = DIGEST.pack(lid, eid, -1, b"x") if status == StatusCode.EOK else b""
        return Response.to(Request(op, 1, lid, eid), status, entry_id=eid, body=body)

    def call_nowait(self, bookie, op, lid, eid, *, then=None, **kw):
        answer = asyncio.ensure_future(self.call(bookie, op, lid, eid, **kw))
        if then is not None:
            answer.add_done_callback(then)
        return answer


def context(answer, window=1):
    ctx = SimpleNamespace(
        bookies=FakeBookies(answer),
        recovery_read_window=window,
        unsafe_unknown_as_negative=False,
        unsafe_recovery_ignores_term=False,
    )
    md = SimpleNamespace(ledger_id=LID, write_quorum=3, ack_quorum=2)
    return ctx, md


def test_a_fence_straggler_that_fails_after_coverage(caplog):
    async def ask(bookie):
        if bookie == "b3":
            await asyncio.sleep(0.05)
            raise InvalidTermError("b3 has a higher term")
        return 1

    async def main():
        covered, answers, _unknown = await until_covered(ENSEMBLE, len(ENSEMBLE), 2, ask)
        assert covered and answers == [1, 1]
        await asyncio.sleep(0.1)  # the straggler's request lands, and fails

    asyncio.run(main())
    assert unhandled(caplog) == []


def test_a_straggler_that_fails_of_a_bug_is_logged_not_dropped(caplog):
    async def ask(bookie):
        if bookie == "b3":
            await asyncio.sleep(0.05)
            raise ValueError("not an answer: a bug")
        return 1

    async def main():
        assert (await until_covered(ENSEMBLE, len(ENSEMBLE), 2, ask))[0]
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert unhandled(caplog) == []
    [record] = [r for r in caplog.records if r.name == "embedlog.ledger.recovery"]
    assert record.levelname == "ERROR" and "not an answer: a bug" in caplog.text


def test_the_other_asks_when_one_aborts_coverage(caplog):
    async def ask(bookie):
        await asyncio.sleep(0.01 if bookie == "b1" else 0.05)
        raise InvalidTermError(f"{bookie} has a higher term")

    async def main():
        with pytest.raises(InvalidTermError, match="b1"):
            await until_covered(ENSEMBLE, len(ENSEMBLE), 2, ask)
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert unhandled(caplog) == []


def test_a_recovery_read_answer_that_fails_after_the_decision(caplog):
    """b1's positive answer decides the entry; b3's refusal came in the same instant."""

    def answer(bookie, eid):
        return StatusCode.EINVALIDTERM if bookie == "b3" else StatusCode.EOK

    async def main():
        ctx, md = context(answer)
        decision, body = await recovery_read(ctx, md, ENSEMBLE, DIGEST, b"", 0, term=2)
        assert decision is Decision.YES and body is not None

    asyncio.run(main())
    assert unhandled(caplog) == []


async def read_forward_from_the_start(answer) -> int:
    """The read phase of a takeover in term 2 over fake bookies that answer ``answer``."""
    ctx, md = context(answer, window=4)
    return await read_forward(
        ctx, md, ENSEMBLE, DIGEST, b"", None, [], start=-1, lac=-1, term=2, flags=0, aborted=""
    )


def test_a_read_ahead_that_fails_after_the_end_was_found(caplog):
    """Entry 0 is unrecoverable: the end. Entry 1's read, run ahead, was refused."""

    def answer(bookie, eid):
        return StatusCode.ENOENTRY if eid == 0 else StatusCode.EINVALIDTERM

    assert asyncio.run(read_forward_from_the_start(answer)) == 0
    assert unhandled(caplog) == []


def test_read_aheads_when_the_read_phase_aborts(caplog):
    def answer(bookie, eid):
        return StatusCode.EUNKNOWN if eid == 0 else StatusCode.EINVALIDTERM

    with pytest.raises(LedgerRecoveryError):
        asyncio.run(read_forward_from_the_start(answer))
    assert unhandled(caplog) == []


def test_a_recovery_whose_write_back_fails(cluster, caplog):
    """The entries written back fail with the writer; recovery raises that error, and the
    futures of the write-backs carry it too."""
    w = cluster.client("w", explicit_lac_interval=0)  # the last entry stays above the LAC
    wh = w.create_ledger(3, 3, 2)
    for i in range(3):
        wh.add(b"e%d" % i)
    rec = cluster.client("rec", request_timeout=0.3, add_entry_quorum_timeout=0.5)
    for b in cluster.bookie_ids[1:]:
        cluster.network.drop_next("rec", b, "recovery_add", count=1000)
    with pytest.raises(LedgerRecoveryError, match="writing recovered entries back failed"):
        rec.open_ledger(wh.ledger_id)
    cluster.network.heal()
    rec.close()
    assert unhandled(caplog) == []


def test_a_takeover_whose_straggler_fails_after_coverage(cluster, caplog):
    """The slowest bookie of the last fragment holds a higher term: its refusal of the new
    term comes after the other two covered the ensemble, and the takeover goes on until
    its write-back meets the same refusal."""
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(3):
        ul.append(b"a%d" % i)
    slow = cluster.bookie_ids[2]
    raise_term = Request(OpCode.READ, next_txn(), ul.ledger_id, -1, 0, 9, 0, master_key(b""))
    resp = cluster.runtime.run(cluster.transport.request("raw", slow, raise_term, 5.0))
    assert resp.status == StatusCode.EOK
    cluster.network.delay("t", slow, 0.3)
    with pytest.raises(InvalidTermError):
        cluster.client("t").open_unbounded(ul.ledger_id)
    time.sleep(0.5)  # every delayed request has been answered
    assert unhandled(caplog) == []


class WrittenBack:
    """A writer that takes every write-back at once."""

    def __init__(self):
        self.ids = []

    def add_packed(self, eid, _data):
        self.ids.append(eid)
        done = asyncio.get_running_loop().create_future()
        done.set_result(eid)
        return done


def read_forward_held(present: int, last_held: int | None) -> tuple[int, list[int], list[int]]:
    """A read phase over entries 0..``present``, told that the fenced bookies hold up to
    ``last_held``; (its end, the ids read, the ids written back)."""
    asked: list[int] = []

    def answer(bookie, eid):
        asked.append(eid)
        return StatusCode.EOK if eid <= present else StatusCode.ENOENTRY

    async def main():
        ctx, md = context(answer, window=16)
        writer = WrittenBack()
        end = await read_forward(
            ctx,
            md,
            ENSEMBLE,
            DIGEST,
            b"",
            writer,
            [],
            start=-1,
            lac=-1,
            term=2,
            flags=0,
            aborted="",
            last_held=last_held,
        )
        return end, sorted(set(asked)), writer.ids

    return asyncio.run(main())


def test_reads_run_ahead_only_up_to_the_last_entry_the_fenced_bookies_hold():
    assert len(read_forward_held(2, last_held=None)[1]) >= 16  # the whole window, past 3
    end, asked, written = read_forward_held(2, last_held=2)
    assert (end, asked, written) == (3, [0, 1, 2, 3], [0, 1, 2])


def test_an_entry_past_the_last_held_is_still_found_one_at_a_time():
    """Entry 3 is on bookies that did not answer the fence: the hint is no bound."""
    end, asked, written = read_forward_held(3, last_held=1)
    assert (end, asked, written) == (4, [0, 1, 2, 3, 4], [0, 1, 2, 3])
