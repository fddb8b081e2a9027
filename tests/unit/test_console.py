"""The command line's tables and progress bar (embedlog/console.py)."""

from __future__ import annotations

import io

import pytest

from embedlog.console import Progress, duration, progress_line, table


def test_table_has_headers_and_aligns_numbers_right() -> None:
    text = table(["ID", "STATE"], [[7, "closed"], [12, "open"]])
    assert text.splitlines() == ["ID  STATE", " 7  closed", "12  open"]


def test_an_empty_table_still_has_its_headers() -> None:
    assert table(["LEDGER", "STATE"], []) == "LEDGER  STATE"


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0:00"), (59.6, "1:00"), (75, "1:15"), (3725, "1:02:05")]
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("done", "total", "elapsed", "text"),
    [
        (0, 4, 0.0, "[........] 0/4 ledgers 0.0/s time left unknown"),
        (1, 4, 2.0, "[##......] 1/4 ledgers 0.5/s 0:06 left"),
        (4, 4, 8.0, "[########] 4/4 ledgers 0.5/s done in 0:08"),
        (3, None, 1.5, "3 ledgers 2.0/s"),
    ],
)
def test_progress_line(done: int, total: int | None, elapsed: float, text: str) -> None:
    assert progress_line(done, total, "ledgers", elapsed, width=8) == text


def test_progress_off_a_terminal_writes_whole_lines_and_always_the_last() -> None:
    stream = io.StringIO()
    bar = Progress("entries", 3, stream=stream, every=3600)
    for n in (1, 2, 3):
        bar.update(n)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2  # the first, then nothing for an hour, but the last always
    assert lines[0].startswith("[") and "1/3 entries" in lines[0]
    assert "3/3 entries" in lines[1] and "done in" in lines[1]
    assert "\r" not in stream.getvalue()


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()
    bar = Progress("entries", 2, stream=stream, enabled=False)
    bar.update(2)
    bar.say("hello")
    assert stream.getvalue() == ""


def test_forced_progress_draws_where_work_stopped_and_a_finished_bar_once() -> None:
    stream = io.StringIO()
    bar = Progress("seeds", 10, stream=stream, every=3600)
    for n in (1, 2, 3, 4):
        bar.update(n)
    bar.update(4, force=True)  # stopped early (a violation): its count is still shown
    bar.update(10)
    bar.update(10, force=True)  # a finished bar again: not drawn twice
    lines = stream.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["1/10", "4/10", "10/10"]
