"""Retention: the writer trims whole fragments beyond a stream's limits, held back by cursors."""

from __future__ import annotations

import pytest
from unbounded_helpers import wait_until

from embedlog import Retention
from embedlog.unbounded.retention import (
    Rollover,
    SegmentCounter,
    held_back,
    prune,
    rollover_for,
    trim_point,
)

IDLE = 30.0


def test_retention_refuses_nonsense():
    for bad in [dict(max_entries=0), dict(max_bytes=-1), dict(max_age=0), dict(max_age=-2.0)]:
        with pytest.raises(ValueError):
            Retention(**bad)
    with pytest.raises(TypeError):
        Retention(max_entries="10")


def test_rollover_for():
    assert rollover_for(None, 7) == Rollover(7)
    assert rollover_for(Retention(1000, 4000, 60.0), None) == Rollover(250, 1000, 15.0)
    assert rollover_for(Retention(1000), 50) == Rollover(50)
    assert rollover_for(Retention(2), None) == Rollover(1)


MARKS = [(100, 1000, 10.0), (200, 1000, 20.0), (300, 1000, 30.0)]  # stored before counts
COUNTED = [(100, 1000, 10.0, 40), (200, 1000, 20.0, 100), (300, 1000, 30.0, 100)]


@pytest.mark.parametrize(
    ("retention", "marks", "open_bytes", "open_entries", "floor", "expected"),
    [
        # ids 0..349: three sealed stretches of 100 ids, 50 in the open one
        (Retention(max_entries=150), MARKS, 0, 50, None, 200),
        (Retention(max_entries=151), MARKS, 0, 50, None, 100),  # at least the limit stays
        (Retention(max_entries=1000), MARKS, 0, 50, None, 0),
        # counted marks: the first stretch holds 40 entries readers see (60 no-op ids)
        (Retention(max_entries=251), COUNTED, 0, 50, None, 0),
        (Retention(max_entries=250), COUNTED, 0, 50, None, 100),
        (Retention(max_entries=150), COUNTED, 0, 50, None, 200),
        (Retention(max_age=15.0), MARKS, 0, 50, None, 100),  # sealed at 10: older than 16
        (Retention(max_age=5.0), MARKS, 0, 50, None, 200),  # 300's sealed at 30: young
        # Kafka's retention.bytes: a stretch goes only while what stays still holds the limit
        (Retention(max_bytes=2500), MARKS, 400, 50, None, 0),  # 3400 - 1000 < 2500
        (Retention(max_bytes=2400), MARKS, 400, 50, None, 100),
        (Retention(max_bytes=1400), MARKS, 400, 50, None, 200),
        (Retention(max_bytes=3500), MARKS, 400, 50, None, 0),
        # beyond any limit goes
        (Retention(max_entries=1000, max_age=5.0), MARKS, 0, 50, None, 200),
        # never above a cursor (floor: lowest position + 1)
        (Retention(max_age=5.0), MARKS, 0, 50, 151, 151),
        (Retention(max_age=5.0), MARKS, 0, 50, 0, 0),
    ],
)
def test_trim_point(retention, marks, open_bytes, open_entries, floor, expected):
    assert trim_point(retention, marks, 0, open_bytes, open_entries, 31.0, floor) == expected


def test_what_a_cursor_holds_back():
    # limits alone would trim below 300, a cursor stops it at 100
    assert held_back(COUNTED, 0, 100, 300) == (200, 2000)
    assert held_back(COUNTED, 0, 300, 300) == (0, 0)


def test_prune():
    assert prune(MARKS, 200) == MARKS[2:]
    assert prune(MARKS, 0) == MARKS


class Now:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t


# What a mark records as the time of its stretch, at seal time 1000 + 50: the newest
# entry's write as far as the writer knows (its own ack; else the last earlier-term
# entry's record time; else the seal).
@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], 1050.0),  # nothing counted (a stretch sealed by age): the seal
        ([("own", 10.0)], 1010.0),  # this writer's last append, acknowledged at 1010
        ([("earlier", 900.0), ("earlier", 905.0)], 905.0),  # a quiet takeover: the newest
        ([("earlier", 905.0), ("earlier", 900.0)], 905.0),  # packed out of id order
        ([("earlier", 905.0), ("own", 20.0)], 1020.0),  # the writer appended after them
        ([("earlier", 905.0), ("earlier", None)], 1050.0),  # the newest has no time
        ([("earlier", 2000.0)], 1050.0),  # a clock ahead of this one: never after now
        ([("dated", 905.0)], 905.0),  # max_age alone: read for its time, not counted
    ],
)
def test_a_mark_dates_its_stretch_by_its_newest_entry(steps, expected):
    now = Now()
    seg = SegmentCounter(Rollover(None, None, 10.0), inherited=True, clock=now)
    for kind, at in steps:
        if kind == "own":
            now.t = 1000.0 + at
            seg.count(1)
        elif kind == "earlier":
            seg.count(1, earlier=True, written_at=at)
        else:
            seg.written(at)
    now.t = 1050.0
    assert seg.stamp() == expected
    assert seg.seal(7)[2] == expected
    assert seg.stamp() == 1050.0  # the next stretch starts empty


