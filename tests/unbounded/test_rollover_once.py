"""Two rollovers asked for at one entry start one fragment there.

Simulator seed 5086 of ``unbounded-streams`` (pinned in tests/sim): a quiet stream's
rollover by age and an append's rollover both aimed at entry 4; the second replaced the
fragment the first had started, with entries 4-9 in flight on it, by a fresh ensemble,
and the acks the writer counts by slot completed them on one copy."""

from __future__ import annotations

import asyncio


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
