"""entry_id_at's search (embedlog/unbounded/seek.py), over scripted streams: no cluster.

Each stream is a list of timestamps by entry id ("noop" for a takeover's no-op, None for
an entry written before records); the fake reader counts reads, so the tests also show
the search reads about log2(N) batches, not the stream."""

from __future__ import annotations

import asyncio

import pytest

from embedlog.unbounded.seek import PROBE, entry_id_at


def _search(stream, t, first=0):
    reads = []

    async def read(a, b):
        reads.append((a, b))
        return [(i, ts) for i, ts in enumerate(stream[a : b + 1], start=a) if ts != "noop"]

    return asyncio.run(entry_id_at(read, first, len(stream) - 1, t)), reads


@pytest.mark.parametrize(
    ("stream", "t", "expected"),
    [
        ([], 5, 0),  # empty: LAC + 1
        ([1, 2, 3], 0, 0),  # before everything: the first
        ([1, 2, 3], 2, 1),  # an exact hit
        ([1, 2, 3], 2.5, 2),  # between two: the later
        ([1, 2, 3], 4, 3),  # after everything: LAC + 1
        ([1, 2, 2, 2, 3], 2, 1),  # equal timestamps: the first of them
        (["noop", 1, "noop", "noop", 5, 6], 2, 4),  # no-ops are skipped
        (["noop", "noop"], 0, 2),  # only no-ops: none at or after
        ([None, None, 3, 4], 1, 2),  # entries without a timestamp count as older
        ([1] + ["noop"] * 20 + [9], 5, 21),  # a run of no-ops longer than a probe
    ],
)
def test_first_entry_at_or_after(stream, t, expected):
    assert _search(stream, t)[0] == expected


def test_the_search_starts_at_the_first_kept_entry():
    assert _search([1, 2, 3, 4, 5], 0, first=3)[0] == 3


def test_timestamps_that_go_backwards_give_a_boundary():
    # 1 5 2 6: for t=4, entry 1 (5, after 1) and entry 3 (6, after 2) are both boundaries.
    stream = [1, 5, 2, 6]
    found, _ = _search(stream, 4)
    assert found in (1, 3)
    assert stream[found] >= 4 and (found == 0 or stream[found - 1] < 4)


def test_a_million_entries_take_about_log2_reads():
    n = 1_000_000
    stream = list(range(n))
    for t in (0, 1, 123_456, n - 1, n):
        found, reads = _search(stream, t)
        assert found == t
        assert len(reads) <= 21  # log2(1e6) ~ 20 steps of one batch each
        assert all(b - a < PROBE for a, b in reads)
