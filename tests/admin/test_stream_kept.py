"""What `embedlog stream list` counts as kept: which stretches retention's marks vouch for
(a table of the pure rule), and the count against every entry read, on a real cluster."""

from __future__ import annotations

import pytest

from embedlog import LocalCluster, Retention
from embedlog.admin_stream_kept import Plan, count, plan
from embedlog.unbounded import layout

T = 1_800_000_000.0  # when a mark's stretch was sealed: plan never looks at it


@pytest.mark.parametrize(
    ("marks", "first_kept", "lac", "expected"),
    [
        # No retention, no marks: every kept id is read.
        ([], 0, 22, Plan(0, 0, ((0, 22),))),
        ([], 0, -1, Plan(0, 0, ())),
        # Whole stretches counted in full vouch for themselves; the open one is read.
        ([(10, 1000, T, 10), (20, 2000, T, 10)], 0, 25, Plan(20, 3000, ((20, 25),))),
        ([(10, 1000, T, 10), (20, 2000, T, 10)], 0, 19, Plan(20, 3000, ())),
        # A takeover's no-op in a stretch (or entries of the earlier term left uncounted):
        # the count is short of the span, so the stretch is read.
        ([(10, 1000, T, 10), (20, 1800, T, 9)], 0, 25, Plan(10, 1000, ((10, 25),))),
        ([(10, 500, T, 5)], 0, 9, Plan(0, 0, ((0, 9),))),
        # A mark stored before marks counted entries vouches for nothing.
        ([(10, 1000, T), (20, 2000, T, 10)], 0, 19, Plan(10, 2000, ((0, 9),))),
        # Trimmed at a mark that is still stored: the first stretch kept is whole.
        (
            [(10, 1000, T, 10), (20, 1000, T, 10), (30, 1000, T, 10)],
            10,
            35,
            Plan(20, 2000, ((30, 35),)),
        ),
        # The mark before the first stretch kept was pruned: where it began is unknown
        # (it may have been trimmed in part), so it is read.
        ([(20, 1000, T, 10), (30, 1000, T, 10)], 10, 35, Plan(10, 1000, ((10, 19), (30, 35)))),
        # Trimmed at a fragment boundary inside a stretch (an ensemble change's).
        ([(10, 1000, T, 10), (20, 1000, T, 10)], 15, 25, Plan(0, 0, ((15, 25),))),
        # A follower's LAC behind a mark's end: only what it sees, read.
        ([(10, 1000, T, 10)], 0, 8, Plan(0, 0, ((0, 8),))),
        # Nothing kept: the first kept id is LAC + 1.
        ([(10, 1000, T, 10)], 10, 9, Plan(0, 0, ())),
    ],
)
def test_which_stretches_the_marks_vouch_for(marks, first_kept, lac, expected):
    assert plan(marks, first_kept, lac) == expected


def _truth(ul) -> tuple[int, int]:
    first, lac = ul.first_entry_id(), ul.read_last_add_confirmed()
    entries = list(ul.entries(first, lac)) if first <= lac else []
    return len(entries), sum(len(e.data) for e in entries)


def test_the_count_is_what_readers_see_with_marks_used_where_they_vouch(tmp_path):
    """A stream with retention by age (its writers record marks, rolling over every 10
    entries), a takeover in its fourth stretch (whose writer, with no entry or byte limit
    to keep, does not count the earlier term's part: that mark falls short) and a trim:
    the count equals every kept entry read, and the whole stretches counted by their marks
    were not read. A stream without retention is read whole."""
    with LocalCluster(3, tmp_path / "c") as cluster:
        ul = cluster.client("w").create_unbounded(
            3, 3, 2, name="metered", retention=Retention(max_age=3600), fragment_max_entries=10
        )
        for i in range(35):
            ul.append(b"x" * (i % 7 + 1))
        ul.close()
        ul = cluster.client("w2").open_unbounded("metered")  # a no-op at 35
        for i in range(22):
            ul.append(b"y" * (i % 5 + 1))
        ul.trim(10)
        ul.close()
        plain = cluster.client("w3").create_unbounded(3, 3, 2, fragment_max_entries=5)
        for _ in range(23):
            plain.append(b"z" * 100)
        plain.close()

        reader = cluster.client("r")
        follower = reader.open_unbounded("metered", takeover=False)
        assert len(layout.marks(follower.metadata)) >= 4
        kept = count(follower)
        assert (kept.entries, kept.bytes) == _truth(follower)
        assert kept.first_kept == 10 and kept.entries == 57 - 10  # 57 appends, a no-op
        assert kept.read < kept.entries  # whole stretches (10..19, 20..29) came from marks
        follower.close()

        follower = reader.open_unbounded(plain.ledger_id, takeover=False)
        kept = count(follower)
        assert (kept.entries, kept.bytes, kept.read) == (23, 2300, 23)
        follower.close()
