"""The deduplication window's bookkeeping (embedlog/unbounded/dedup.py), by script."""

from __future__ import annotations

from embedlog.unbounded.dedup import DedupWindow


def test_an_id_is_found_within_the_window_and_forgotten_after():
    w = DedupWindow(window=10.0)
    w.record(b"a", 5, appended_at=100.0)
    assert w.find(b"a", now=109.9) == 5
    assert w.find(b"a", now=110.0) == 5  # the window's edge still counts
    assert w.find(b"a", now=110.1) is None
    assert len(w) == 0


def test_the_first_append_of_an_id_counts():
    w = DedupWindow(window=10.0)
    w.record(b"a", 5, appended_at=100.0)
    w.record(b"a", 9, appended_at=101.0)
    assert w.find(b"a", now=101.0) == 5


def test_pruning_keeps_what_is_inside_the_window():
    w = DedupWindow(window=10.0)
    for i in range(100):
        w.record(f"m{i}".encode(), i, appended_at=float(i))
    assert w.find(b"m50", now=60.0) == 50
    assert w.find(b"m49", now=60.0) is None
    assert len(w) == 50


def test_a_clock_that_went_back_keeps_an_id_longer_never_shorter():
    w = DedupWindow(window=10.0)
    w.record(b"late-clock", 1, appended_at=200.0)
    w.record(b"early-clock", 2, appended_at=195.0)  # another writer's clock, 5 s behind
    assert w.find(b"early-clock", now=205.5) == 2  # past its own window, kept: never less
    assert w.find(b"early-clock", now=210.5) is None