def _first(client, lid: int) -> int:
    return min(client.ledger_metadata(lid).ensembles)


def test_max_entries_trims_whole_fragments_as_the_stream_grows(make_cluster):
    cluster = make_cluster(4)
    c = cluster.client("w")
    ul = c.create_unbounded(3, 3, 2, retention=Retention(max_entries=100))
    for i in range(500):
        ul.append(b"%d" % i)
    assert ul.writer.fragment_max_entries == 25
    # The last rollover (at 475, LAC 474) trims the fragments below 475 - 100 = 375.
    wait_until(lambda: _first(c, ul.ledger_id) >= 375)
    assert _first(c, ul.ledger_id) == 375
    assert [e.entry_id for e in ul.read(375, 499)] == list(range(375, 500))


def test_retention_stops_at_a_cursor_unless_it_overrides_cursors(make_cluster):
    cluster = make_cluster(4)
    c = cluster.client("w")
    held = c.create_unbounded(3, 3, 2, retention=Retention(max_entries=40))
    free = c.create_unbounded(
        3, 3, 2, retention=Retention(max_entries=40), retention_overrides_cursors=True
    )
    for ul in (held, free):
        for i in range(50):
            ul.append(b"%d" % i)
        ul.commit("slow", 49)
        ul.commit("slower", 59 - 50)  # position 9: entries up to 9 consumed
        for i in range(50, 300):
            ul.append(b"%d" % i)
    wait_until(lambda: _first(c, free.ledger_id) >= 250)
    # The same trims ran on the held stream (its rollovers happened too), but stopped at
    # the lowest cursor's position + 1 = 10: only whole fragments below it could go.
    assert held.writer.rollovers == free.writer.rollovers
    assert _first(c, held.ledger_id) <= 10
    follower = cluster.client("f").open_unbounded(free.ledger_id, takeover=False)
    tail = follower.tail(cursor="slower", timeout=0)
    ids = [e.entry_id for e in tail]
    assert ids[0] == _first(c, free.ledger_id) and ids[-1] == 299
    assert tail.skipped == ids[0] - 10  # the overriding retention trimmed past the cursor


def test_max_bytes_keeps_about_that_many_payload_bytes(make_cluster):
    cluster = make_cluster(4)
    c = cluster.client("w")
    ul = c.create_unbounded(3, 3, 2, retention=Retention(max_bytes=40_000))
    for _ in range(400):
        ul.append(b"x" * 1000)
    wait_until(lambda: _first(c, ul.ledger_id) >= 400 - 60)  # 40 KB + a quarter
    assert _first(c, ul.ledger_id) <= 400 - 36  # about 40 entries of 1 KB (and headers)


def test_a_quiet_stream_ages_out(make_cluster):
    """Ten entries, then silence: the writer rolls over by age to an empty fragment, and
    once the sealed stretch is older than max_age the entries are trimmed; a follower
    starting from 0 then skips them."""
    cluster = make_cluster(4)
    c = cluster.client("w")
    ul = c.create_unbounded(3, 3, 2, retention=Retention(max_age=0.4))
    for i in range(10):
        ul.append(b"%d" % i)
    wait_until(lambda: _first(c, ul.ledger_id) == 10)
    follower = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    tail = follower.tail(0, timeout=0)
    assert list(tail) == [] and tail.skipped == 10
    assert ul.append(b"after") == 10
    assert next(follower.tail(0, timeout=IDLE)).data == b"after"


def test_retention_is_kept_in_the_metadata_for_the_next_term(make_cluster):
    cluster = make_cluster(4)
    first = cluster.client("w1").create_unbounded(3, 3, 2, retention=Retention(max_entries=40))
    first.append(b"x")
    second = cluster.client("w2").open_unbounded(first.ledger_id)
    assert second.writer.retention == Retention(max_entries=40)
    for i in range(200):
        second.append(b"%d" % i)
    c = cluster.client("r")
    wait_until(lambda: _first(c, second.ledger_id) >= 150)
