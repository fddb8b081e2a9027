"""The journal's group commit: a lone record is written at once (it waits for its fsync
and nothing else), records that arrive during an fsync are the next group, and nothing
is reported durable before its own group's fsync has returned."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from harness import KEY, entry

from embedlog.bookie import journal, journal_replay
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.files import AppendFile
from embedlog.bookie.journal import Grouping, grouping
from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request

RECORD = b"S" + bytes(8) + b'{"a": 1}'  # a state record: a kind replay accepts


@pytest.mark.parametrize(
    ("buffered", "group_bytes", "max_group_wait", "decision"),
    [
        (1_000, 512 * 1024, 0.0, Grouping.AT_ONCE),  # the default: never wait for company
        (1, 512 * 1024, 0.0, Grouping.AT_ONCE),
        (512 * 1024, 512 * 1024, 0.0, Grouping.FULL),
        (600_000, 512 * 1024, 0.0, Grouping.FULL),
        (1_000, 512 * 1024, 0.001, Grouping.WAIT_FOR_COMPANY),  # asked for: even alone
        (512 * 1024, 512 * 1024, 0.001, Grouping.FULL),  # a full group never waits
        (0, 512 * 1024, 0.0, Grouping.AT_ONCE),  # a sync() with nothing buffered
    ],
)
def test_grouping_decision(buffered, group_bytes, max_group_wait, decision):
    assert grouping(buffered, group_bytes=group_bytes, max_group_wait=max_group_wait) is decision


def test_the_default_never_waits_for_company():
    assert BookieConfig("b1", Path("/nonexistent")).journal_max_group_wait == 0


class FrozenClockLoop(asyncio.SelectorEventLoop):
    """A loop whose clock never moves: no timer ever fires, so anything that waits for
    time (a group wait) waits forever, and anything that does not is unaffected."""

    def time(self) -> float:
        return 0.0


class CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(1, thread_name_prefix="test-journal")
        self.submitted = 0

    def submit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.submitted += 1
        return super().submit(*args, **kwargs)


def test_a_lone_record_is_written_without_waiting_for_time_to_pass(tmp_path):
    """On a loop whose clock is frozen, a journal that waited for company would never
    write the record; this one hands it to its thread within a few loop turns."""
    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()

    async def scenario() -> tuple[int, dict[Grouping, int]]:
        executor = CountingExecutor()
        j = journal.Journal(config, executor, 0)
        j.start()
        durable = j.append(RECORD)
        assert durable is not None
        for _ in range(10):  # loop turns, not time: the clock does not move
            await asyncio.sleep(0)
        submitted = executor.submitted
        if submitted:
            await durable
        j.crash()
        executor.shutdown()
        return submitted, j.decisions

    loop = FrozenClockLoop()
    try:
        submitted, decisions = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert submitted == 1, "the lone record was held back waiting for company"
    assert decisions[Grouping.AT_ONCE] == 1 and decisions[Grouping.WAIT_FOR_COMPANY] == 0
    assert [p for _lsn, p in journal_replay.Replay(config.journal_dir, 0)] == [RECORD]


def test_records_arriving_during_an_fsync_are_the_next_group_and_wait_for_its_fsync(
    tmp_path, monkeypatch
):
    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()
    in_fsync, release = threading.Event(), threading.Event()
    fsyncs = []
    real_append = AppendFile.append_parts

    def gated_append(self: AppendFile, parts: list[bytes], *, durable: bool = False) -> int:
        offset = real_append(self, parts, durable=durable)
        if durable:  # the group's write and fsync, which lasts until the burst is queued
            fsyncs.append(self.size)
            if len(fsyncs) == 1:
                in_fsync.set()
                release.wait()
        return offset

    monkeypatch.setattr(AppendFile, "append_parts", gated_append)
    burst = [b"S" + bytes(8) + b'{"n": %d}' % i for i in range(9)]

    async def scenario() -> tuple[list[bool], list[bool], journal.Journal]:
        with ThreadPoolExecutor(1) as executor:
            j = journal.Journal(config, executor, 0)
            j.start()
            first = j.append(RECORD)
            await asyncio.get_running_loop().run_in_executor(None, in_fsync.wait)
            later = [j.append(r) for r in burst]
            for _ in range(10):
                await asyncio.sleep(0)
            # The first group's fsync has not returned: nothing is durable yet.
            before = [f.done() for f in (first, *later)]  # type: ignore[union-attr]
            release.set()
            await first  # type: ignore[misc]
            after_first = [f.done() for f in later]  # type: ignore[union-attr]
            await asyncio.gather(*later)  # type: ignore[arg-type]
            await j.close()
            return before, after_first, j

    before, after_first, j = asyncio.run(scenario())
    assert before == [False] * 10
    # The burst was written by a second fsync of its own, never acknowledged by the first.
    assert after_first == [False] * 9
    assert len(fsyncs) == 2 and fsyncs[1] > fsyncs[0]
    assert j.batches == 2 and j.records == 10  # one group of 1, then one of 9
    assert j.metrics.journal_group_records.count == 2
    assert j.decisions[Grouping.AT_ONCE] >= 2 and j.decisions[Grouping.WAIT_FOR_COMPANY] == 0
    assert [p for _lsn, p in journal_replay.Replay(config.journal_dir, 0)] == [RECORD, *burst]


def test_a_lone_add_is_written_at_once_and_a_burst_of_adds_still_groups(harness):
    h = harness()
    h.boot()
    j = h.bookie.journal
    assert h.add(1, 0).status == StatusCode.EOK
    decided = dict(j.decisions)
    batches, records = j.batches, j.records
    assert h.add(1, 1).status == StatusCode.EOK  # one blocking add, nobody else coming
    assert j.decisions[Grouping.AT_ONCE] == decided[Grouping.AT_ONCE] + 1
    assert j.decisions[Grouping.WAIT_FOR_COMPANY] == 0
    assert (j.batches - batches, j.records - records) == (1, 1)

    batches, records = j.batches, j.records

    async def burst() -> list[StatusCode]:
        reqs = [
            Request(OpCode.ADD, next_txn(), 1, eid, master_key=KEY, body=entry(1, eid))
            for eid in range(2, 52)
        ]
        answers = await asyncio.gather(*(h.serve(r) for r in reqs))
        return [a.status for a in answers]

    assert h.run(burst()) == [StatusCode.EOK] * 50
    groups, grouped = j.batches - batches, j.records - records
    assert grouped == 50
    assert grouped / groups > 1, f"{groups} groups for 50 concurrent adds"
    assert j.decisions[Grouping.WAIT_FOR_COMPANY] == 0


def test_an_append_to_a_closed_or_crashed_journal_fails_at_once(tmp_path):
    """A stopped journal hands off no group: an append then is refused on the spot, and
    one made while the final sync waited is failed by close(), never left unanswered."""
    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()

    async def scenario() -> None:
        executor = ThreadPoolExecutor(1)
        j = journal.Journal(config, executor, 0)
        j.start()
        first = j.append(RECORD)
        assert first is not None
        late: list[asyncio.Future[None] | None] = []
        # Appended once the first group is durable, while close()'s sync is in the next
        # group: it makes a third group, which close() stops.
        first.add_done_callback(lambda _f: late.append(j.append(RECORD)))
        await j.close()
        await first
        assert late and late[0] is not None
        assert late[0].done(), "an append made during close() was left unanswered"
        with pytest.raises(OSError, match="closed before this record was durable"):
            late[0].result()
        with pytest.raises(OSError, match="journal is closed"):
            j.append(RECORD)
        executor.shutdown()

        crashed = journal.Journal(config, ThreadPoolExecutor(1), j.lsn)
        crashed.start()
        crashed.crash()
        with pytest.raises(OSError, match="journal is crashed"):
            crashed.append(RECORD)

    asyncio.run(scenario())
