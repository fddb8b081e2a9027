"""How far recovery reads ahead (``recovery.reads_ahead``): every entry up to the LAC it
started from at once, above it one read doubled with each entry found, never more than
the window. An end just above the LAC, the usual case, costs one read of its write set."""

from __future__ import annotations

import asyncio

import pytest
from test_stragglers import DIGEST, ENSEMBLE, Writer, context

from embedlog.ledger.recovery import read_forward, reads_ahead
from embedlog.wire.codes import StatusCode


@pytest.mark.parametrize(
    ("next_id", "known", "found_beyond", "window", "reads"),
    [
        (0, -1, 0, 16, 1),  # nothing known: one read
        (5, 4, 0, 16, 1),  # the LAC just below: one read
        (5, 4, 1, 16, 2),  # one entry found above the LAC: two
        (5, 4, 3, 16, 8),
        (5, 4, 4, 16, 16),
        (5, 4, 9, 16, 16),  # never past the window
        (5, 4, 60, 16, 16),  # however many were found
        (0, 9, 0, 16, 11),  # ten known entries at once, and one beyond
        (0, 40, 0, 16, 16),  # ... the window at most
        (3, 9, 0, 4, 4),
        (0, -1, 0, 1, 1),  # a window of one reads one at a time
        (0, -1, 5, 1, 1),
    ],
)
def test_reads_ahead(next_id, known, found_beyond, window, reads):
    assert reads_ahead(next_id, known, found_beyond, window) == reads


def asked_entries(existing: int, lac: int, window: int = 16) -> tuple[int, list[int]]:
    """Run the read phase over bookies holding entries 0..existing-1; (the end found,
    the entry ids asked of one bookie, in order)."""
    asked: list[int] = []

    def answer(bookie, eid):
        if bookie == ENSEMBLE[0]:
            asked.append(eid)
        return StatusCode.EOK if eid < existing else StatusCode.ENOENTRY

    async def main() -> int:
        ctx, md = context(answer, window=window)
        return await read_forward(
            ctx, md, ENSEMBLE, DIGEST, b"", Writer(), [], start=-1, lac=lac, flags=0, aborted=""
        )

    return asyncio.run(main()), asked


def test_an_end_at_the_lac_costs_one_read_past_it():
    """Before, a window of 16 reads went out, fifteen of them past the end."""
    end, asked = asked_entries(existing=4, lac=3)
    assert end == 4 and sorted(asked) == [0, 1, 2, 3, 4]


def test_a_tail_above_the_lac_is_read_with_a_doubling_window():
    end, asked = asked_entries(existing=40, lac=-1)
    assert end == 40
    assert sorted(asked) == list(range(len(asked)))  # each entry asked once, in a row
    assert 41 <= len(asked) < 40 + 16  # never more than a window's past the end
    assert asked[:3] == [0, 1, 2]  # one read, then two
