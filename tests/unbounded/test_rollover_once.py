"""Two rollovers asked for at one entry start one fragment there.

Simulator seed 5086 of ``unbounded-streams`` (pinned in tests/sim): a quiet stream's
rollover by age and an append's rollover both aimed at entry 4; the second replaced the
fragment the first had started, with entries 4-9 in flight on it, by a fresh ensemble,
and the acks the writer counts by slot completed them on one copy."""

from __future__ import annotations

import asyncio
import time

from embedlog.unbounded.retention import Retention


def test_a_second_rollover_to_where_a_fragment_starts_does_nothing(make_cluster):
    cluster = make_cluster(6)  # room for a fresh ensemble that leaves out every member
    client = cluster.client("w")
    ul = client.create_unbounded(3, 3, 2)
    for i in range(3):
        ul.append(b"before %d" % i)
    writer = ul.writer
    at = writer.next_entry_id

    async def twice() -> None:
        await asyncio.gather(writer._rollover(at), writer._rollover(at))

    client.runtime.run(twice())
    md = cluster.metadata.read_ledger(ul.ledger_id)
    assert writer.rollovers == 1
    assert md.last_fragment[0] == at
    assert writer.md.last_fragment == md.last_fragment
    # The entries after it go to the fragment the rollover started, and read back.
    ids = [ul.append(b"after %d" % i) for i in range(6)]
    assert ids == list(range(at, at + 6))
    assert [e.data for e in ul.read(at, at + 5)] == [b"after %d" % i for i in range(6)]
    assert cluster.metadata.read_ledger(ul.ledger_id).last_fragment == md.last_fragment


def test_an_append_during_a_rollover_by_age_waits_for_it_instead_of_asking_again(make_cluster):
    """The rollover by age marks itself under way, as an append's does: an append that
    comes while it waits for the fragment's entries to be on their whole write sets waits
    for the new fragment; it does not ask for a rollover at the same entry (seed 5086
    began so)."""
    cluster = make_cluster(6)
    client = cluster.client("w")
    ul = client.create_unbounded(3, 3, 2, retention=Retention(max_age=4.0))  # rolls at 1 s
    writer = ul.writer
    asked: list[int] = []
    start = writer._start_rollover

    def spy(at: int) -> None:
        asked.append(at)
        start(at)

    writer._start_rollover = spy  # type: ignore[method-assign]
    ul.append(b"a0")
    slow = ul.metadata.last_fragment[1][0]
    cluster.network.delay("w", slow, 3.0)  # a1 is acknowledged, and on its write set later
    assert ul.append(b"a1") == 1
    while not asked:  # the quiet stream's age tick asks for the rollover at 2
        time.sleep(0.01)
    assert asked == [2] and writer.rollovers == 0 and writer.stream.replicating
    later = ul.append_async(b"a2")  # comes while the rollover waits for a1's third copy
    assert later.result() == 2
    assert asked == [2], f"rollovers asked twice at one entry: {asked}"
    assert writer.rollovers == 1 and ul.metadata.last_fragment[0] == 2
    assert [e.data for e in ul.read(0, 2)] == [b"a0", b"a1", b"a2"]
